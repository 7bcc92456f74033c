"""One headline per report: what was found and, for an A/B, the verdict of the best measurement.

The same sentence opens every format (terminal, markdown, CSV, JSON), with the arms named as
the user named them. Built from the typed results only; no number is computed here.
"""
from __future__ import annotations

import math

from copyprof.analysis.ab.results import Comparison, Measure
from copyprof.analysis.results import RunReport
from copyprof.analysis.wording import fmt_ms
from copyprof.models.layout import kind_label
from copyprof.vocabulary import GPU_TIME_MEASURES, AttributionStatus, CandidateForm, MeasureName, Role, VerdictKey


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
    word = run.steps.word
    if run.steps.decode == 0:
        what = "no steps found" if run.steps.rule == "none" else f"no {word}s found (rule: {run.steps.rule})"
        return f"{label}: {what} — nothing was counted"
    if ps.host_copies is not None:
        return (f"{label}: {plural(ps.host_copies, 'host aten::copy_ op')} per {word} over "
                f"{plural(run.steps.decode, 'step')} (a CPU-only trace: no device copies to count)")
    kinds = [k for k in ps.post_proj if k != "total"]
    total = ps.post_proj.get("total", 0)
    where = f" on {run.device}" if run.device else ""
    if floor and not ps.copies and not ps.post_proj.get("total", 0):
        return f"{label}: no device-to-device copy seen in {plural(run.steps.decode, word)}{where}"
    if not kinds:
        return (f"{label}: {floor}{plural(ps.copies, 'device-to-device copy')} per {word}{where} "
                f"({fmt_ms(ps.other_ms or 0.0)} ms/{word.split()[-1]}) — pass --model to place them in the model's layers")
    if not total:
        seen = " seen" if floor else ""
        compiled = (f" (vLLM compiled the model with {run.setup.compiled_by}, which can remove `output[:] = ...` "
                    "copies)") if run.setup.compiled_by else ""
        top = next((c for c in run.candidates if c.form == CandidateForm.COPY and c.role != Role.METADATA), None)
        nxt = (f" The largest copy group left: {c_words(top)}.") if top is not None else ""
        return (f"{label}: no post-projection copies{seen} in this capture{compiled}: nothing for a direct-return "
                f"patch to remove.{nxt}")
    parts = " + ".join(f"{ps.post_proj[k]} {kind_label(k)}" for k in kinds if ps.post_proj[k])
    est = next((e for e in run.estimate if e.scope == "all"), None)
    graph = run.setup.graph_mode == "graph"
    ms = (est.removable_with_gap_ms if graph else est.removable_ms) if est else (ps.post_proj_ms.get("total") or 0.0)
    cost = _share(ms, ps.period_ms)
    how = " with their dispatch gaps" if graph and est else ""
    tail = "" if run.attribution.status == AttributionStatus.OK else f" (attribution {run.attribution.status}: see its note)"
    return (f"{label}: {floor}{plural(total, 'post-projection copy')} per {word} ({parts}){where}. A direct-return "
            f"patch removes them: {cost}{how}{tail}.")


def c_words(c: object) -> str:
    """``11 mlp-output copies per step, 0.0131 ms`` for a candidate (render/report_tables.py lists them all)."""
    ms = c.removable_with_gap_ms if c.gap_counts else c.removable_ms  # type: ignore[attr-defined]
    return f"{c.per_step:g} {c.role} copies per step, {fmt_ms(ms or 0.0)} ms"  # type: ignore[attr-defined]


def _share(ms: float | None, period: float | None) -> str:
    """``0.137 ms (0.42 % of the step)``; the share only where a step period is known."""
    if ms is None:
        return "? ms"
    if period:
        return f"{fmt_ms(ms)} ms ({fmt_ms(100 * ms / period, 2)} % of the step)"
    return f"{fmt_ms(ms)} ms"


def _ci(m: Measure) -> str:
    lo, hi = m.ci95_ms
    return f"95 % CI [{fmt_ms(lo)}, {fmt_ms(hi)}]" if lo is not None and hi is not None else "no finite CI"


# How the verdict of the measure the A/B rests on reads in the headline's second sentence.
_VERDICT_WORDS = {
    VerdictKey.CONSISTENT: "as estimated",
    VerdictKey.LARGER: "more than the estimate",
    VerdictKey.SMALLER: "less than the estimate",
    VerdictKey.OPPOSITE: "the opposite of the estimate",
    VerdictKey.NONE_NONE: "none expected, none measured",
    VerdictKey.NONE_MEASURED: "none expected, but one measured",
}


def ab_verdict_sentence(cmp: Comparison, period_ms: float | None) -> str:
    """The headline's second sentence: the verdict of the one measure the A/B rests on."""
    top = next((m for m in cmp.measures if m.name == cmp.best_measure), None)
    est = cmp.estimate_ms.kernel
    if top is None:
        return "Nothing measured the saving in these runs."
    if top.key == VerdictKey.UNMEASURED:
        pair = next((m for m in cmp.measures if m.key == VerdictKey.DESCRIPTIVE), None)
        apart = f"; these two runs are {fmt_ms(pair.measured_ms)} ms apart" if pair is not None else ""
        return (f"Not resolved: one boot per arm cannot tell the patch ({_share(est, period_ms)} estimated) from "
                f"boot-to-boot variation{apart}.")
    if top.key == VerdictKey.NOT_RESOLVABLE:
        need = f"; about {top.runs_needed:,} runs per arm would" if top.unit == "runs" and top.runs_needed else ""
        return (f"Not resolved by {top.name}: the estimate {_share(est, period_ms)} is under what "
                f"{top.n_baseline} vs {top.n_candidate} {top.unit} can see (MDE {fmt_ms(top.mde_ms or math.inf)} "
                f"ms){need}.")
    words = _VERDICT_WORDS.get(top.key, top.key)
    how = ""
    if top.name == MeasureName.GRAPH_REPLAY_SPAN and cmp.estimate_ms.kernel_plus_gap > 0:
        est, how = cmp.estimate_ms.kernel_plus_gap, " with dispatch gaps"
    sentence = (f"{top.name[0].upper()}{top.name[1:]} saving {_share(top.measured_ms, period_ms)}, {_ci(top)}: "
                f"{words} ({fmt_ms(est)} ms estimated{how}).")
    if top.name in GPU_TIME_MEASURES and cmp.gpu_bound is not None:
        # a GPU-time verdict says what the GPU saves; whether the wall clock sees it is the GPU's share of the step
        sentence += f" {cmp.gpu_bound.message[0].upper()}{cmp.gpu_bound.message[1:]}."
    return sentence


def aa_headline(cmp: Comparison) -> str:
    """An A/A: the spread of boots of identical code is the noise floor of the setup."""
    aa = cmp.aa
    top = next((m for m in cmp.measures if m.name == MeasureName.STEP_PERIOD), None)
    differ = aa.two_boots_differ_ms if aa is not None else None
    runs = aa.runs if aa is not None else (cmp.runs_per_arm.aa or 2)
    spread = (f"two boots differ by {fmt_ms(differ)} ms per step in step period (between-run SD "
              f"{fmt_ms(aa.between_runs_sd_ms or 0.0)} ms over {runs} runs)") if aa is not None and differ is not None \
        else "the between-run spread could not be measured"
    if aa is not None and aa.gpu_busy_two_boots_differ_ms is not None:
        spread += f", by {fmt_ms(aa.gpu_busy_two_boots_differ_ms)} ms in GPU busy time"
    # with more than two boots the pair shown in the tables is one of several: say how far apart it is
    measured = f"; the two shown: {fmt_ms(top.measured_ms)} ms apart" if top is not None and runs != 2 else ""
    return f"A/A ({runs} boots of the same code): {spread}{measured}. The noise floor of this setup, not a change."


def ab_headline(cmp: Comparison, names: list[str], period_ms: float | None = None) -> str:
    """Two short sentences: what changed, in the roles the tables use, and the verdict of the
    one measure it rests on (ms and share of the step); a verdict on the GPU's own time adds
    whether the step is GPU-bound, so it never reads as a wall-clock promise."""
    if cmp.is_aa:
        return aa_headline(cmp)
    base, cand = names[0], names[1]
    head = f"{cand} vs {base}: "
    if not cmp.comparable:
        head += f"NOT COMPARABLE ({'; '.join(cmp.mismatch)}) — "
    if cmp.lower_bound_runs:
        which = " and ".join(names[i] for i in cmp.lower_bound_runs)
        head += f"LOWER BOUND: GPU work under graph launches is missing from {which}'s trace — "
    return f"{head}{cmp.scope_text.rstrip('.')}. {ab_verdict_sentence(cmp, period_ms)}"


def report_headline(runs: list[RunReport], comparison: Comparison | None, labels: list[str]) -> str:
    if comparison is not None and len(runs) == 2:
        return ab_headline(comparison, labels, runs[0].per_step.period_ms)
    return run_headline(runs[0], labels[0])
