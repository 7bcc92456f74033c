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
import pandas as pd

from copyprof.analysis.results import BySource, SourceEntry, SourceMatch

CARRIED = "carried from the eager capture"


def _ordinals(copies: pd.DataFrame) -> np.ndarray:
    """Each copy's rank among the copies of its step, layer and role (0 = the first)."""
    return copies.groupby(["step", "layer", "role"], sort=False).cumcount().to_numpy()


def source_entries(copies: pd.DataFrame) -> list[SourceEntry]:
    """The places of an eager census's copies that have a source (one per place, the source the
    most steps agree on)."""
    if copies.empty or "source" not in copies or copies["source"].isna().all():
        return []
    cp = copies.assign(ordinal=_ordinals(copies))
    cp = cp[cp["source"].notna()]
    out = []
    for (layer, role, ordinal), g in cp.groupby(["layer", "role", "ordinal"], sort=True):
        source, _ = Counter(g["source"].tolist()).most_common(1)[0]
        first = g[g["source"] == source].iloc[0]
        nbytes = int(first["bytes"]) if str(first["bytes_src"]) not in ("layout", "none") else -1
        out.append(SourceEntry(layer=int(layer), kind=str(first["kind"]), role=str(role), ordinal=int(ordinal),
                               bytes=nbytes, source=str(source), stack=list(first["stack"])))
    return out


def apply_sources(copies: pd.DataFrame, entries: list[SourceEntry], origin: str) -> SourceMatch:
    """Give the copies without a source the source of the eager copy at their place; the
    number matched per step (median) and the rate."""
    steps = max(copies["step"].nunique(), 1) if len(copies) else 1
    if copies.empty:
        return SourceMatch(origin=origin, matched_per_step=0, copies_per_step=0, rate=None, key="")
    ordinal = _ordinals(copies)
    by_place = {(e.layer, e.role, e.ordinal): e for e in entries}
    by_kind: dict[tuple[str, str, int, int], SourceEntry] = {}
    for entry in entries:
        by_kind.setdefault((entry.kind, entry.role, entry.bytes, entry.ordinal), entry)
    same_layers = bool(entries) and max(e.layer for e in entries) == int(copies["layer"].max())
    matched = np.zeros(len(copies), dtype=bool)
    src, stack, why = copies["source"].tolist(), copies["stack"].tolist(), copies["why"].tolist()
    for i, (layer, role, kind, nbytes, bsrc, k) in enumerate(zip(
            copies["layer"].tolist(), copies["role"].tolist(), copies["kind"].tolist(), copies["bytes"].tolist(),
            copies["bytes_src"].astype(str).tolist(), ordinal.tolist())):
        if src[i] is not None or layer <= 0:
            continue
        e: SourceEntry | None = by_place.get((layer, role, k)) if same_layers else None
        if e is None:
            measured = int(nbytes) if bsrc not in ("layout", "none") else -1
            e = by_kind.get((kind, role, measured, k)) or by_kind.get((kind, role, -1, k))
        if e is not None:
            src[i], stack[i], why[i] = e.source, tuple(e.stack), CARRIED
            matched[i] = True
    copies["source"], copies["stack"], copies["why"] = src, stack, why
    in_layers = copies["layer"].to_numpy() > 0
    per_step = pd.Series(matched).groupby(copies["step"].to_numpy()).sum()
    total = int(in_layers.sum())
    return SourceMatch(origin=origin, matched_per_step=float(np.median(per_step)) if len(per_step) else 0.0,
                       copies_per_step=total / steps, rate=float(matched.sum()) / total if total else None,
                       key="layer, role, order in layer" if same_layers else "layer kind, role, size, order in layer")


def by_source(copies: pd.DataFrame) -> list[BySource]:
    """The census grouped by issuing function across layers: per step, ms/step, where."""
    if copies.empty or "source" not in copies:
        return []
    steps = max(copies["step"].nunique(), 1)
    out = []
    for source, g in copies.groupby(copies["source"].fillna(""), sort=False):
        kinds = sorted(set(g["kind"].unique().tolist()) - {""})
        nbytes = g["bytes"].to_numpy()
        out.append(BySource(
            source=source or None, stack=list(g["stack"].iloc[0]) if source else [],
            per_step=len(g) / steps, ms_per_step=float(g["dur_ns"].sum()) / 1e6 / steps,
            sites=sorted(set(g["site"].astype(str).unique().tolist())), layer_kinds=kinds,
            layers=int(g.loc[g["layer"] > 0, "layer"].nunique()),
            bytes=[int(b) for b in np.unique(nbytes[nbytes >= 0])],
            note="" if source else str(g["why"].iloc[0])))
    return sorted(out, key=lambda b: (b.source is None, -b.ms_per_step))
