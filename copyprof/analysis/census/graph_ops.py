"""Which GPU ops a CUDA/HIP graph ran: membership in a graph replay, and each op's graph and node ids.

Why a module of its own: the census reads both for its copies and the GPU time per step reads
the first for every op; they key on launches and on the graph fields of the event table, not on
the copies' roles that the rest of the census settles.
"""
from __future__ import annotations

import numpy as np

from copyprof.analysis.steps.rows import ROWS_PER_PASS
from copyprof.columns import Columns
from copyprof.grouping import dense_index, distinct, positions_in
from copyprof.taxonomy.copies import is_graph_launch


def graph_replayed(events: Columns, rows: np.ndarray) -> np.ndarray:
    """Which GPU ops at ``rows`` a graph replay ran: their correlation id names a
    ``cudaGraphLaunch``/``hipGraphLaunch`` (their gap is then GPU time between graph nodes)."""
    corr = events["correlation"]
    runtime = np.flatnonzero((events["kind"] == "runtime") & (corr >= 0))  # on the codes, no object array
    out = np.zeros(len(rows), dtype=bool)
    if not len(runtime) or not len(rows):
        return out
    names = events["name"]
    launch = names.flags(is_graph_launch)  # per name, and False for a missing one (code -1)
    graph_calls = runtime[launch[names.codes[runtime]]]
    launched = distinct(corr[graph_calls])
    if not len(launched):
        return out
    # Membership through an index of the launches' ids where they are dense, else by binary
    # search in them, a block of rows at a time: np.isin sorts both sides together, and even the
    # search's int64 positions over all of a 1 GB trace's ~1 M ops were ~17 MB of temporaries
    # at the analysis' memory peak (memray).
    index = dense_index(launched, len(corr))
    for lo in range(0, len(rows), ROWS_PER_PASS):
        out[lo : lo + ROWS_PER_PASS] = positions_in(launched, index, corr[rows[lo : lo + ROWS_PER_PASS]]) >= 0
    return out


def graph_nodes(events: Columns, rows: np.ndarray | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each copy's graph id and node id where its graph id is known (> 0: CUPTI writes 0
    outside a graph; kineto#1567's ROCm node id is an ordinal, so node 0 is a node), else -1."""
    if rows is None or len(rows) != n:
        return np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    gid = events["graph_id"][rows].astype(np.int64)
    node = np.where(gid > 0, events["graph_node_id"][rows].astype(np.int64), -1)
    return np.where(gid > 0, gid, -1), node
