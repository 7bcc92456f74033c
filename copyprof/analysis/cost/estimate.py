"""Removable cost of the direct-return patch, from a census.

The patch (vLLM #50592 / #50847) returns the projection instead of copying it into a
caller-owned buffer, so it removes exactly the post-projection copies of its scope. Removable
time per step is the median over steps of those copies' summed kernel time (p10/p90 given).
In graph replay the copy's slot also holds a dispatch gap (idle time until the next kernel),
so a second estimate adds that gap: an A/B with a fine enough measure says which one it supports (analysis/ab/verdict.py estimator_check).
Copies of other sites (KDA placement, all-reduce staging, metadata) are never removable.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from copyprof.analysis.census.count import Census
from copyprof.analysis.results import Estimate, GraphNodeMatch, Site, known
from copyprof.columns import Columns, filled
from copyprof.grouping import commonest_text, distinct, first_seen_codes, group_ids, group_rows, known_floats, median, percentile
from copyprof.models.layout import kind_label
from copyprof.vocabulary import Role, UNATTRIBUTED_SITE


def _pct(values: np.ndarray, q: float) -> float:
    return float(percentile(values, q)) if len(values) else float("nan")


def scopes(kinds: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """One scope per layer kind, then ``all`` (every kind's copies)."""
    return {**{k: (k,) for k in kinds}, "all": tuple(kinds)}


def estimate(census: Census) -> list[Estimate]:
    ps = census.per_step
    if ps.empty or not census.kinds:
        return []
    period = known_floats(ps["period_ns"]) / 1e6
    period_med = float(median(period)) if len(period) else float("nan")
    out = []
    for scope, kinds in scopes(census.kinds).items():
        count = sum((ps[f"post_{k}"] for k in kinds), np.zeros(len(ps), dtype=np.int64))
        kernel = sum((ps[f"post_{k}_ms"] for k in kinds), np.zeros(len(ps)))
        gaps = sum((ps[f"post_{k}_gap_ms"] for k in kinds), np.zeros(len(ps)))
        removable = float(median(kernel))
        with_gap = float(median(kernel + gaps))
        out.append(Estimate(
            patch="direct-return", scope=scope, removed_per_step=int(median(count)), removable_ms=removable,
            removable_p10_ms=known(_pct(kernel, 10)), removable_p90_ms=known(_pct(kernel, 90)),
            removable_with_gap_ms=with_gap,
            removable_pct=100.0 * removable / period_med if period_med == period_med and period_med > 0 else None,
            period_with_patch_ms=period_med - removable if period_med == period_med else None,
        ))
    return out


def copy_speed(census: Census, peak_gbps: float | None) -> list[Site]:
    """Per-site per-copy µs and achieved GB/s: is the copy launch- or bandwidth-bound?

    A copy that reaches under a quarter of the device's peak bandwidth is spending its time
    on launch and ramp-up, not on moving bytes (the threshold is a rule of thumb, stated).
    """
    cp = census.copies
    if cp.empty:
        return []
    n_steps = max(1, len(distinct(cp["step"])))
    # Copies of unknown size are told apart by the kernel that follows them (their place in
    # the layer); copies of known size by their size.
    mapped = census.attribution.method == "structure"
    nbytes, bsrc = cp["bytes"], cp.strings("bytes_src")
    sizeless = (nbytes < 0) | (bsrc == "layout")
    neighbour = np.where(sizeless, cp.strings("next_kernel"), "")
    source = cp["source"] if "source" in cp else filled(len(cp), "")
    site, dur, layer, kind, role = cp.strings("site"), cp["dur_ns"], cp["layer"], cp.strings("kind"), cp.strings("role")
    col = {name: cp[name] for name in ("stack", "why", "shape", "place", "evidence", "structure_said", "agree")
           if name in cp}
    unsourced = first_seen_codes(source, lambda v: "" if v is None or v != v else v)[0]  # None and NaN: one key
    gid, first = group_ids(site, nbytes, bsrc, neighbour, unsourced)
    rows = []
    for g, i in zip(group_rows(gid, len(first)), first.tolist()):
        code = source[i] if source[i] is not None and source[i] == source[i] else ""
        size = int(nbytes[i])
        us = dur[g].astype(float) / 1e3
        med_us = float(median(us))
        gbps = size / (med_us * 1e3) if size > 0 and med_us > 0 else None
        bound = None
        if gbps is not None and peak_gbps:
            bound = "bandwidth" if gbps >= 0.25 * peak_gbps else "launch/latency"
        layers = layer[g][layer[g] > 0]
        kinds_seen = sorted(set(kind[g].tolist()) - {""})
        roles = set(role[g].tolist())
        rows.append(Site(
            site=str(site[i]), bytes=size, bytes_src=str(bsrc[i]), per_step=len(g) / n_steps,
            median_us=med_us, ms_per_step=float(us.sum()) / 1e3 / n_steps,
            achieved_gbps=gbps, peak_gbps=peak_gbps, bound=bound,
            where=_where(site[i], layers, census.kinds, kinds_seen, mapped), neighbour=str(neighbour[i]),
            role=Role(str(role[i])) if len(roles) == 1 else Role.MIXED,
            layer_kind=kinds_seen[0] if len(kinds_seen) == 1 else None,
            source=code or None, stack=list(col["stack"][i]) if code else [],
            source_note="" if code else str(col["why"][i]) if "why" in col else "",
            shape=commonest_text(col["shape"][g]) if "shape" in col else "",
            **_node_identity(cp, g), **_evidence(col, g),
        ))
    order = {**{k: i for i, k in enumerate(census.kinds)}, UNATTRIBUTED_SITE: 90, Role.PLACEMENT: 91, Role.STAGING: 92,
             Role.OTHER: 93}
    return sorted(rows, key=lambda r: (order.get(r.site, 99), -r.per_step))


def _evidence(col: dict[str, np.ndarray], g: np.ndarray) -> dict[str, Any]:
    """What set the site's role: the commonest evidence, whether structure and stack agreed on
    every copy (None where only one of them spoke), what structure had said where it lost."""
    if "evidence" not in col:
        return {}
    agree = [a for a in col["agree"][g].tolist() if a is not None]
    return {"place": commonest_text(col["place"][g]), "evidence": commonest_text(col["evidence"][g]),
            "evidence_agree": all(agree) if agree else None, "structure_said": commonest_text(col["structure_said"][g])}




def _where(site: str, layers: np.ndarray, kinds: tuple[str, ...], seen: list[str], mapped: bool) -> str:
    if site in kinds:
        return f"{kind_label(site)} layers, after the output projection"
    if site == Role.PLACEMENT and len(seen) == 1:
        return f"{kind_label(seen[0])} layers, before the output projection"
    if not len(layers):
        if site == UNATTRIBUTED_SITE:  # a post-projection copy's size, but no layer: not in the post-projection count
            return "size of a post-projection copy, layer unknown: not counted as post-projection"
        return "outside the decoder layers" if kinds and mapped else "not placed (no attribution)"
    lo, hi = int(layers.min()), int(layers.max())
    return f"layer {lo}" if lo == hi else f"layers {lo}–{hi}"


def _distinct(*columns: np.ndarray) -> int:
    """How many distinct rows the integer columns hold together."""
    return len(distinct(np.stack(columns, axis=1), axis=0)) if len(columns[0]) else 0


def _node_identity(cp: Columns, g: np.ndarray) -> dict[str, Any]:
    """The graph nodes a site's copies replay, and whether every step replays the same ones
    (``graph node id`` in the trace; -1 where the copy's graph id is unknown)."""
    if "graph_node" not in cp:
        return {}
    node = cp["graph_node"][g]
    if not (node >= 0).all():
        return {}
    graph, step = cp["graph_id"][g], cp["step"][g]
    nodes = _distinct(graph, node)  # a node is (graph, node): ROCm's ids are ordinals
    triples = _distinct(step, graph, node)
    return {"graph_nodes": sorted(int(x) for x in distinct(node)),
            "graph_node_stable": triples == len(distinct(step)) * nodes}


def graph_node_match(copies: Columns) -> GraphNodeMatch | None:
    """How many copies per step carry a graph node id, and how many sites replay the same nodes
    every step: a stable identity for each copy across replays (None when the trace has no ids).

    Node ids are assigned per capture (CUPTI: per process; ROCm kineto#1567: the dispatch's
    ordinal in its launch), so they identify a copy across the replays of one run; across
    arms copies are matched by size and place (analysis/ab/sites.py)."""
    if copies.empty or "graph_node" not in copies or not (copies["graph_node"] >= 0).any():
        return None
    n_steps = max(1, len(distinct(copies["step"])))
    has = np.flatnonzero(copies["graph_node"] >= 0)
    gid, first = group_ids(copies.strings("site")[has], copies["bytes"][has])
    stable = sum(1 for g in group_rows(gid, len(first)) if _node_identity(copies, has[g]).get("graph_node_stable"))
    sites = len(first)
    copies_per_step = len(copies) / n_steps
    with_node = len(has) / n_steps
    return GraphNodeMatch(
        copies_per_step=copies_per_step, with_node_per_step=with_node, sites=sites, stable_sites=stable,
        message=(f"{with_node:g} of {copies_per_step:g} copies per step carry a graph node id; {stable} of {sites} "
                 "copy sites replay the same graph nodes in every counted step"))
