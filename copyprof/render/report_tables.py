"""The report's tables as plain data (title, columns, rows), shared by every text renderer.

Terminal, markdown and CSV draw the same tables so their numbers cannot drift apart.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from copyprof.analysis.results import PerStep, RunReport, Setup
from copyprof.models.layout import MLP_ONLY_KINDS, kind_label
from copyprof.render.headline import plural
from copyprof.vocabulary import CandidateForm


@dataclass
class TableData:
    key: str
    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    note: str | None = None
    as_list: bool = False
    """Two columns of which the second is prose (verdicts): drawn as "name: text" lines, which
    wrap like text instead of padding every row to the longest sentence."""


def fmt_ms(v: float | None, digits: int = 3) -> str:
    return "–" if v is None or v != v else f"{v:.{digits}f}"


def fmt_pct(v: float | None) -> str:
    return "–" if v is None or v != v else f"{v:.2f} %"


LOWER_BOUND_TITLE = ("Copies per decode step (median over steps) — LOWER BOUND: GPU work under graph launches is "
                     "missing from this trace")


def census_table(run: RunReport) -> TableData:
    """The census; from a trace that lost graph work every count reads "≥ n"."""
    ps = run.per_step
    floor = run.lower_bound
    title = (LOWER_BOUND_TITLE if floor else "Copies per decode step (median over steps)").replace(
        "decode step", run.steps.word)
    t = TableData("census", title, ["copy site", "per step", "ms/step"])
    none = not run.steps.decode  # no step counted: a median over no steps is no figure, not 0
    kinds = [k for k in ps.post_proj if k != "total"]

    def row(label: str, n: object, ms: float | None) -> list[object]:
        shown = f"≥ {n}" if floor and isinstance(n, int) else n
        ms_text = fmt_ms(None if none else ms)
        return [label, "–" if none else shown, f"≥ {ms_text}" if floor and not none and ms is not None else ms_text]

    for k in kinds:
        if k in MLP_ONLY_KINDS and not ps.post_proj[k]:  # a layer of one MLP or MoE block has no attention projection
            continue
        t.rows.append(row(f"post-projection, {kind_label(k)} layers", ps.post_proj[k], ps.post_proj_ms[k]))
    if kinds:
        t.rows.append(row("post-projection, total", ps.post_proj["total"], ps.post_proj_ms["total"]))
    t.rows.append(row("other device-to-device copies", ps.other, ps.other_ms))
    t.rows.append(row("all device-to-device copies", ps.copies, _sum(ps.post_proj_ms["total"], ps.other_ms)))
    if ps.host_copies is not None:
        t.rows.append(["host-side aten::copy_ ops (CPU trace)", ps.host_copies, "–"])
    t.note = run.attribution.message
    if floor and run.completeness is not None:
        t.note = f"{run.completeness.message}. {t.note}"
    return t


def _sum(a: float | None, b: float | None) -> float | None:
    return None if a is None and b is None else (a or 0.0) + (b or 0.0)


def sites_table(run: RunReport) -> TableData:
    with_source = any(s.source for s in run.sites)
    with_shape = any(s.shape for s in run.sites)
    title = "Copy sites" + (" — LOWER BOUND: per-step counts are at least these" if run.lower_bound else "")
    t = TableData("sites", title, ["site", "bytes", "per step", "µs/copy", "ms/step", "GB/s", "bound", "where",
                                   *(["shape"] if with_shape else []), *(["source"] if with_source else [])])
    for s in run.sites:
        size = f"≤{s.bytes:,}" if s.bytes_src == "grid-bound" else (f"{s.bytes:,}" if s.bytes >= 0 else "?")
        if s.bytes_src == "layout":
            size += " (layout)"
        gbps = "–" if s.achieved_gbps is None else f"{s.achieved_gbps:.0f}"
        t.rows.append([s.site, size, f"{s.per_step:.2f}".rstrip("0").rstrip("."), f"{s.median_us:.2f}",
                       fmt_ms(s.ms_per_step), gbps, s.bound or "–", s.where,
                       *([s.shape or "–"] if with_shape else []), *([s.source or "–"] if with_source else [])])
    if run.peak_gbps:
        t.note = f"GB/s against a peak of {run.peak_gbps:.0f} GB/s; under 25 % of peak counts as launch/latency-bound"
    return t


def by_source_table(run: RunReport) -> TableData:
    """The census by issuing function (``--by-source``)."""
    t = TableData("by_source", "Copies by issuing function (source frame; callers below it in JSON)",
                  ["source", "per step", "ms/step", "sites", "layers", "bytes"])
    for b in run.by_source:
        t.rows.append([b.source or f"(none: {b.note})", f"{b.per_step:.2f}".rstrip("0").rstrip("."),
                       fmt_ms(b.ms_per_step), ", ".join(b.sites), b.layers or "–",
                       ", ".join(f"{x:,}" for x in b.bytes) or "–"])
    m = run.source_match
    if m is not None:
        rate = "–" if m.rate is None else f"{100 * m.rate:.0f} %"
        t.note = (f"sources carried from {m.origin} by ({m.key}): {m.matched_per_step:g} of "
                  f"{m.copies_per_step:g} copies per step matched ({rate})")
    elif run.by_source and run.by_source[0].source is None and len(run.by_source) == 1:
        t.note = run.by_source[0].note
    return t


def estimate_table(run: RunReport) -> TableData:
    t = TableData("estimate", "Direct-return patch: removable cost per step",
                  ["scope", "copies removed", "removable ms (p10–p90)", "with dispatch gap", "share of step", "step with patch"])
    for e in run.estimate:
        if e.scope in MLP_ONLY_KINDS and not e.removed_per_step:  # no attention projection to return there
            continue
        rng = f"{fmt_ms(e.removable_ms)} ({fmt_ms(e.removable_p10_ms)}–{fmt_ms(e.removable_p90_ms)})"
        t.rows.append([_scope_label(e.scope, run), e.removed_per_step, rng,
                       fmt_ms(e.removable_with_gap_ms), fmt_pct(e.removable_pct), fmt_ms(e.period_with_patch_ms)])
    ps = run.per_step
    t.note = f"step period {fmt_ms(ps.period_ms)} ms (median, start to start), GPU span {fmt_ms(ps.gpu_span_ms)} ms"
    if run.lower_bound:
        t.title += " — LOWER BOUND (copies under graph launches are missing from the trace)"
    overhead = run.launch_overhead
    if overhead is not None and overhead.launch_bound:
        t.note += ("; the step period is set by graph-launch calls under the profiler (see warnings): the share of "
                   "step is of that inflated period")
    return t


def _scope_label(scope: str, run: RunReport) -> str:
    if scope != "all":
        return " + ".join(kind_label(k) for k in scope.split("+"))
    return " + ".join(kind_label(k) for k in run.per_step.post_proj if k != "total")


def by_rank_table(run: RunReport) -> TableData:
    kinds = [k for k in run.per_step.post_proj if k != "total"]
    t = TableData("by_rank", "Per rank (medians)", ["rank", "tokens", "period ms", "copies",
                                                    *(f"post-proj {kind_label(k)}" for k in kinds), "post-proj ms"])
    for rank, ps in sorted(run.by_rank.items(), key=lambda kv: int(kv[0])):
        floor = "≥ " if ps.lower_bound else ""  # that rank's trace lost graph work: its counts are floors
        t.rows.append([rank, ps.tokens if ps.tokens is not None else "–", fmt_ms(ps.period_ms), f"{floor}{ps.copies}",
                       *(f"{floor}{ps.post_proj.get(k, 0)}" for k in kinds), fmt_ms(ps.post_proj_ms["total"])])
    t.note = run.rank_agreement.message
    return t


def timing_table(run: RunReport) -> TableData:
    t = run.timing
    assert t is not None
    lo, hi = t.ci95_ms
    table = TableData("timing", "Replica A/B timing stored with this run (interleaved blocks, no profiler)",
                      ["quantity", "ms"])
    table.rows.append(["baseline step (median block)", fmt_ms(t.median_ms["baseline"])])
    table.rows.append(["candidate step (median block)", fmt_ms(t.median_ms["candidate"])])
    table.rows.append(["measured saving per step", f"{fmt_ms(t.measured_ms)} [{fmt_ms(lo)}, {fmt_ms(hi)}] 95 % CI"])
    table.note = f"{t.blocks} block pairs × {t.replays_per_block} replays, {t.timer}; {t.method}"
    return table


def candidates_table(run: RunReport, limit: int | None = None) -> TableData:
    """Every copy group, largest saving first: what it is, where, what removing it would save."""
    gap = any(c.gap_counts for c in run.candidates)
    t = TableData("candidates", "Copies to remove, largest saving first",
                  ["role", "per step", "layers", "bytes", "ms/step" + (" (+ gap)" if gap else ""), "share of step",
                   "steps to see", "issued by", "change"])
    shown = run.candidates[:limit] if limit else run.candidates
    for c in shown:
        ms = c.removable_with_gap_ms if c.gap_counts else c.removable_ms
        t.rows.append([c.role if c.form == CandidateForm.COPY else f"{c.role} (kernel)", f"{c.per_step:g}", _layers(c.layers),
                       ", ".join(f"{b:,}" for b in c.bytes[:3]), fmt_ms(ms, 4), fmt_pct(c.share_pct),
                       f"{c.steps_needed:,}" if c.steps_needed else "–", c.source or c.producer, c.change])
    if limit and len(run.candidates) > limit:
        t.note = f"{len(run.candidates) - limit} more with --candidates"
    else:
        t.note = ("ms/step: median over steps of the group's copy time" +
                  (", plus each replayed copy's dispatch gap (graph replay: the GPU runs the next node that much "
                   "earlier)" if gap else " (eager: a copy's gap is host launch time, not freed by a removal)") +
                  "; steps to see: decode steps per arm for an A/B of this run's step-period noise to detect it")
    return t


def _layers(layers: list[int]) -> str:
    if not layers:
        return "–"
    out, start, prev = [], layers[0], layers[0]
    for x in layers[1:] + [None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ", ".join(out)


def run_tables(run: RunReport, by_rank: bool = False, by_source: bool = False,
               candidates: bool = False) -> list[TableData]:
    tables = [census_table(run), sites_table(run)]
    if candidates:
        tables.append(candidates_table(run))
    if by_source:
        tables.append(by_source_table(run))
    if run.estimate:
        tables.append(estimate_table(run))
    if run.timing is not None and not run.timing_in_comparison:
        tables.append(timing_table(run))
    if by_rank or not run.rank_agreement.agree:
        tables.append(by_rank_table(run))
    return tables


def engine_words(st: Setup) -> str:
    """What vLLM chose, in words: ``vLLM V1 model runner, torch.compile (inductor), CUDA graphs FULL_AND_PIECEWISE``."""
    parts = []
    if st.model_runner:
        parts.append(f"vLLM {st.model_runner.upper()} model runner")
    if st.compilation == "NONE":
        parts.append("not compiled")
    elif st.compilation:
        parts.append(f"torch.compile ({st.compiled_by or st.compilation})")
    if st.cudagraph_mode:
        parts.append("no CUDA graphs" if st.cudagraph_mode == "NONE" else f"CUDA graphs {st.cudagraph_mode}")
    if st.attention_backends:
        parts.append("attention " + "/".join(st.attention_backends))
    return ", ".join(parts)


def setup_fields(run: RunReport) -> list[tuple[str, str]]:
    """Facts about the capture as (label, value), each as the inputs state it (analysis/setup.py)."""
    st = run.setup
    # an nsys export of several processes without MPI rank names numbers them by process id: processes, not ranks
    unit = "process" if run.metadata.get("rank_source") == "pid-order" else "rank"
    fields = [("device", str(run.device)),
              ("format", f"{run.format} / {run.flavour}" + (f" ({st.profiler})" if st.profiler else "")),
              (f"{unit}es" if unit == "process" else "ranks", f"{run.ranks} (headline {unit} {run.headline_rank})")]
    for value, label in ((st.engine, "engine"), (st.tp, "TP"),
                         (st.world_size if st.tp is None else None, "world size"), (st.concurrency, "concurrency"),
                         (st.graph_mode, "graph mode"), (st.vllm_version, "vLLM"), (st.vllm_commit, "vLLM commit"),
                         (st.torch_version, "torch"), (st.cuda_runtime, "CUDA runtime"), (st.hip_runtime, "HIP runtime"),
                         (st.aiter_version, "aiter"), (st.arm, "arm"), (st.captured, "captured")):
        if value not in (None, ""):
            fields.append((label, str(value)))
    engine = engine_words(st)
    if engine:
        fields.append(("engine choices", engine))
    layout = run.layout
    if layout:
        kinds = ", ".join(f"{n} {kind_label(k)}" for k, n in layout.kinds.items())
        fields.append(("layout", f"{layout.name} ({layout.layers} layers: {kinds})"))
    steps = run.steps
    fields.append(("steps", f"{plural(steps.decode, steps.word)} used, {steps.excluded} excluded, rule: {steps.rule}"))
    tok = run.per_step.tokens
    if tok is not None:
        fields.append(("tokens", f"N = {tok} tokens per step"))
    gpu = gpu_time_words(run.per_step)
    if gpu:
        fields.append(("GPU time", gpu))
    return fields


def gpu_time_words(ps: PerStep) -> str:
    """``GPU busy 0.966 ms per step (17 % of the step period), graph-replay span 0.979 ms``."""
    if ps.gpu_busy_ms is None:
        return ""
    share = f" ({100 * ps.gpu_busy_fraction:.0f} % of the step period)" if ps.gpu_busy_fraction is not None else ""
    replay = f", graph-replay span {fmt_ms(ps.gpu_replay_span_ms)} ms" if ps.gpu_replay_span_ms is not None else ""
    return f"GPU busy {fmt_ms(ps.gpu_busy_ms)} ms per step{share}{replay}"


def setup_lines(run: RunReport) -> list[str]:
    """The setup facts as the terminal prints them: ``device H200``, ``TP 1``, ...; the steps and
    tokens facts read as sentences of their own."""
    out = []
    for label, value in setup_fields(run):
        if label in ("steps", "tokens", "engine choices", "GPU time"):
            out.append(value)
        elif label == "format":
            out.append(value)
        else:
            out.append(f"{label} {value}")
    return out
