"""The census's fallback when a step's layers cannot be found from its kernels: size and order.

Before the layer map (analysis/census/layer_map.py) this was the only attribution: the
``[N, hidden] × dtype`` copies of a step are the post-projection copies, and when there are
exactly as many as layers the k-th belongs to layer k. Where the trace has no sizes, the
post-projection copies are the one group of copies sharing a neighbour kernel that numbers
exactly one per layer. Kept for steps whose structure the layer map cannot read (too few
kernels, no kernel that runs once per layer) — and it says so.
"""
from __future__ import annotations

import numpy as np

from copyprof.analysis.census.copy_sites import POST, UNPLACED


def order_attribution(role: np.ndarray, layer: np.ndarray, size_match: np.ndarray, unknown_size: np.ndarray,
                      nxt: np.ndarray, prv: np.ndarray, n_layers: int) -> tuple[str, np.ndarray, np.ndarray]:
    """Roles and layers of the copies structure left unplaced, by size, else by neighbours.

    Returns (method, role, layer); method is "size", "neighbours" or "" (nothing matched).
    Copies already placed keep their role. ``layer`` is filled by order only when the
    post-projection copies number exactly one per layer."""
    role, layer = role.copy(), layer.copy()
    open_ = role == UNPLACED
    match = size_match & open_
    method = "size"
    if not match.any() and (unknown_size & open_).any():
        match = _match_by_neighbours(unknown_size & open_, nxt, prv, n_layers)
        method = "neighbours"
    if not match.any():
        return "", role, layer
    role[match] = POST
    idx = np.flatnonzero(match)
    if len(idx) == n_layers and (layer[idx] < 0).all():
        layer[idx] = np.arange(n_layers)
    return method, role, layer


def _match_by_neighbours(unknown: np.ndarray, nxt: np.ndarray, prv: np.ndarray, layers: int) -> np.ndarray:
    """Size-less copies (graph-replayed rocclr blits in Kineto carry neither bytes nor grid):
    the post-projection copies are the one group of copies that share a neighbour kernel
    (next kernel, else previous kernel) and number exactly one per layer."""
    pairs = np.array([f"{a}|{b}" for a, b in zip(prv.tolist(), nxt.tolist())], dtype=object)
    for keys in (nxt, prv, pairs):
        counts: dict[str, int] = {}
        for key in keys[unknown].tolist():
            counts[key] = counts.get(key, 0) + 1
        hits = [k for k, c in counts.items() if c == layers and k not in ("", "|")]
        if len(hits) == 1:
            return unknown & (keys == hits[0])
    return np.zeros(len(unknown), dtype=bool)
