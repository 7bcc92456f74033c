"""Tables of a baseline-vs-candidate comparison, with the arms named as the user named them."""
from __future__ import annotations

import math

from copyprof.analysis.ab.results import Comparison
from copyprof.analysis.wording import VERDICT_CELL
from copyprof.analysis.wording import fmt_ms as significant
from copyprof.render.report_tables import TableData


def fmt_ms(v: float | None) -> str:
    """Milliseconds to 3 significant digits (an A/B's effects are often microseconds)."""
    return "–" if v is None or not math.isfinite(v) else significant(v)

ESTIMATE_WORDS = {"kernel": "copy kernel time", "kernel_plus_gap": "kernel time + dispatch gap"}


def _per(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


def _ci(lo: float | None, hi: float | None) -> str:
    return f"[{fmt_ms(lo)}, {fmt_ms(hi)}]" if lo is not None and hi is not None else "[no finite interval]"


def changes_table(cmp: Comparison, names: list[str]) -> TableData:
    t = TableData("site_changes", "Copy sites that changed", ["site", "bytes", f"{names[0]} /step", f"{names[1]} /step", "status"])
    for r in cmp.site_changes:
        t.rows.append([r.site, f"{r.bytes:,}" if r.bytes >= 0 else "?", _per(r.baseline_per_step),
                       _per(r.candidate_per_step), r.status])
    if not t.rows:
        t.rows.append(["(none)", "", "", "", "same copies per step"])
    t.note = cmp.scope_text
    return t


def ab_table(cmp: Comparison, names: list[str]) -> TableData:
    """Estimates, then every measurement of the saving (best first), with its resolution."""
    base, cand = names
    t = TableData("ab", f"A/B: saving per decode step ({base} − {cand}; positive = {cand} faster)",
                  ["quantity", "ms", "95 % CI", "resolves (MDE)", "observations", "verdict"])
    for key, words in ESTIMATE_WORDS.items():
        t.rows.append([f"estimate: {words}", fmt_ms(getattr(cmp.estimate_ms, key)), "", "", "", ""])
    ordered = sorted(cmp.measures, key=lambda m: m.name != cmp.best_measure)
    for m in ordered:
        best = " (best)" if m.name == cmp.best_measure else ""
        t.rows.append([f"measured: {m.name}{best}", fmt_ms(m.measured_ms), _ci(*m.ci95_ms),
                       fmt_ms(m.mde_ms) if m.mde_ms is not None else "∞",
                       f"{m.n_baseline} vs {m.n_candidate} {m.unit}", VERDICT_CELL[m.key]])
    if cmp.noise_ms:
        t.rows.append([f"step-period noise per step (MAD×1.4826), {base} / {cand}",
                       f"{fmt_ms(cmp.noise_ms.baseline)} / {fmt_ms(cmp.noise_ms.candidate)}", "", "", "", ""])
    if cmp.steps_needed:
        t.rows.append([f"decode steps per arm for the step period to resolve {fmt_ms(cmp.estimate_ms.kernel)} ms",
                       str(cmp.steps_needed), "", "", "", ""])
    if cmp.method:
        t.note = f"step period: {cmp.method}; MDE at 80 % power"
    if cmp.best_measure_note:
        t.note = f"{t.note}; {cmp.best_measure_note}" if t.note else cmp.best_measure_note
    return t


def verdict_table(cmp: Comparison, names: list[str]) -> TableData:
    """The verdict of every measurement in words, the best first."""
    t = TableData("verdict", "Verdicts", ["measurement", "verdict"], as_list=True)
    if cmp.mismatch:
        t.rows.append(["arms", f"NOT COMPARABLE: {'; '.join(cmp.mismatch)} — only the patch should differ"])
    for i in cmp.lower_bound_runs:
        t.rows.append([names[i], "LOWER BOUND: GPU work under graph launches is missing from its trace; its copy "
                       "counts are floors and a site that seems gone may only be lost"])
    ordered = sorted(cmp.measures, key=lambda m: m.name != cmp.best_measure)
    for m in ordered:
        t.rows.append([m.name + (" (best)" if m.name == cmp.best_measure else ""), m.verdict])
    if not ordered:
        t.rows.append(["step period", cmp.verdict])
    return t


def groups_table(cmp: Comparison, names: list[str]) -> TableData:
    """Every copy group the candidate changed, with the baseline's time for the copies that went."""
    t = TableData("group_changes", "Copy groups that changed",
                  ["role", f"{names[0]} /step", f"{names[1]} /step", "status", "estimate ms", "issued by"])
    for g in cmp.group_changes:
        t.rows.append([g.role, _per(g.baseline_per_step), _per(g.candidate_per_step), g.status,
                       fmt_ms(g.estimate_ms), g.source or g.producer])
    if not t.rows:
        t.rows.append(["(none)", "", "", "same copies per step", "", ""])
    return t


def comparison_tables(cmp: Comparison, names: list[str]) -> list[TableData]:
    return [groups_table(cmp, names), ab_table(cmp, names), verdict_table(cmp, names)]
