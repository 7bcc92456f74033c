"""The report's tables as plain data (title, columns, rows), shared by every text renderer.

Terminal, markdown and CSV draw the same tables so their numbers cannot drift apart.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TableData:
    key: str
    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    note: str | None = None


def fmt_ms(v: float | None, digits: int = 3) -> str:
    return "–" if v is None or v != v else f"{v:.{digits}f}"


def fmt_pct(v: float | None) -> str:
    return "–" if v is None or v != v else f"{v:.2f} %"


def census_table(run: dict[str, Any]) -> TableData:
    ps = run["per_step"]
    t = TableData("census", "Copies per decode step (median over steps)", ["copy site", "per step", "ms/step"])
    none = not run["steps"]["decode"]  # no step counted: a median over no steps is no figure, not 0 (issue 15)
    n = (lambda v: "–") if none else (lambda v: v)  # noqa: E731
    t.rows.append(["post-projection, MLA layers", n(ps["post_proj"]["mla"]), fmt_ms(None if none else ps["post_proj_ms"]["mla"])])
    t.rows.append(["post-projection, KDA layers", n(ps["post_proj"]["kda"]), fmt_ms(None if none else ps["post_proj_ms"]["kda"])])
    t.rows.append(["post-projection, total", n(ps["post_proj"]["total"]), fmt_ms(None if none else ps["post_proj_ms"]["total"])])
    t.rows.append(["other device-to-device copies", n(ps["other"]), fmt_ms(None if none else ps["other_ms"])])
    t.rows.append(["all device-to-device copies", n(ps["copies"]),
                   fmt_ms(None if none else _sum(ps["post_proj_ms"]["total"], ps["other_ms"]))])
    if ps.get("host_copies") is not None:
        t.rows.append(["host-side aten::copy_ ops (CPU trace)", ps["host_copies"], "–"])
    t.note = run["attribution"].get("message")
    return t


def _sum(a: float | None, b: float | None) -> float | None:
    return None if a is None and b is None else (a or 0.0) + (b or 0.0)


def sites_table(run: dict[str, Any]) -> TableData:
    t = TableData("sites", "Copy sites", ["site", "bytes", "per step", "µs/copy", "ms/step", "GB/s", "bound", "where"])
    for s in run["sites"]:
        size = f"≤{s['bytes']:,}" if s["bytes_src"] == "grid-bound" else (f"{s['bytes']:,}" if s["bytes"] >= 0 else "?")
        if s["bytes_src"] == "layout":
            size += " (layout)"
        gbps = "–" if s["achieved_gbps"] is None else f"{s['achieved_gbps']:.0f}"
        t.rows.append([s["site"], size, f"{s['per_step']:.2f}".rstrip("0").rstrip("."), f"{s['median_us']:.2f}",
                       fmt_ms(s["ms_per_step"]), gbps, s["bound"] or "–", s["where"]])
    if run.get("peak_gbps"):
        t.note = f"GB/s against a peak of {run['peak_gbps']:.0f} GB/s; under 25 % of peak counts as launch/latency-bound"
    return t


def estimate_table(run: dict[str, Any]) -> TableData:
    t = TableData("estimate", "Direct-return patch: removable cost per step",
                  ["scope", "copies removed", "removable ms (p10–p90)", "with dispatch gap", "share of step", "step with patch"])
    for e in run["estimate"]:
        rng = f"{fmt_ms(e['removable_ms'])} ({fmt_ms(e['removable_p10_ms'])}–{fmt_ms(e['removable_p90_ms'])})"
        t.rows.append([e["scope"].upper() if e["scope"] != "all" else "MLA + KDA", e["removed_per_step"], rng,
                       fmt_ms(e["removable_with_gap_ms"]), fmt_pct(e["removable_pct"]), fmt_ms(e["period_with_patch_ms"])])
    ps = run["per_step"]
    t.note = f"step period {fmt_ms(ps['period_ms'])} ms (median, start to start), GPU span {fmt_ms(ps['gpu_span_ms'])} ms"
    return t


def by_rank_table(run: dict[str, Any]) -> TableData:
    t = TableData("by_rank", "Per rank (medians)", ["rank", "tokens", "period ms", "copies", "post-proj MLA", "post-proj KDA", "post-proj ms"])
    for rank, ps in sorted(run["by_rank"].items(), key=lambda kv: int(kv[0])):
        t.rows.append([rank, ps["tokens"] if ps["tokens"] is not None else "–", fmt_ms(ps["period_ms"]), ps["copies"],
                       ps["post_proj"]["mla"], ps["post_proj"]["kda"], fmt_ms(ps["post_proj_ms"]["total"])])
    t.note = run["rank_agreement"]["message"]
    return t


def timing_table(run: dict[str, Any]) -> TableData:
    t = run["timing"]
    lo, hi = t["ci95_ms"]
    table = TableData("timing", "Replica A/B timing stored with this run (interleaved blocks, no profiler)",
                      ["quantity", "ms"])
    table.rows.append(["baseline step (median block)", fmt_ms(t["median_ms"]["baseline"])])
    table.rows.append(["candidate step (median block)", fmt_ms(t["median_ms"]["candidate"])])
    table.rows.append(["measured saving per step", f"{fmt_ms(t['measured_ms'])} [{fmt_ms(lo)}, {fmt_ms(hi)}] 95 % CI"])
    table.note = f"{t['blocks']} block pairs × {t['replays_per_block']} replays, {t['timer']}; {t['method']}"
    return table


def run_tables(run: dict[str, Any], by_rank: bool = False) -> list[TableData]:
    tables = [census_table(run), sites_table(run)]
    if run["estimate"]:
        tables.append(estimate_table(run))
    if run.get("timing") and not run.get("timing_in_comparison"):
        tables.append(timing_table(run))
    if by_rank or not run["rank_agreement"]["agree"]:
        tables.append(by_rank_table(run))
    return tables


def setup_lines(run: dict[str, Any]) -> list[str]:
    """Facts about the capture, from trace metadata and run.json."""
    md = run.get("metadata", {})
    rj = md.get("run", {}) if isinstance(md.get("run"), dict) else {}
    layout = run["layout"]
    parts = [f"device {run['device']}", f"{run['format']} / {run['flavour']}",
             f"ranks {run['ranks']} (headline rank {run['headline_rank']})"]
    for key, label in (("vllm_version", "vLLM"),):
        if md.get(key):
            parts.append(f"{label} {md[key]}")
    for key in ("engine", "tp", "concurrency", "graph_mode", "torch_version", "cuda_version", "vllm_version", "arm"):
        if rj.get(key) not in (None, ""):
            parts.append(f"{key.replace('_', ' ')} {rj[key]}")
    if layout:
        parts.append(f"layout {layout['name']} ({layout['layers']} layers: {layout['mla_layers']} MLA, {layout['kda_layers']} KDA)")
    steps = run["steps"]
    parts.append(f"{steps['decode']} decode steps used, {steps['excluded']} excluded, rule: {steps['rule']}")
    tok = run["per_step"]["tokens"]
    if tok is not None:
        parts.append(f"N = {tok} tokens per step")
    return parts
