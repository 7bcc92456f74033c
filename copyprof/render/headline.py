"""One headline per report: what was found and, for an A/B, the verdict of the best measurement.

The same sentence opens every format (terminal, markdown, CSV, JSON), with the arms named as
the user named them. Built from the typed results only; no number is computed here.
"""
from __future__ import annotations

from copyprof.analysis.results import Comparison, RunReport
from copyprof.analysis.wording import VERDICT_PREFIX, fmt_ms
from copyprof.models.layout import kind_label


def plural(n: float, word: str, many: str | None = None) -> str:
    """``1 decode step``, ``2 decode steps``, ``1 copy``, ``3 copies`` (n as an integer when it is one)."""
    shown = f"{n:g}" if isinstance(n, float) and not float(n).is_integer() else f"{int(n):,}"
    if n == 1:
        return f"{shown} {word}"
    return f"{shown} {many or (word[:-1] + 'ies' if word.endswith('y') else word + 's')}"


def _missing(run: RunReport) -> str:
    """The lower-bound clause of a run whose trace lost GPU work under graph launches ("" otherwise)."""
    if not run.lower_bound:
        return ""
    return " — LOWER BOUND: GPU work under graph launches is missing from this trace, so every count is at least this"


def run_headline(run: RunReport, label: str) -> str:
    """The run's one-line finding; a count from a trace that lost graph work says it is a floor."""
    return _run_headline(run, label, "at least " if run.lower_bound else "") + _missing(run)


def _run_headline(run: RunReport, label: str, floor: str) -> str:
    ps = run.per_step
    if run.steps.decode == 0:
        return f"{label}: no decode steps found (rule: {run.steps.rule}) — nothing was counted"
    if ps.host_copies is not None:
        return (f"{label}: {plural(ps.host_copies, 'host aten::copy_ op')} per decode step over "
                f"{plural(run.steps.decode, 'step')} (a CPU-only trace: no device copies to count)")
    kinds = [k for k in ps.post_proj if k != "total"]
    total = ps.post_proj.get("total", 0)
    where = f" on {run.device}" if run.device else ""
    if floor and not ps.copies and not ps.post_proj.get("total", 0):
        return f"{label}: no device-to-device copy seen in {plural(run.steps.decode, 'decode step')}{where}"
    if not kinds:
        return (f"{label}: {floor}{plural(ps.copies, 'device-to-device copy')} per decode step{where} "
                f"({fmt_ms(ps.other_ms or 0.0)} ms/step) — pass --model to place them in the model's layers")
    if not total:
        seen = " seen" if floor else ""
        compiled = (f" (vLLM compiled the model with {run.setup.compiled_by}, which can remove `output[:] = ...` "
                    "copies)") if run.setup.compiled_by else ""
        return (f"{label}: no post-projection copies{seen} in this capture{where}{compiled}: nothing for a "
                f"direct-return patch to remove; {floor}{plural(ps.copies, 'other device-to-device copy')} per step "
                f"({fmt_ms(ps.other_ms or 0.0)} ms)")
    parts = " + ".join(f"{ps.post_proj[k]} {kind_label(k)}" for k in kinds if ps.post_proj[k])
    est = next((e for e in run.estimate if e.scope == "all"), None)
    cost = f"{fmt_ms(ps.post_proj_ms.get('total') or 0.0)} ms"
    if ps.period_ms:
        cost += f" of a {fmt_ms(ps.period_ms)} ms step"
    gap = f" (≈{fmt_ms(est.removable_with_gap_ms)} ms with their dispatch gaps)" if est else ""
    tail = "" if run.attribution.status == "ok" else f" [attribution {run.attribution.status}: see its note]"
    return (f"{label}: {floor}{plural(total, 'post-projection copy')} per decode step{where} ({parts}) take {cost}; "
            f"a direct-return patch would remove them{gap}{tail}")


def ab_headline(cmp: Comparison, names: list[str]) -> str:
    base, cand = names[0], names[1]
    head = f"{cand} vs {base}: "
    if not cmp.comparable:
        head += f"NOT COMPARABLE ({'; '.join(cmp.mismatch)}) — "
    if cmp.lower_bound_runs:
        which = " and ".join(names[i] for i in cmp.lower_bound_runs)
        head += (f"LOWER BOUND: GPU work under graph launches is missing from {which}'s trace, so its copy counts "
                 "are floors and a site change may be lost work — ")
    head += cmp.scope_text.rstrip(".")
    top = next((m for m in cmp.measures if m.name == cmp.best_measure), None)
    if top is None:
        return head + "; no measurement of the saving in these runs"
    lo, hi = top.ci95_ms
    ci = f"[{fmt_ms(lo)}, {fmt_ms(hi)}]" if lo is not None and hi is not None else "[no finite CI]"
    est = cmp.estimate_ms
    words = VERDICT_PREFIX.get(top.key, top.key)
    if top.supports == "kernel_plus_gap" and top.supported_error is not None:
        words += (f"; it supports the kernel + dispatch-gap estimate ({top.supported_error:+.0%} off): removing a "
                  "replayed copy also removes its dispatch gap")
    others = [m for m in cmp.measures if m is not top]
    support = ""
    if others:
        support = "; also " + ", ".join(f"{m.name} {fmt_ms(m.measured_ms)} ms" + (" (resolved)" if m.resolved else
                                                                                   " (not resolved)") for m in others)
    why = f" ({cmp.best_measure_note})" if cmp.best_measure_note else ""
    return (f"{head}. {top.name} (best resolution, MDE {fmt_ms(top.mde_ms) if top.mde_ms is not None else '∞'} ms{why}) "
            f"measures a saving of {fmt_ms(top.measured_ms)} ms/step {ci} against an estimate of "
            f"{fmt_ms(est['kernel'])} ms ({fmt_ms(est['kernel_plus_gap'])} ms with dispatch gaps): {words}{support}")


def report_headline(runs: list[RunReport], comparison: Comparison | None, labels: list[str]) -> str:
    if comparison is not None and len(runs) == 2:
        return ab_headline(comparison, labels)
    return run_headline(runs[0], labels[0])
