"""Every graph launch of a trace with the GPU work the trace shows for it.

Why a module of its own: the completeness check (completeness.py: does the trace hold the work
its graph launches ran?) and the overhead check (launch_overhead.py: do the launch calls hold
up the GPU?) both start from the same table — each ``cudaGraphLaunch`` / ``hipGraphLaunch``
runtime call, how many GPU ops carry its correlation id, which step those ops are in — and it
is built once, with one blockwise lookup over the GPU ops (no table-sized temporaries).

Graph identity: CUPTI writes ``graph id`` / ``graph node id`` on every kernel (0 for kernels
outside a graph; kineto ``CuptiActivity.h`` ``addGraphNodeTypedMetadata``, CUDA >= 12), nsys
``graphId`` / ``graphNodeId``, rocprofv3 and rocpd ``graph_exec_id`` / ``graph_node_id``; ROCm
kineto gains them with pytorch/kineto#1567 (open when this was written: ``graph id`` and
``graph node id``, the node being the dispatch's ordinal in its launch). Where the ops carry
them, a launch's graph is the graph id of its ops and the graph's nodes are every node id seen
under that id.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from copyprof.analysis.steps.rows import ROWS_PER_PASS
from copyprof.analysis.steps.segment import GPU_KINDS, Steps
from copyprof.columns import Columns
from copyprof.grouping import distinct
from copyprof.taxonomy.copies import is_graph_launch


@dataclass
class GraphLaunches:
    """One entry per graph-launch runtime call (correlation id known), in time order.

    row: table position of the call; corr, start_ns, dur_ns, thread; n_ops: GPU ops of the
    trace with its correlation id; step: the step those ops are in (-1 none); graph_id: the
    graph id its ops carry (-1 unknown); nodes_expected: the distinct node ids seen under that
    graph id over every launch (-1 unknown); nodes_seen: distinct node ids among its own ops."""

    row: np.ndarray
    corr: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    thread: np.ndarray
    n_ops: np.ndarray
    step: np.ndarray
    graph_id: np.ndarray
    nodes_expected: np.ndarray
    nodes_seen: np.ndarray
    names: list[str]
    last_gpu_start_ns: int = -1  # the latest start of any GPU op of the trace (-1: none)
    final_ops_last_start_ns: int = -1  # the latest start among the last launch's own ops (-1: none)

    def __len__(self) -> int:
        return len(self.row)

    @property
    def end_ns(self) -> np.ndarray:
        return self.start_ns + self.dur_ns


def graph_launches(events: Columns, steps: Steps | None = None) -> GraphLaunches:
    """The graph launches of ``events`` and the GPU work the trace shows for each."""
    corr_all = events["correlation"]
    name = events["name"]
    launch_name = name.flags(is_graph_launch)  # a last False for a missing name (code -1)
    is_rt = (events["kind"] == "runtime") & (corr_all >= 0)
    rows = np.flatnonzero(is_rt & launch_name[name.codes])
    start = events["start_ns"]
    rows = rows[np.argsort(start[rows], kind="stable")]
    corr = corr_all[rows].astype(np.int64)
    n = len(rows)
    n_ops = np.zeros(n, dtype=np.int64)
    step = np.full(n, -1, dtype=np.int64)
    graph_id = np.full(n, -1, dtype=np.int64)
    seen = np.zeros(n, dtype=np.int64)
    expected = np.full(n, -1, dtype=np.int64)
    last = final = -1
    if n:
        last, final = _count_ops(events, corr, steps, n_ops, step, graph_id, seen, expected)
    return GraphLaunches(row=rows, corr=corr, start_ns=start[rows].astype(np.int64),
                         dur_ns=events["dur_ns"][rows].astype(np.int64),
                         thread=events["stream"][rows].astype(np.int64), n_ops=n_ops, step=step,
                         graph_id=graph_id, nodes_expected=expected, nodes_seen=seen,
                         names=name.take(rows).strings().tolist(), last_gpu_start_ns=last,
                         final_ops_last_start_ns=final)


def _count_ops(events: Columns, corr: np.ndarray, steps: Steps | None, n_ops: np.ndarray, step: np.ndarray,
               graph_id: np.ndarray, seen: np.ndarray, expected: np.ndarray) -> tuple[int, int]:
    """Fill the per-launch figures from the GPU ops carrying a launch's correlation id, a block
    of rows at a time; return the latest start of any GPU op and of the last launch's ops (-1: none)."""
    order = np.argsort(corr, kind="stable")
    keys = corr[order]
    kind = events["kind"]
    gpu_kind = kind.flags(set(GPU_KINDS).__contains__)  # per code, + False for a missing kind
    kind_codes = kind.codes
    on_gpu = events["on_gpu"]
    corr_all = events["correlation"]
    gid_all = events["graph_id"]
    node_all = events["graph_node_id"]
    with_nodes = bool(len(gid_all)) and int(gid_all.max()) > 0  # CUPTI writes graph id 0 outside a graph
    step_of = steps.step_of if steps is not None else None
    start_all = events["start_ns"]
    last = final = -1
    final_launch = int(np.argmax(order == len(corr) - 1))  # the last launch's place in the sorted keys
    pairs: list[np.ndarray] = []  # (launch, graph id, node id) of ops that carry a node id
    for lo in range(0, len(corr_all), ROWS_PER_PASS):
        block = slice(lo, lo + ROWS_PER_PASS)
        gpu = lo + np.flatnonzero(on_gpu[block] & gpu_kind[kind_codes[block]])
        if not len(gpu):
            continue
        last = max(last, int(start_all[gpu].max()))
        c = corr_all[gpu]
        at = np.minimum(np.searchsorted(keys, c), len(keys) - 1)  # searchsorted is never negative
        hit = keys[at] == c
        launch = order[at[hit]]
        rows = gpu[hit]
        n_ops += np.bincount(launch, minlength=len(n_ops))
        mine = at[hit] == final_launch
        if mine.any():
            final = max(final, int(start_all[rows[mine]].max()))
        if step_of is not None:
            s = step_of[rows]
            fresh = (step[launch] < 0) & (s >= 0)
            step[launch[fresh]] = s[fresh]
        if with_nodes:
            gid = gid_all[rows].astype(np.int64)
            node = node_all[rows].astype(np.int64)
            has = (gid > 0) & (node >= 0)  # kineto#1567's node id is an ordinal: 0 is a node
            pairs.append(np.stack([launch[has], gid[has], node[has]], axis=1))
    if pairs:
        _nodes(np.concatenate(pairs), graph_id, seen, expected)
    return last, final


def _nodes(pairs: np.ndarray, graph_id: np.ndarray, seen: np.ndarray, expected: np.ndarray) -> None:
    """Per launch: its graph id, its distinct node ids, and the distinct node ids of its graph
    over every launch (what one replay of that graph runs)."""
    if not len(pairs):
        return
    per_launch = distinct(pairs, axis=0)  # (launch, graph, node), each once
    launch, gid = per_launch[:, 0], per_launch[:, 1]
    graph_id[launch] = gid  # the last graph id listed wins where a launch's ops disagree (not expected)
    seen += np.bincount(launch, minlength=len(seen))
    graph_nodes = distinct(per_launch[:, 1:], axis=0)  # (graph, node)
    gids, counts = np.unique(graph_nodes[:, 0], return_counts=True)
    known = graph_id >= 0
    at = np.searchsorted(gids, graph_id[known])
    expected[known] = counts[np.clip(at, 0, len(counts) - 1)]
