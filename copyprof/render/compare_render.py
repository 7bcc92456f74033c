"""Tables and markdown for a baseline-vs-candidate comparison."""
from __future__ import annotations

from copyprof.analysis.results import Comparison
from copyprof.render.report_tables import TableData, fmt_ms


def _per(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


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
    t = TableData("ab", f"A/B: saving per decode step ({names[0]} − {names[1]}; positive = {names[1]} faster)",
                  ["quantity", "ms"])
    est = cmp.estimate_ms
    t.rows.append(["estimate: copy kernel time", fmt_ms(est["kernel"])])
    t.rows.append(["estimate: kernel + dispatch gap", fmt_ms(est["kernel_plus_gap"])])
    if cmp.measured_ms is not None and cmp.ci95_ms is not None and cmp.noise_ms is not None:
        lo, hi = cmp.ci95_ms
        t.rows.append(["measured: step period (Hodges–Lehmann)", f"{fmt_ms(cmp.measured_ms)} [{fmt_ms(lo)}, {fmt_ms(hi)}] 95 % CI"])
        if cmp.gpu_span:
            g = cmp.gpu_span
            t.rows.append(["measured: GPU span", f"{fmt_ms(g['measured_ms'])} [{fmt_ms(g['ci95_ms'][0])}, {fmt_ms(g['ci95_ms'][1])}]"])
        n = cmp.noise_ms
        t.rows.append(["noise per step (MAD×1.4826)", f"{fmt_ms(n['baseline'])} / {fmt_ms(n['candidate'])}"])
        t.rows.append(["minimum detectable effect (80 % power)", fmt_ms(cmp.mde_ms) if cmp.mde_ms is not None else "∞"])
        if cmp.steps_needed:
            t.rows.append(["decode steps per arm to resolve the estimate", str(cmp.steps_needed)])
        ns = cmp.n_steps or {}
        t.note = f"{ns.get('baseline')} vs {ns.get('candidate')} steps; {cmp.method or ''}"
        if cmp.estimator:
            e = cmp.estimator
            t.rows.append(["estimate the A/B supports", f"{e['supported']} ({e['basis']})"])
    for extra, label in ((cmp.timing, "replica timing (interleaved blocks)"), (cmp.client, "client TPOT per request")):
        if extra and extra.get("measured_ms") is not None:
            lo, hi = extra["ci95_ms"]
            t.rows.append([f"measured: {label}", f"{fmt_ms(extra['measured_ms'])} [{fmt_ms(lo)}, {fmt_ms(hi)}]"])
    return t


def comparison_tables(cmp: Comparison, names: list[str]) -> list[TableData]:
    verdict = TableData("verdict", "Verdict", ["", ""], [["", cmp.verdict]])
    return [changes_table(cmp, names), ab_table(cmp, names), verdict]


def comparison_markdown(cmp: Comparison, names: list[str]) -> str:
    from copyprof.render.report_text import markdown_table

    parts = [f"### A/B: {names[0]} vs {names[1]}", markdown_table(changes_table(cmp, names)),
             markdown_table(ab_table(cmp, names)), f"**Verdict.** {cmp.verdict}"]
    for name, extra in (("Timing", cmp.timing), ("Client", cmp.client)):
        if extra and extra.get("verdict"):
            parts.append(f"**{name} verdict.** {extra['verdict']}")
    return "\n\n".join(parts)
