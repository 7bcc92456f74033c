"""The census' table of copies: one row per copy of the counted steps, its columns assembled
from the step ops, the settled roles and layers, the copy sources and the role evidence.

Why a module of its own: the census (count.py) decides each copy's role and layer; this is
how those decisions become the documented columns every later room reads (estimate,
candidates, sources across captures, the annotated trace).
"""
from __future__ import annotations

import numpy as np

from copyprof.analysis.census.copy_sites import POST
from copyprof.analysis.census.graph_ops import graph_nodes
from copyprof.analysis.census.role_evidence import Evidence
from copyprof.analysis.sources.frames import NO_STACKS, CopySources
from copyprof.analysis.steps.ops import StepOps
from copyprof.columns import Categorical, Columns, constant, filled, objects
from copyprof.grouping import group_ids
from copyprof.models import ModelLayout
from copyprof.vocabulary import UNATTRIBUTED_SITE, EvidenceKind, Place

COPY_COLUMNS = ["step", "pos", "name", "bytes", "bytes_src", "start_ns", "dur_ns", "gap_ns", "site", "role", "kind",
                "layer", "slot", "place", "next_kernel", "prev_kernel", "row"]
SOURCE_COLUMNS = ["source", "stack", "why", "shape"]  # analysis/sources/frames.py: the code that issued each copy


def copy_sites(role: np.ndarray, layer: np.ndarray, layout: ModelLayout | None) -> np.ndarray:
    """Each copy's site: its layer's kind for a placed post-projection copy, ``post-proj`` for one
    whose layer is unknown, else its role."""
    site = role.astype(object).copy()
    post = role == POST
    if layout is not None and post.any():
        kinds = np.asarray(layout.layer_kinds, dtype=object)
        known = post & (layer >= 0)
        site[known] = kinds[layer[known]]
        site[post & (layer < 0)] = UNATTRIBUTED_SITE
    return site


def copies_table(events: Columns, ops: StepOps, pos: np.ndarray, nbytes: np.ndarray, src: np.ndarray, site: np.ndarray,
                 role: np.ndarray, layer: np.ndarray, slot: np.ndarray, place: np.ndarray, layout: ModelLayout | None,
                 in_graph: np.ndarray) -> Columns:
    """The copies' table: COPY_COLUMNS, then graph_id, graph_node, in_graph. Ids and positions
    keep the narrow types they were found in (step, position, row: int32); bytes and times are
    int64, as sums of them are."""
    n = len(role)
    kinds = np.asarray(layout.layer_kinds if layout is not None else (), dtype=object)
    kind = filled(n, "")
    if len(kinds):
        kind[layer >= 0] = kinds[layer[layer >= 0]]
    name = Categorical(ops.c_code, ops.categories).strings(None) if len(ops.categories) else filled(n, "")
    graph_id, graph_node = graph_nodes(events, ops.c_row, n)
    return Columns({
        "step": ops.c_step, "pos": pos, "name": name,
        "bytes": nbytes.astype(np.int64, copy=False), "bytes_src": np.asarray(src, dtype=object),
        "start_ns": ops.c_start.astype(np.int64, copy=False), "dur_ns": ops.c_dur.astype(np.int64, copy=False),
        "gap_ns": ops.c_gap.astype(np.int64, copy=False), "site": site,
        "role": np.asarray(role, dtype=object), "kind": kind, "layer": (layer + 1).astype(np.int64, copy=False),
        "slot": slot.astype(np.int64, copy=False),
        "place": np.asarray(place, dtype=object), "next_kernel": np.asarray(ops.c_next, dtype=object),
        "prev_kernel": np.asarray(ops.c_prev, dtype=object),
        "row": ops.c_row if ops.c_row is not None else np.full(n, -1, dtype=np.int32),
        "graph_id": np.asarray(graph_id, dtype=np.int64), "graph_node": np.asarray(graph_node, dtype=np.int64),
        "in_graph": np.asarray(in_graph, dtype=bool),
    }, n)


def add_sources(copies: Columns, found: CopySources | None) -> None:
    """The issuing code of every copy, where the trace has Python stacks (else none, and why),
    and the shape its CPU op recorded, where the trace has shapes (else "")."""
    n = len(copies)
    if found is not None:
        copies["source"] = objects(found.source)
        copies["stack"] = objects([tuple(x) for x in found.stack])
        copies["why"] = objects(found.why)
        copies["shape"] = objects(found.shape)
    else:
        copies["source"] = constant(n, None)
        copies["stack"] = constant(n, ())
        copies["why"] = constant(n, NO_STACKS)
        copies["shape"] = constant(n, "")


def add_evidence(copies: Columns, evidence: Evidence | None, settled: np.ndarray) -> None:
    """Which evidence set each copy's role (a copy structure left to its size says ``size``)."""
    n = len(copies)
    if evidence is None:
        for col in ("block", "evidence", "structure_said"):
            copies[col] = constant(n, "")
        copies["agree"] = constant(n, None)
        return
    ev = evidence.evidence
    by_size = (ev == EvidenceKind.STRUCTURE.value) & (copies["place"] == Place.NO_LAYERS.value)
    if by_size.any():
        ev = ev.astype(object)  # a copy: the evidence may be a read-only constant column
        ev[by_size] = EvidenceKind.SIZE.value
    copies["block"] = np.asarray(evidence.block, dtype=object)
    copies["evidence"] = ev
    copies["structure_said"] = np.asarray(evidence.structure_said, dtype=object)
    copies["agree"] = np.asarray(evidence.agree, dtype=object)


def evidence_notes(copies: Columns, n_steps: int) -> list[str]:
    """Where the stack overruled structure, say so per role (the report must not hide it)."""
    if "agree" not in copies or not n_steps or copies.empty:
        return []
    # False exactly: None ("one spoke") equals neither. No list of the column (8 bytes a copy).
    lost = np.fromiter((v is not None and not v for v in copies["agree"]), dtype=bool, count=len(copies))
    if not lost.any():
        return []
    said, now, block = (copies[c][lost] for c in ("structure_said", "role", "block"))
    gid, first = group_ids(said, now, sort=True)
    sizes = np.bincount(gid, minlength=len(first))
    return [f"{int(size) / n_steps:g} copies per step placed as {said[i]} by the kernel order were issued by "
            f"the {block[i]} block's code (Python stack): taken as {now[i]}"
            for size, i in zip(sizes.tolist(), first.tolist())]
