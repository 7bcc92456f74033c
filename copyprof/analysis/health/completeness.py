"""Does the trace hold the GPU work its graph launches ran? If not, every copy count is a floor.

Why: ROCTracer drops kernel-dispatch events of HIP-graph replay (ROCm/ROCm#6102,
fixed in ROCm 7.2.2; torch wheels vendor their own roctracer and HIP under ``torch/lib``, so an
upgraded ROCm does not help: sgl-project/sglang#35390 measured 448 of 512 kernels per replay,
and 513 kernel events where a working runtime records ~3,930); stock ROCm vLLM images can show
``hipGraphLaunch`` and no kernel at all (AMD-AGI/Hyperloom#747). A census of such a trace
undercounts copies silently — the number a reviewer acts on. Each graph launch's GPU ops are
therefore compared with what the same graph ran elsewhere:

* **no GPU work**: a launch whose correlation id no GPU op carries (the last launch of the
  trace is spared when no GPU op starts after it: the profile window may have closed first;
  likewise a short last launch whose ops are the trace's last GPU work);
* **graph nodes**: where ops carry graph / node ids, a launch that shows fewer distinct nodes
  than its graph shows over all launches;
* **replays**: launches at the same place (k-th of n) in annotated steps of the same token
  count replay one graph, so they run the same number of ops; fewer than the most is short.
  Without step annotations or graph ids nothing tells which launches replay one graph
  (engines replay several graphs, e.g. piecewise capture), and no such comparison is made;
* **eager steps**: a decode step of the same run and token count launched without a graph
  runs the same model: a graph step with less than ``EAGER_SHARE`` of its GPU ops is short;
* **capture**: a graph captured inside the trace (``*StreamBeginCapture`` …
  ``*StreamEndCapture`` on one thread) says how many ops one replay runs — its kernel,
  memcpy and memset launch calls; a later launch below that (below the smallest capture when
  there are several) is short.

A check that cannot run says so in ``checks``; ``complete`` means no check that ran found a
short launch, not that completeness was proven.
"""
from __future__ import annotations

import re

import numpy as np

from copyprof.analysis.health.graph_launches import GraphLaunches
from copyprof.analysis.results import Completeness
from copyprof.analysis.steps.segment import Steps
from copyprof.columns import Columns
from copyprof.grouping import distinct, group_ids, median
from copyprof.vocabulary import CompletenessStatus

# A graph step with less than this share of an eager step's GPU ops (same run, same tokens) is
# short. Chosen, not measured: eager and graph replay of one model run the same kernels, but
# graph capture can fold a few host-driven ops; the reported losses are 12.5 % (448/512) and
# more, so a tenth of slack keeps a false alarm unlikely without hiding those.
EAGER_SHARE = 0.9
ROCM_CAUSE = "known ROCTracer defect, ROCm < 7.2.2 or a torch wheel vendoring it"
OTHER_CAUSE = "the profiler recorded the graph launches but not all the work they ran"
ROCM_REFS = "ROCm/ROCm#6102, sgl-project/sglang#35390, AMD-AGI/Hyperloom#747"
_BEGIN = re.compile(r"^(hip|cuda|cu)StreamBeginCapture")
_END = re.compile(r"^(hip|cuda|cu)StreamEndCapture")
# Calls that put a node into a graph being captured (kernel, memcpy and memset nodes; each
# replays as one GPU op). Event record/wait and host nodes run no GPU op and are not counted.
# Names as roctracer and rocprofiler-sdk write HIP API rows (TraceLens's ROCm capture traces show
# hipStreamBeginCapture ... hipGraphInstantiateWithFlags); kineto's CUPTI path traces only the
# runtime callbacks it registers (CuptiCbidRegistry.cpp), so CUDA traces may hold no capture.
_NODE_CALL = re.compile(r"^(hip|cuda|cu)(\w*LaunchKernel\w*|Memcpy\w*Async\w*|MemcpyWithStream|Memset\w*Async\w*)$")


def lower_bound_wording(rocm: bool) -> str:
    """The sentence every output format carries when work is missing."""
    return (f"GPU work under graph launches is missing from this trace ({ROCM_CAUSE if rocm else OTHER_CAUSE}): "
            "copy counts are a lower bound")


def is_rocm_trace(fmt: str, flavour: str, launches: GraphLaunches) -> bool:
    return (flavour.startswith(("roctracer", "rocprofiler-sdk")) or fmt.startswith("rocprof") or fmt == "rocpd"
            or any(n.startswith("hip") for n in launches.names))


def check_completeness(events: Columns, steps: Steps, launches: GraphLaunches, *, rocm: bool) -> Completeness:
    """The completeness record of one rank's trace (module docstring)."""
    n = len(launches)
    if not n:
        return Completeness(status=CompletenessStatus.NO_GRAPH_LAUNCHES, checks=["the trace has no graph launches: nothing to check"])
    short = np.zeros(n, dtype=bool)
    missing = np.zeros(n, dtype=np.int64)  # ops known missing per launch (a floor)
    checks: list[str] = []
    empty = _empty(launches, checks)
    _by_nodes(launches, short, missing, checks)
    _by_replays(launches, steps, short, missing, checks)
    _by_capture(events, launches, short, missing, checks)
    eager_steps, eager_missing = _by_eager_steps(launches, steps, checks)
    short &= ~empty
    if short[-1] and launches.final_ops_last_start_ns >= launches.last_gpu_start_ns:
        short[-1] = False  # the trace ends inside the last replay: the window may have closed during it
        missing[-1] = 0
        checks.append("the last launch is not counted as short: the trace ends inside its replay")
    flagged_steps = set(launches.step[short & (launches.step >= 0)].tolist()) | eager_steps
    lost = bool(empty.any() or short.any() or eager_steps)
    out = Completeness(
        status=CompletenessStatus.LOWER_BOUND if lost else CompletenessStatus.COMPLETE, graph_launches=n,
        launches_without_gpu_work=int(empty.sum()), launches_short=int(short.sum()),
        gpu_ops_per_launch=float(median(launches.n_ops)), missing_gpu_ops=int(missing.sum()) + eager_missing,
        steps_flagged=len(flagged_steps), checks=checks)
    if lost:
        out.message = _message(out, launches, rocm)
    return out


def _empty(launches: GraphLaunches, checks: list[str]) -> np.ndarray:
    empty = launches.n_ops == 0
    spared = ""
    if empty[-1] and launches.start_ns[-1] > launches.last_gpu_start_ns:
        empty[-1] = False  # its work may have run after the profile window closed
        spared = " (the last launch is not counted: no GPU op starts after it, the window may have closed first)"
    checks.append(f"launches with no GPU op: {int(empty.sum()):,} of {len(empty):,}{spared}")
    return empty


def _by_nodes(launches: GraphLaunches, short: np.ndarray, missing: np.ndarray, checks: list[str]) -> None:
    known = launches.nodes_expected > 0
    if not known.any():
        checks.append("graph node ids: not in this trace")
        return
    fewer = known & (launches.nodes_seen < launches.nodes_expected) & (launches.n_ops > 0)
    short |= fewer
    missing[fewer] = np.maximum(missing[fewer], launches.nodes_expected[fewer] - launches.nodes_seen[fewer])
    graphs = len(distinct(launches.graph_id[known]))
    checks.append(f"graph node ids: {int(known.sum()):,} launches of {graphs} graph(s); "
                  f"{int(fewer.sum()):,} show fewer nodes than their graph shows elsewhere")


def _by_replays(launches: GraphLaunches, steps: Steps, short: np.ndarray, missing: np.ndarray,
                checks: list[str]) -> None:
    if not steps.rule.startswith("annotation"):
        checks.append("replays not compared: without step annotations nothing tells which launches replay one graph")
        return
    table = steps.table
    tokens = dict(zip(table["step"].tolist(), (_int_or(v, -1) for v in table["tokens"].tolist())))
    placed = np.flatnonzero((launches.step >= 0) & (launches.n_ops > 0))
    if not len(placed):
        checks.append("replays not compared: no launch's GPU ops fall in a step")
        return
    step, ops = launches.step[placed], launches.n_ops[placed]
    by_step, _ = group_ids(step)
    position = _cumcount(by_step)  # launches are in time order
    launches_in_step = np.bincount(by_step)[by_step]
    tok = np.array([tokens.get(s, -1) for s in step.tolist()], dtype=np.int64)
    gid, _ = group_ids(tok, launches_in_step, position)
    most = np.full(int(gid.max()) + 1, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(most, gid, ops)
    most = most[gid]
    group = np.bincount(gid)[gid]
    fewer = (group > 1) & (ops < most)
    i = placed[fewer]
    short[i] = True
    missing[i] = np.maximum(missing[i], (most - ops)[fewer])
    compared = int((group > 1).sum())
    groups = len(distinct(gid[group > 1]))
    if not compared:
        checks.append(f"replays: no two of the {len(placed):,} launches in steps replay the same graph "
                      "(same tokens, same place in the step): nothing to compare")
        return
    checks.append(f"replays compared (same tokens, same place in the step): {compared:,} launches in {groups} group(s); "
                  f"{int(fewer.sum()):,} ran fewer GPU ops than the same graph's other replays")


def _by_eager_steps(launches: GraphLaunches, steps: Steps, checks: list[str]) -> tuple[set[int], int]:
    """Graph decode steps with clearly fewer GPU ops than eager decode steps of the same tokens."""
    table = steps.table
    if not steps.rule.startswith("annotation") or table.empty:
        checks.append("eager steps: none to compare with")
        return set(), 0
    step = table["step"]
    with_graph = np.isin(step, launches.step[launches.step >= 0])
    tokens = table["tokens"].tolist()
    # decode steps of known tokens (is_decode None is not a decode step)
    decode = np.array([_known(d) and bool(d) and _known(v) for v, d in zip(tokens, table["is_decode"].tolist())],
                      dtype=bool)
    n_events = table["n_events"]
    eager, graph = np.flatnonzero(decode & ~with_graph), np.flatnonzero(decode & with_graph)
    per_tokens: dict[int, list[int]] = {}  # eager decode steps' GPU op counts by tokens
    for i in eager.tolist():
        per_tokens.setdefault(tokens[i], []).append(int(n_events[i]))
    ref = {t: float(median(np.asarray(v, dtype=float))) for t, v in per_tokens.items()}
    both = np.array([i for i in graph.tolist() if tokens[i] in ref], dtype=np.int64)
    if not len(both):
        checks.append("eager steps: no eager decode step of the same tokens as a graph step")
        return set(), 0
    want = np.array([ref[tokens[i]] for i in both.tolist()], dtype=float)
    fewer = n_events[both] < EAGER_SHARE * want
    lost = int(np.clip(want[fewer] - n_events[both][fewer], 0, None).sum())
    checks.append(f"eager steps: {len(both):,} graph steps compared with {len(eager):,} eager decode steps of the same "
                  f"tokens; {int(fewer.sum()):,} ran less than {EAGER_SHARE:.0%} of their GPU ops")
    return {int(s) for s in step[both][fewer].tolist()}, lost


def _by_capture(events: Columns, launches: GraphLaunches, short: np.ndarray, missing: np.ndarray,
                checks: list[str]) -> None:
    captures = graph_captures(events)
    if not captures:
        checks.append("graph captures in the trace: none")
        return
    sizes = sorted({nodes for _, nodes in captures})
    floor = sizes[0]
    after = launches.start_ns >= min(end for end, _ in captures)
    fewer = after & (launches.n_ops > 0) & (launches.n_ops < floor)
    short |= fewer
    missing[fewer] = np.maximum(missing[fewer], floor - launches.n_ops[fewer])
    which = f"{floor:,} ops" if len(sizes) == 1 else f"{len(sizes)} captures of {floor:,}–{sizes[-1]:,} ops; the smallest"
    checks.append(f"graph captures in the trace: {len(captures)} ({which}); {int(after.sum()):,} later launches, "
                  f"{int(fewer.sum()):,} ran fewer GPU ops than a replay runs")


def graph_captures(events: Columns) -> list[tuple[int, int]]:
    """(end time, node-making calls) of each stream capture in the trace, paired per thread.
    Names are matched once per distinct name; rows are gathered only when a capture exists."""
    names = [str(n) for n in events["name"].categories.tolist()]
    begin_codes = [i for i, n in enumerate(names) if _BEGIN.match(n)]
    if not begin_codes:
        return []
    end_codes = [i for i, n in enumerate(names) if _END.match(n)]
    node_codes = [i for i, n in enumerate(names) if _NODE_CALL.match(n)]
    codes = events["name"].codes
    rows = np.flatnonzero((events["kind"] == "runtime") & np.isin(codes, begin_codes + end_codes + node_codes))
    code = codes[rows]
    begin, end, node = np.isin(code, begin_codes), np.isin(code, end_codes), np.isin(code, node_codes)
    start = events["start_ns"][rows]
    thread = events["stream"][rows]
    out = []
    for tid in distinct(thread[begin]).tolist():
        mine = thread == tid
        ends = np.sort(start[end & mine])
        for b in np.sort(start[begin & mine]).tolist():
            after = ends[ends > b]
            if not len(after):
                continue
            e = int(after[0])
            out.append((e, int((node & mine & (start > b) & (start < e)).sum())))
    return [c for c in out if c[1] > 0]


def _known(value: object) -> bool:
    """Not None and not NaN: a known value of a column that may hold either."""
    return value is not None and value == value


def _int_or(value: object, missing: int) -> int:
    """An int column value as int; ``missing`` for None / NaN."""
    return int(value) if _known(value) else missing  # type: ignore[call-overload]


def _cumcount(gid: np.ndarray) -> np.ndarray:
    """Each row's place among the rows of its group, in row order (0 for a group's first row)."""
    order = np.argsort(gid, kind="stable")
    sorted_gid = gid[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_gid[1:] != sorted_gid[:-1])))
    first = np.repeat(starts, np.diff(np.append(starts, len(gid))))
    out = np.empty(len(gid), dtype=np.int64)
    out[order] = np.arange(len(gid)) - first
    return out


def _message(c: Completeness, launches: GraphLaunches, rocm: bool) -> str:
    parts = []
    if c.launches_without_gpu_work:
        parts.append(f"{c.launches_without_gpu_work:,} of {c.graph_launches:,} graph launches show no GPU op")
    if c.launches_short:
        parts.append(f"{c.launches_short:,} show fewer GPU ops than the same graph runs elsewhere")
    if c.steps_flagged:
        parts.append(f"{c.steps_flagged:,} counted step(s) are affected")
    if c.missing_gpu_ops:
        parts.append(f"at least {c.missing_gpu_ops:,} GPU ops are missing")
    refs = f"; see {ROCM_REFS}" if rocm else ""
    return f"{lower_bound_wording(rocm)} — {'; '.join(parts)}{refs}"
