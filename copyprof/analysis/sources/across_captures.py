"""Sources across captures: an eager capture's copy sources carried onto a graph replay, and
the census grouped by issuing function.

Why: a copy replayed from a CUDA/HIP graph has no Python stack, but the same model and workload
run eagerly (``--enforce-eager`` with stacks) issue the same copies from the same code in the
same place of each layer. The layer map gives every copy a place that does not depend on how
the step was launched — (layer, role, ordinal among the layer's copies of that role) — so a
graph copy takes the source of the eager copy at its place; where the layers differ in count,
(layer kind, role, size, ordinal) is the key instead. The match rate is stated, never assumed.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from copyprof.analysis.results import BySource, SourceEntry, SourceMatch
from copyprof.columns import Columns, objects
from copyprof.grouping import distinct, group_ids, group_rows, median

CARRIED = "carried from the eager capture"




def _present(values: np.ndarray) -> np.ndarray:
    """Which values of an object column are there (not None, not NaN)."""
    return np.fromiter((v is not None and v == v for v in values.tolist()), dtype=bool, count=len(values))


def _ordinals(copies: Columns) -> np.ndarray:
    """Each copy's rank among the copies of its step, layer and role (0 = the first)."""
    gid, _ = group_ids(copies["step"], copies["layer"], copies.strings("role"))
    n = len(gid)
    order = np.argsort(gid, kind="stable")  # each group's rows together, in table order
    starts = np.flatnonzero(np.r_[True, gid[order][1:] != gid[order][:-1]]) if n else np.zeros(0, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    out[order] = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    return out


def source_entries(copies: Columns) -> list[SourceEntry]:
    """The places of an eager census's copies that have a source (one per place, the source the
    most steps agree on)."""
    if copies.empty or "source" not in copies:
        return []
    src = copies["source"]
    sourced = np.flatnonzero(_present(src))
    if not len(sourced):
        return []
    ordinal = _ordinals(copies)[sourced]
    layer, role = copies["layer"][sourced], copies.strings("role")[sourced]
    src = src[sourced]
    nbytes, bsrc, kind, stack = (copies["bytes"][sourced], copies.strings("bytes_src")[sourced],
                                 copies.strings("kind")[sourced], copies["stack"][sourced])
    gid, first = group_ids(layer, role, ordinal, sort=True)
    out = []
    for g in group_rows(gid, len(first)):
        values = src[g].tolist()
        source, _ = Counter(values).most_common(1)[0]
        i = g[values.index(source)]
        size = int(nbytes[i]) if str(bsrc[i]) not in ("layout", "none") else -1
        out.append(SourceEntry(layer=int(layer[i]), kind=str(kind[i]), role=str(role[i]), ordinal=int(ordinal[i]),
                               bytes=size, source=str(source), stack=list(stack[i])))
    return out


def apply_sources(copies: Columns, entries: list[SourceEntry], origin: str) -> SourceMatch:
    """Give the copies without a source the source of the eager copy at their place (their
    ``source``, ``stack`` and ``why`` columns are replaced); the number matched per step
    (median) and the rate."""
    if copies.empty:
        return SourceMatch(origin=origin, matched_per_step=0, copies_per_step=0, rate=None, key="")
    step_ids, step_of = np.unique(copies["step"], return_inverse=True)
    steps = max(len(step_ids), 1)
    ordinal = _ordinals(copies)
    by_place = {(e.layer, e.role, e.ordinal): e for e in entries}
    by_kind: dict[tuple[str, str, int, int], SourceEntry] = {}
    for entry in entries:
        by_kind.setdefault((entry.kind, entry.role, entry.bytes, entry.ordinal), entry)
    same_layers = bool(entries) and max(e.layer for e in entries) == int(copies["layer"].max())
    matched = np.zeros(len(copies), dtype=bool)
    src, stack, why = copies["source"].tolist(), copies["stack"].tolist(), copies["why"].tolist()
    for i, (layer, role, kind, nbytes, bsrc, k) in enumerate(zip(
            copies["layer"].tolist(), copies.strings("role").tolist(), copies.strings("kind").tolist(),
            copies["bytes"].tolist(), copies.strings("bytes_src").tolist(), ordinal.tolist())):
        if src[i] is not None or layer <= 0:
            continue
        e: SourceEntry | None = by_place.get((layer, role, k)) if same_layers else None
        if e is None:
            measured = int(nbytes) if str(bsrc) not in ("layout", "none") else -1
            e = by_kind.get((kind, role, measured, k)) or by_kind.get((kind, role, -1, k))
        if e is not None:
            src[i], stack[i], why[i] = e.source, tuple(e.stack), CARRIED
            matched[i] = True
    copies["source"], copies["stack"], copies["why"] = objects(src), objects(stack), objects(why)
    in_layers = copies["layer"] > 0
    per_step = np.bincount(step_of.ravel()[matched], minlength=len(step_ids))
    total = int(in_layers.sum())
    return SourceMatch(origin=origin, matched_per_step=float(median(per_step)) if len(per_step) else 0.0,
                       copies_per_step=total / steps, rate=float(matched.sum()) / total if total else None,
                       key="layer, role, order in layer" if same_layers else "layer kind, role, size, order in layer")


def by_source(copies: Columns) -> list[BySource]:
    """The census grouped by issuing function across layers: per step, ms/step, where."""
    if copies.empty or "source" not in copies:
        return []
    steps = max(len(distinct(copies["step"])), 1)
    source_of = objects(["" if v is None or v != v else v for v in copies["source"].tolist()])
    kind, site, layer, nbytes, dur = (copies.strings("kind"), copies.strings("site"), copies["layer"],
                                      copies["bytes"], copies["dur_ns"])
    gid, first = group_ids(source_of)
    out = []
    for g, i in zip(group_rows(gid, len(first)), first.tolist()):
        source = source_of[i]
        kinds = sorted(set(kind[g].tolist()) - {""})
        size = nbytes[g]
        in_layer = layer[g][layer[g] > 0]
        out.append(BySource(
            source=source or None, stack=list(copies["stack"][i]) if source else [],
            per_step=len(g) / steps, ms_per_step=float(dur[g].sum()) / 1e6 / steps,
            sites=sorted({str(s) for s in set(site[g].tolist())}), layer_kinds=kinds,  # str once per distinct site
            layers=len(distinct(in_layer)),
            bytes=[int(b) for b in distinct(size[size >= 0])],
            note="" if source else str(copies["why"][i])))
    return sorted(out, key=lambda b: (b.source is None, -b.ms_per_step))
