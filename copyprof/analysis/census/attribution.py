"""How a run's copies were attributed to layers, in one typed record and one sentence.

Each counted step leaves a ``StepVerdict`` (did its layers come from structure, how many
post-projection copies, how many placed in a layer, where size and structure disagree);
``summarise_attribution`` turns them and the steps' layer maps into the report's
``attribution`` object: a status a program can test and a message a reviewer can read.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from copyprof.analysis.census.layer_map import LayerMap
from copyprof.analysis.results import Attribution
from copyprof.grouping import median
from copyprof.taxonomy.anchors import CONSISTENT, anchor_mechanism, is_attention_math
from copyprof.vocabulary import AttributionStatus

if TYPE_CHECKING:
    from copyprof.models import ModelLayout


@dataclass
class StepVerdict:
    structure: str = "none"  # the step's layer map status: ok | no-structure | none
    layers: int = 0
    post: int = 0  # post-projection copies in the step
    post_placed: int = 0  # of which in a known layer
    size_disagree: int = 0  # copies whose size says otherwise than their place
    fallback: str = ""  # size | neighbours | "" : how copies structure could not place were judged
    no_tokens: bool = False


def anchor_agreement(lm: LayerMap, codes: np.ndarray, names: np.ndarray, layout: ModelLayout) -> tuple[int, int]:
    """(layers with an attention anchor kernel, of which the anchor fits the layout's mechanism)."""
    if lm.status != "ok":
        return 0, 0
    mech = np.array([anchor_mechanism(str(n)) for n in names.tolist()], dtype=object) if len(names) else np.array([], dtype=object)
    found: dict[int, set[str]] = {}
    for ell, code in zip(lm.op_layer.tolist(), codes.tolist()):
        if ell >= 0 and mech[code]:
            found.setdefault(ell, set()).add(mech[code])
    agree = sum(1 for ell, ms in found.items()
                if all(layout.mechanism_of(layout.layer_kinds[ell]) in CONSISTENT.get(m, set()) for m in ms))
    return len(found), agree


def summarise_attribution(verdicts: list[StepVerdict], layout: ModelLayout | None, maps: list[LayerMap],
                          anchors: tuple[int, int] = (0, 0)) -> Attribution:
    if layout is None:
        return Attribution()
    n = len(verdicts)
    structured = [v for v in verdicts if v.structure == "ok"]
    out = Attribution(steps=n, anchored=anchors[0], anchors_agree=anchors[1])
    ok_map = next((m for m in maps if m.status == "ok"), None)
    if ok_map is not None:
        out.layers_found = ok_map.layers
        for kind in ok_map.kinds.agree.values():
            out.kind_kernels[kind] = out.kind_kernels.get(kind, 0) + 1
        # Only an attention kernel in the wrong layers contradicts the layout: other kernels whose
        # count happens to match a kind's layers are the dense first layer's MLP among MoE layers,
        # or Inductor kernels whose names repeat across pieces of different kinds.
        # A kind none of whose counted kernels fits its layers is a layout the trace contradicts:
        # then all of them count — except an MLP-only kind (Nemotron-H's mlp layer), which may run
        # nothing of its own: its GEMMs and activation are those of the MoE layers' shared experts,
        # and a kind of one layer matches every kernel launched once.
        fitting = set(ok_map.kinds.agree.values())
        real = {name: v for name, v in ok_map.kinds.disagree.items()
                if anchor_mechanism(name) or is_attention_math(name)
                or (v[0] not in fitting and layout.mechanism_of(v[0]) != "mlp-only")}
        out.kind_disagreements = [f"{name[:80]} runs in layers {_ranges(seen)} but the layout's {kind} layers are "
                                  f"{_ranges(layout.layers_of(kind))}"
                                  for name, (kind, seen) in sorted(real.items())]
        out.kind_count_coincidences = len(ok_map.kinds.disagree) - len(real)
    out.size_disagree = int(median([v.size_disagree for v in verdicts])) if verdicts else 0
    placed = [v for v in verdicts if v.post and v.post_placed == v.post]
    out.steps_attributed = len(placed) if structured or placed else 0
    if structured:
        out.method = "structure"
    elif placed:
        out.method = "size and order"
    out.status, out.message = _status(out, verdicts, structured, layout, maps)
    return out


def _status(out: Attribution, verdicts: list[StepVerdict], structured: list[StepVerdict], layout: ModelLayout,
            maps: list[LayerMap]) -> tuple[AttributionStatus, str]:
    n = len(verdicts)
    if not verdicts:
        return AttributionStatus.NOT_ATTRIBUTED, "no counted steps"
    if not structured:
        why = next((m.message for m in maps if m.status != "ok" and m.message), "")
        posts = sorted({v.post for v in verdicts})
        if any(v.post_placed for v in verdicts):
            msg = f"layers not found from the kernels ({why}); attributed by size and order"
            return (AttributionStatus.OK if out.steps_attributed == n else AttributionStatus.PARTIAL), msg
        msg = (f"layers not found from the kernels ({why}); post-projection copies per step by size: {posts}, "
               f"layout has {layout.layers} layers — not attributed")
        return AttributionStatus.NOT_ATTRIBUTED, msg
    parts = [f"layers found from the step's kernels in {len(structured)}/{n} steps ({out.layers_found} layers)"]
    if out.kind_kernels:
        parts.append("kernels specific to one kind agree with the layout (" +
                     ", ".join(f"{c} for {k}" for k, c in out.kind_kernels.items()) + ")")
    if out.anchored:
        parts.append(f"attention anchors agree on {out.anchors_agree}/{out.anchored} layers")
    if out.kind_disagreements:
        parts.append(f"DISAGREE: {len(out.kind_disagreements)} kernel(s) run in other layers than the layout "
                     f"says: {out.kind_disagreements[0]}")
    if out.size_disagree:
        parts.append(f"size and place disagree on {out.size_disagree} copies per step")
    if any(v.fallback for v in verdicts):
        parts.append("copies structure could not place were judged by " +
                     "/".join(sorted({v.fallback for v in verdicts if v.fallback})))
    if any(v.no_tokens for v in verdicts):
        parts.append("no token count to size the [N, hidden] copies")
    bad = out.kind_disagreements or (out.anchored and out.anchors_agree < out.anchored)
    status = AttributionStatus.PARTIAL if bad or len(structured) < n else AttributionStatus.OK
    return status, "; ".join(parts)


def _ranges(layers: list[int]) -> str:
    """1-indexed layers as compact ranges: 1-3, 5, 8-10."""
    out: list[str] = []
    start = prev = None
    for x in list(layers) + [None]:
        if x is not None and prev is not None and x == prev + 1:
            prev = x
            continue
        if start is not None:
            out.append(str(start) if prev == start else f"{start}-{prev}")
        start = prev = x
    return ", ".join(out)
