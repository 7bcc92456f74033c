"""Every removable copy of a step, grouped by what issued it, each with its own estimate.

The post-projection copy is one of several a decode step makes: the fused-MoE output copy
survives where Inductor removed the projection copies (the corpus's Kimi-Linear graphs), a
KDA or gated delta-net layer places its core's result, the model runner copies its inputs. A
reviewer looking for the next copy to remove wants them all, ranked by what removing each
would save.

A group is the copies of one role issued by one piece of code: the issuing function (file and
function, without the line, which moves when a patch edits the file) where the trace has
stacks, else the same place in the layer — the role, the layer kind for attention-block roles,
the size and the kernel that produced the copy (the same in every layer). Per group: copies
per step, the layers, kernel time per step (median over steps of the group's summed copy
time), kernel time plus each copy's dispatch gap (only for copies a graph replay ran, where
the GPU would run the next node that much earlier; eagerly, and for a copy issued before the
graph launch, the gap is host time a removal does not free), the share of the step period, and the decode steps per arm an A/B would need to see it
(from the run's own step-period noise: a within-run figure; between boots an A/A says more).
What kind of change removes it follows from the role. Elementwise copy kernels (torch
``direct_copy_kernel``, Inductor copy kernels) are listed too, as kernels; one that Inductor
fused with other work cannot be removed by itself and gets no estimate.
"""
from __future__ import annotations

import math
import re
from statistics import NormalDist

import numpy as np

from copyprof.analysis.census.copy_sites import METADATA, MLP_OUTPUT, OTHER, PLACEMENT, POST, STAGING
from copyprof.analysis.results import Candidate
from copyprof.analysis.steps.rows import ROWS_PER_PASS
from copyprof.columns import Columns
from copyprof.grouping import commonest_text, distinct, first_seen_codes, group_ids, group_rows, known_floats, median
from copyprof.vocabulary import CandidateForm, Role

CHANGES = {
    POST: "return the projection directly instead of writing it into a caller-owned buffer",
    MLP_OUTPUT: "let the MLP/MoE block write its result into the caller's buffer (or return it directly)",
    PLACEMENT: "let the attention core write into the destination buffer",
    STAGING: "register the all-reduce buffer, or reduce in place",
    METADATA: "keep the input in a persistent device buffer (outside the model: not a layer's copy)",
    OTHER: "fuse into the producer",
}
_FUSED = re.compile(r"^triton_\w+?_fused_(?P<ops>\w+?)_\d+$")
_COPY_TOKENS = {"copy", "to", "clone", ""}


def issuer(source: object) -> str:
    """``vllm/x.py(270): _forward`` -> ``vllm/x.py: _forward`` (a patch moves the line, not the function)."""
    if not isinstance(source, str) or not source:
        return ""
    m = re.match(r"(.*)\(\d+\): (.*)$", source)
    return f"{m.group(1)}: {m.group(2)}" if m else source


def producer_family(name: str) -> str:
    """A kernel name without its template arguments: the same producer in every layer."""
    return re.sub(r"<.*", "", str(name)).strip()[:120]




def copy_groups(copies: Columns) -> tuple[np.ndarray, list[str]]:
    """Each copy's group (an id, in order of first appearance) and each group's key: role +
    issuing function, else role + kind (post-projection and placement copies only) + size +
    producer. Grouped on codes; only one key string per group is built."""
    n = len(copies)
    src, srcs = first_seen_codes(copies["source"], issuer) if "source" in copies else (np.zeros(n, dtype=np.int64), [""])
    role, roles = first_seen_codes(copies.strings("role"))
    kind, kinds = first_seen_codes(copies.strings("kind"))
    producer, producers = first_seen_codes(copies.strings("prev_kernel"), producer_family)
    nbytes = copies["bytes"]
    # The layer kind counts for post-projection and placement copies only ("" for the others).
    blank = kinds.index("") if "" in kinds else len(kinds)
    kind = np.where(np.isin(role, [i for i, r in enumerate(roles) if r in (POST, PLACEMENT)]), kind, blank)
    kinds.append("")
    # A sourced copy's group is its role and issuer alone: its other keys are -1.
    sourced = src != (srcs.index("") if "" in srcs else -1)
    gid, first = group_ids(role, src, np.where(sourced, -1, kind), np.where(sourced, -1, nbytes),
                           np.where(sourced, -1, producer))
    keys = [f"{roles[role[i]]}|{srcs[src[i]]}" if sourced[i] else
            f"{roles[role[i]]}|{kinds[kind[i]]}|{nbytes[i]}|{producers[producer[i]]}" for i in first.tolist()]
    return gid, keys


def copy_candidates(copies: Columns, per_step: Columns, *, graph: bool) -> list[Candidate]:
    """The census's copies as candidates, largest saving first."""
    if copies.empty:
        return []
    step = copies["step"]
    all_steps = per_step["step"] if not per_step.empty else distinct(step)
    period = known_floats(per_step["period_ns"]) / 1e6 if "period_ns" in per_step else np.array([])
    period_med = float(median(period)) if len(period) else None
    noise = _period_noise(period)
    out = []
    gid, keys = copy_groups(copies)
    dur, gap_ns, layer, kind, nbytes = (copies["dur_ns"], copies["gap_ns"], copies["layer"], copies.strings("kind"),
                                        copies["bytes"])
    role_of, prev = copies.strings("role"), copies.strings("prev_kernel")
    in_graph = copies["in_graph"].astype(bool) if "in_graph" in copies else np.zeros(len(copies), dtype=bool)
    sources = copies["source"] if "source" in copies else None
    shapes = copies["shape"] if "shape" in copies else None
    for key, g in zip(keys, group_rows(gid, len(keys))):
        kernel = _per_step_ms(step[g], dur[g], all_steps)
        replayed = in_graph[g]
        gap = _per_step_ms(step[g], np.where(replayed, gap_ns[g], 0), all_steps)
        removable = float(median(kernel))
        with_gap = float(median(kernel + gap)) if replayed.any() else removable
        role = Role(str(role_of[g[0]]))
        source = commonest_text(sources[g]) if sources is not None else None
        layers = sorted(int(x) for x in distinct(layer[g]) if x > 0)
        out.append(Candidate(
            form=CandidateForm.COPY, role=role, source=source or None,
            stack=list(copies["stack"][g[0]]) if source else [],
            layers=layers, kinds=sorted({str(k) for k in set(kind[g].tolist())} - {""}),
            bytes=sorted(int(b) for b in distinct(nbytes[g])),
            shape=commonest_text(shapes[g]) if shapes is not None else "", producer=producer_family(commonest_text(prev[g])),
            per_step=len(g) / max(len(all_steps), 1), removable_ms=removable,
            removable_with_gap_ms=with_gap, gap_counts=bool(replayed.any()),
            share_pct=100 * with_gap / period_med if period_med else None,
            steps_needed=steps_to_see(with_gap, noise), change=CHANGES.get(role, CHANGES[OTHER]), key=str(key)))
    return sorted(out, key=lambda c: -(c.removable_with_gap_ms or 0.0))


def kernel_candidates(events: Columns, rows: np.ndarray | None, op_first: np.ndarray | None,
                      op_steps: np.ndarray | None, per_step: Columns, *, graph: bool) -> list[Candidate]:
    """Elementwise copy kernels of the counted steps, by name (never counted as device copies).
    ``rows``: the counted ops' table positions in step order; ``op_first``/``op_steps``: each
    step's first position in ``rows`` and its id (the census' op index). Only the kernels'
    steps are looked up: a step per op would be ~4 MB at the analysis' end on a 1 GB trace."""
    if rows is None or op_first is None or op_steps is None or not len(rows):
        return []
    from copyprof.taxonomy.copies import kernel_copy_class

    name_col, kind_col = events["name"], events["kind"]
    names = name_col.categories
    elem = name_col.flags(lambda n: kernel_copy_class(n) == "elementwise_copy")  # per code, + False for missing
    if not elem.any():
        return []
    at = _elementwise_kernels(rows, name_col.codes, kind_col.codes, elem, kind_col.code_of("kernel"))
    if not len(at):
        return []
    all_steps = per_step["step"] if not per_step.empty else op_steps  # op_steps: ascending, each with ops
    period = known_floats(per_step["period_ns"]) / 1e6 if "period_ns" in per_step else np.array([])
    period_med = float(median(period)) if len(period) else None
    noise = _period_noise(period)
    k_rows = rows[at]
    k_step = op_steps[np.searchsorted(op_first, at, side="right") - 1]
    k_dur = events["dur_ns"][k_rows]
    k_codes, k_group = np.unique(name_col.codes[k_rows], return_inverse=True)  # by name code, ascending
    out = []
    for code, g in zip(k_codes.tolist(), group_rows(k_group.ravel(), len(k_codes))):
        name = str(names[code])
        is_pure = _pure_copy(name)
        ms = float(median(_per_step_ms(k_step[g], k_dur[g], all_steps)))
        out.append(Candidate(
            form=CandidateForm.KERNEL, role=Role.ELEMENTWISE_COPY, source=None, stack=[], layers=[], kinds=[], bytes=[], shape="",
            producer=kernel_label(name), per_step=len(g) / max(len(all_steps), 1),
            removable_ms=ms if is_pure else None, removable_with_gap_ms=ms if is_pure else None, gap_counts=False,
            share_pct=100 * ms / period_med if is_pure and period_med else None,
            steps_needed=steps_to_see(ms, noise) if is_pure else None,
            change=("write the result with the destination's dtype and layout in its producer" if is_pure else
                    "fused with other work by Inductor: not removable by itself"), key=f"kernel|{name}"))
    pure = sorted((c for c in out if c.removable_ms is not None), key=lambda c: -(c.removable_ms or 0.0))
    fused = [c for c in out if c.removable_ms is None]
    if fused:  # one line for them: none can be removed by itself
        pure.append(Candidate(
            form=CandidateForm.KERNEL, role=Role.FUSED_COPY, source=None, stack=[], layers=[], kinds=[], bytes=[], shape="",
            producer=f"{len(fused)} Inductor kernels that fuse a copy into other work (" +
                     ", ".join(c.producer for c in fused[:3]) + (", …" if len(fused) > 3 else "") + ")",
            per_step=sum(c.per_step for c in fused), removable_ms=None, removable_with_gap_ms=None, gap_counts=False,
            share_pct=None, steps_needed=None, change="fused with other work by Inductor: not removable by itself",
            key="kernel|fused"))
    return pure


def _elementwise_kernels(rows: np.ndarray, name_codes: np.ndarray, kind_codes: np.ndarray, elem: np.ndarray,
                         kernel_code: int) -> np.ndarray:
    """Positions in ``rows`` of the kernels whose name is an elementwise copy (``elem``: per name
    code, + False for missing), found a block of rows at a time: the lookups over every counted
    op (~1 M on a 1 GB trace) would hold ~4 MB of temporaries at the analysis' memory peak."""
    found = []
    for lo in range(0, len(rows), ROWS_PER_PASS):
        block = rows[lo : lo + ROWS_PER_PASS]
        hit = elem[name_codes[block]]
        hit &= kind_codes[block] == kernel_code
        found.append(lo + np.flatnonzero(hit))
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def kernel_label(name: str) -> str:
    """An elementwise copy kernel's name a reader recognises: the torch functor it runs
    (``direct_copy_kernel_cuda``, ``CatArrayBatchedCopy``), else the name without templates."""
    for part in ("direct_copy_kernel_cuda", "CatArrayBatchedCopy", "bfloat16_copy_kernel_cuda", "copy_kernel"):
        if part in name:
            return f"{producer_family(name)} ({part})"
    return producer_family(name)


def _pure_copy(name: str) -> bool:
    """A kernel that only copies (torch's copy kernels; an Inductor kernel whose fused ops are copies)."""
    m = _FUSED.match(name)
    if m is None:
        return not name.startswith("triton_")
    return set(m.group("ops").split("_")) <= _COPY_TOKENS


def _per_step_ms(step: np.ndarray, ns: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """The summed ``ns`` of each of ``steps`` (0 where a step has none; rows of other steps
    left out), ms. Integer ns sum exactly in float64 (every partial sum is far below 2**53)."""
    seen, at = np.unique(step, return_inverse=True)
    sums = np.bincount(at.ravel(), weights=ns, minlength=len(seen))
    pos = np.minimum(np.searchsorted(seen, steps), max(len(seen) - 1, 0))
    hit = seen[pos] == steps if len(seen) else np.zeros(len(steps), dtype=bool)
    return np.where(hit, sums[pos] if len(seen) else 0.0, 0.0) / 1e6




def _period_noise(period: np.ndarray) -> float | None:
    from copyprof.stats.shift import robust_noise

    return robust_noise(period) if len(period) >= 2 else None


_Z_ALPHA, _Z_POWER = NormalDist().inv_cdf(0.975), NormalDist().inv_cdf(0.8)


def steps_to_see(effect: float, noise: float | None) -> int | None:
    """Decode steps per arm at which a two-sided 5 % t test of the step period detects ``effect``
    at 80 % power: the normal-theory size plus Guenther's t correction z_a^2 / 4 (Guenther 1981,
    "Sample size formulas for normal theory t tests", The American Statistician 35(4)), within
    one step of the exact t-based size; no scipy import for a single run's report."""
    if noise is None or not effect or not math.isfinite(effect) or noise <= 0:
        return None
    n = 2 * ((_Z_ALPHA + _Z_POWER) * noise / abs(effect)) ** 2 + _Z_ALPHA ** 2 / 4
    return max(2, math.ceil(n))




