"""Merged multi-rank Kineto files: one JSON holding several ranks' events, read as one trace per rank.

Why: trace-merging tools put every rank of a distributed run into one file for a timeline
viewer, and a user hands that file to copyprof. Read as one rank, the ranks' steps interleave
and their copies add up. How the tools mark the ranks (verified against their sources):

* TraceLens ``TraceFusion`` (AMD-AGI/TraceLens ``TraceLens/TraceFusion/trace_fuse.py`` @ 171dd74):
  every kept event gets ``args.rank``; int ``pid``\\ s and the linking key (``correlation``, else
  ``External id``) and flow ``id``\\ s are offset by ``rank * 10**k`` so they stay unique; the
  header keys of the rank files are dropped (only ``traceEvents`` is written).
* SGLang ``ProfileMerger`` (sgl-project/sglang ``python/sglang/srt/utils/profile_merger.py``
  @ 1a4eb3f): every ``pid`` becomes ``"[TP00-DP00-PP00-EP00] <pid>"`` (the parts the file names
  had); correlation ids are **not** offset, so they repeat across ranks; the first rank's
  header keys and every rank's ``deviceProperties`` are written *after* ``traceEvents``.

The decoders give each event a rank key (kineto_chunk.event_ranks: ``args.rank``, else the
label of a string pid); here the table is split by it when at least two ranks are marked and
(nearly) every row is. Correlation ids are only compared within a rank afterwards, so SGLang's
repeated ids do no harm. A file merged by concatenating rank files without either mark is not
recognised (nothing in it says which host process was which rank) and is read as one rank.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from copyprof.columns import Columns
from copyprof.events import KINDS, Trace, rank_column
from copyprof.grouping import distinct
from copyprof.readers.kineto.chunk import LABEL_KEY_BASE
from copyprof.taxonomy.copies import is_graph_launch

MIN_MARKED = 0.99  # share of the rows that must carry a rank mark before a file is split


def split_ranks(trace: Trace, rank_key: np.ndarray, rank_counts: dict[int, np.ndarray]) -> list[Trace]:
    """``[trace]``, or one Trace per rank when the file is a merged multi-rank file."""
    marked = rank_key >= 0
    keys = distinct(rank_key[marked]).tolist()
    if len(keys) < 2 or marked.mean() < MIN_MARKED:
        return [trace]
    labels = any(k >= LABEL_KEY_BASE for k in keys)
    rank_of = {k: (i if labels else k) for i, k in enumerate(keys)}  # labels: ordinal in SGLang's (DP, EP, PP, TP) order
    unmarked = int((~marked).sum())
    if unmarked:
        rank_key = np.where(marked, rank_key, keys[0])
    how = "the rank labels of the string pids (SGLang's merger)" if labels else "args.rank (TraceLens TraceFusion)"
    out: list[Trace] = []
    for key in keys:
        rank = rank_of[key]
        rows = np.flatnonzero(rank_key == key)
        events = trace.table.take(rows)
        events["rank"] = rank_column(len(events), rank)
        meta = replace(trace.meta, ranks=[rank], warnings=list(trace.meta.warnings), devices=list(trace.meta.devices),
                       metadata=_metadata(trace.meta.metadata, len(keys), how))
        counts = rank_counts.get(key, 0) + (rank_counts.get(-1, 0) if key == keys[0] else 0)  # unmarked: first rank
        if isinstance(counts, np.ndarray):
            meta.kind_counts = {k: int(c) for k, c in zip(KINDS, counts)}
        meta.graph_launches = _graph_launches(events)
        if unmarked and key == keys[0]:
            meta.warnings.append(f"{unmarked:,} events of the merged file carry no rank mark; they are read with rank {rank}")
        out.append(Trace(meta=meta, events=events))
    return out


def _metadata(metadata: dict, ranks: int, how: str) -> dict:
    out = dict(metadata)
    dist = out.get("distributedInfo")
    if isinstance(dist, dict):  # the merger kept one rank's header: its rank is not this trace's
        out["distributedInfo"] = {k: v for k, v in dist.items() if k != "rank"}
    out["merged_ranks"] = ranks
    out["merged_by"] = how
    return out


def _graph_launches(events: Columns) -> int:
    names = events["name"]
    launch = names.flags(is_graph_launch)[names.codes]
    return int((launch & (events["kind"] == "runtime")).sum())
