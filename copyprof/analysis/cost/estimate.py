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
import pandas as pd

from copyprof.analysis.census.count import Census
from copyprof.analysis.results import Estimate, GraphNodeMatch, Site, known
from copyprof.models.layout import kind_label
from copyprof.vocabulary import Role, UNATTRIBUTED_SITE


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def scopes(kinds: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """One scope per layer kind, then ``all`` (every kind's copies)."""
    return {**{k: (k,) for k in kinds}, "all": tuple(kinds)}


def estimate(census: Census) -> list[Estimate]:
    ps = census.per_step
    if ps.empty or not census.kinds:
        return []
    period = ps["period_ns"].dropna().to_numpy(dtype=float) / 1e6
    period_med = float(np.median(period)) if len(period) else float("nan")
    out = []
    for scope, kinds in scopes(census.kinds).items():
        count = sum(ps[f"post_{k}"].to_numpy() for k in kinds)
        kernel = sum(ps[f"post_{k}_ms"].to_numpy() for k in kinds)
        gaps = sum(ps[f"post_{k}_gap_ms"].to_numpy() for k in kinds)
        removable = float(np.median(kernel))
        with_gap = float(np.median(kernel + gaps))
        out.append(Estimate(
            patch="direct-return", scope=scope, removed_per_step=int(np.median(count)), removable_ms=removable,
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
    n_steps = max(1, cp["step"].nunique())
    # Copies of unknown size are told apart by the kernel that follows them (their place in
    # the layer); copies of known size by their size.
    mapped = census.attribution.method == "structure"
    sizeless = (cp["bytes"] < 0) | (cp["bytes_src"].astype(str) == "layout")
    neighbour = cp["next_kernel"].where(sizeless, "")
    rows = []
    source = cp["source"].fillna("") if "source" in cp else pd.Series("", index=cp.index)
    for (site, nbytes, src, nxt, code), g in cp.groupby(["site", "bytes", cp["bytes_src"].astype(str), neighbour,
                                                         source], sort=False):
        us = g["dur_ns"].to_numpy(dtype=float) / 1e3
        med_us = float(np.median(us))
        gbps = nbytes / (med_us * 1e3) if nbytes > 0 and med_us > 0 else None
        bound = None
        if gbps is not None and peak_gbps:
            bound = "bandwidth" if gbps >= 0.25 * peak_gbps else "launch/latency"
        layers = g["layer"][g["layer"] > 0]
        kinds_seen = sorted(set(g["kind"].unique().tolist()) - {""})
        rows.append(Site(
            site=str(site), bytes=int(nbytes), bytes_src=str(src), per_step=len(g) / n_steps,
            median_us=med_us, ms_per_step=float(us.sum()) / 1e3 / n_steps,
            achieved_gbps=gbps, peak_gbps=peak_gbps, bound=bound,
            where=_where(site, layers, census.kinds, kinds_seen, mapped), neighbour=str(nxt),
            role=Role(str(g["role"].iloc[0])) if g["role"].nunique() == 1 else Role.MIXED,
            layer_kind=kinds_seen[0] if len(kinds_seen) == 1 else None,
            source=code or None, stack=list(g["stack"].iloc[0]) if code else [],
            source_note="" if code else str(g["why"].iloc[0]) if "why" in g else "",
            shape=_commonest(g["shape"]) if "shape" in g else "",
            **_node_identity(g), **_evidence(g),
        ))
    order = {**{k: i for i, k in enumerate(census.kinds)}, UNATTRIBUTED_SITE: 90, Role.PLACEMENT: 91, Role.STAGING: 92,
             Role.OTHER: 93}
    return sorted(rows, key=lambda r: (order.get(r.site, 99), -r.per_step))


def _evidence(g: pd.DataFrame) -> dict[str, Any]:
    """What set the site's role: the commonest evidence, whether structure and stack agreed on
    every copy (None where only one of them spoke), what structure had said where it lost."""
    if "evidence" not in g:
        return {}
    agree = [a for a in g["agree"].tolist() if a is not None]
    return {"place": _commonest(g["place"]), "evidence": _commonest(g["evidence"]),
            "evidence_agree": all(agree) if agree else None, "structure_said": _commonest(g["structure_said"])}


def _commonest(values: pd.Series) -> str:
    """The most frequent non-empty value ("" when none): one shape names a site."""
    seen = values[values.astype(bool)]
    return str(seen.value_counts(sort=True).index[0]) if len(seen) else ""


def _where(site: str, layers: pd.Series, kinds: tuple[str, ...], seen: list[str], mapped: bool) -> str:
    if site in kinds:
        return f"{kind_label(site)} layers, after the output projection"
    if site == Role.PLACEMENT and len(seen) == 1:
        return f"{kind_label(seen[0])} layers, before the output projection"
    if layers.empty:
        if site == UNATTRIBUTED_SITE:  # a post-projection copy's size, but no layer: not in the post-projection count
            return "size of a post-projection copy, layer unknown: not counted as post-projection"
        return "outside the decoder layers" if kinds and mapped else "not placed (no attribution)"
    lo, hi = int(layers.min()), int(layers.max())
    return f"layer {lo}" if lo == hi else f"layers {lo}–{hi}"


def _node_identity(g: pd.DataFrame) -> dict[str, Any]:
    """The graph nodes a site's copies replay, and whether every step replays the same ones
    (``graph node id`` in the trace; -1 where the copy's graph id is unknown)."""
    if "graph_node" not in g or not (g["graph_node"] >= 0).all():
        return {}
    nodes = g[["graph_id", "graph_node"]].drop_duplicates()  # a node is (graph, node): ROCm's ids are ordinals
    triples = len(g[["step", "graph_id", "graph_node"]].drop_duplicates())
    return {"graph_nodes": sorted(int(x) for x in nodes["graph_node"].unique()),
            "graph_node_stable": triples == g["step"].nunique() * len(nodes)}


def graph_node_match(copies: pd.DataFrame) -> GraphNodeMatch | None:
    """How many copies per step carry a graph node id, and how many sites replay the same nodes
    every step: a stable identity for each copy across replays (None when the trace has no ids).

    Node ids are assigned per capture (CUPTI: per process; ROCm kineto#1567: the dispatch's
    ordinal in its launch), so they identify a copy across the replays of one run; across
    arms copies are matched by size and place (analysis/ab/sites.py)."""
    if copies.empty or "graph_node" not in copies or not (copies["graph_node"] >= 0).any():
        return None
    n_steps = max(1, copies["step"].nunique())
    has = copies[copies["graph_node"] >= 0]
    per_site = has.groupby(["site", "bytes"], sort=False)
    stable = sum(1 for _, g in per_site if _node_identity(g).get("graph_node_stable"))
    sites = per_site.ngroups
    copies_per_step = len(copies) / n_steps
    with_node = len(has) / n_steps
    return GraphNodeMatch(
        copies_per_step=copies_per_step, with_node_per_step=with_node, sites=sites, stable_sites=stable,
        message=(f"{with_node:g} of {copies_per_step:g} copies per step carry a graph node id; {stable} of {sites} "
                 "copy sites replay the same graph nodes in every counted step"))
