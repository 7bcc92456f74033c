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
from collections.abc import Callable
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from copyprof.analysis.census.copy_sites import METADATA, MLP_OUTPUT, OTHER, PLACEMENT, POST, STAGING
from copyprof.analysis.results import Candidate
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


def _each_unique(values: pd.Series, fn: Callable[[Any], str]) -> pd.Series:
    """``fn`` of each value, computed once per distinct value (a step repeats its copies)."""
    seen = {v: fn(v) for v in pd.unique(values.astype(object))}
    return values.astype(object).map(seen)


def copy_groups(copies: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Each copy's group (an id, in order of first appearance) and each group's key: role +
    issuing function, else role + kind (post-projection and placement copies only) + size +
    producer. Grouped on factorized columns; only one key string per group is built."""
    src = _each_unique(copies["source"], issuer) if "source" in copies else pd.Series("", index=copies.index)
    role = copies["role"].astype(str).to_numpy(dtype=object)
    kind = np.where(np.isin(role, [POST, PLACEMENT]), copies["kind"].astype(str).to_numpy(dtype=object), "")
    producer = _each_unique(copies["prev_kernel"], producer_family).to_numpy(dtype=object)
    nbytes = copies["bytes"].to_numpy()
    sourced = (src != "").to_numpy()
    parts = pd.DataFrame({"role": pd.factorize(role)[0], "src": pd.factorize(src.to_numpy(dtype=object))[0],
                          "kind": np.where(sourced, -1, pd.factorize(kind)[0]),
                          "bytes": np.where(sourced, -1, nbytes),
                          "producer": np.where(sourced, -1, pd.factorize(producer)[0])})
    gid = parts.groupby(list(parts.columns), sort=False).ngroup().to_numpy()
    first = np.unique(gid, return_index=True)[1]
    srcs = src.to_numpy(dtype=object)
    keys = [f"{role[i]}|{srcs[i]}" if sourced[i] else f"{role[i]}|{kind[i]}|{nbytes[i]}|{producer[i]}" for i in first]
    return gid, keys


def copy_candidates(copies: pd.DataFrame, per_step: pd.DataFrame, *, graph: bool) -> list[Candidate]:
    """The census's copies as candidates, largest saving first."""
    if copies.empty:
        return []
    steps = np.sort(copies["step"].unique()) if len(copies) else np.array([])
    all_steps = per_step["step"].to_numpy() if not per_step.empty else steps
    period = per_step["period_ns"].dropna().to_numpy(dtype=float) / 1e6 if "period_ns" in per_step else np.array([])
    period_med = float(np.median(period)) if len(period) else None
    noise = _period_noise(period)
    out = []
    gid, keys = copy_groups(copies)
    for group, g in copies.groupby(gid, sort=False):
        key = keys[group]
        kernel = _per_step_ms(g, "dur_ns", all_steps)
        replayed = g["in_graph"].to_numpy(dtype=bool) if "in_graph" in g else np.zeros(len(g), dtype=bool)
        gap = _per_step_ms(g.assign(gap_ns=np.where(replayed, g["gap_ns"], 0)), "gap_ns", all_steps)
        removable = float(np.median(kernel))
        with_gap = float(np.median(kernel + gap)) if replayed.any() else removable
        role = Role(str(g["role"].iloc[0]))
        source = _commonest(g["source"]) if "source" in g else None
        layers = sorted(int(x) for x in g["layer"].unique() if x > 0)
        out.append(Candidate(
            form=CandidateForm.COPY, role=role, source=source or None, stack=list(g["stack"].iloc[0]) if source else [],
            layers=layers, kinds=sorted({str(k) for k in g["kind"].unique()} - {""}),
            bytes=sorted(int(b) for b in g["bytes"].unique()),
            shape=_commonest(g["shape"]) if "shape" in g else "", producer=producer_family(_commonest(g["prev_kernel"])),
            per_step=len(g) / max(len(all_steps), 1), removable_ms=removable,
            removable_with_gap_ms=with_gap, gap_counts=bool(replayed.any()),
            share_pct=100 * with_gap / period_med if period_med else None,
            steps_needed=steps_to_see(with_gap, noise), change=CHANGES.get(role, CHANGES[OTHER]), key=str(key)))
    return sorted(out, key=lambda c: -(c.removable_with_gap_ms or 0.0))


def kernel_candidates(events: pd.DataFrame, rows: np.ndarray | None, steps_of_rows: np.ndarray | None,
                      per_step: pd.DataFrame, *, graph: bool) -> list[Candidate]:
    """Elementwise copy kernels of the counted steps, by name (never counted as device copies)."""
    if rows is None or steps_of_rows is None or not len(rows):
        return []
    from copyprof.taxonomy.copies import kernel_copy_class

    names = events["name"].cat.categories
    elem = np.array([kernel_copy_class(n) == "elementwise_copy" for n in names], dtype=bool)
    if not elem.any():
        return []
    codes = events["name"].cat.codes.to_numpy()[rows]
    kernel = (events["kind"] == "kernel").to_numpy()[rows] & elem[codes]  # on the codes: no object array
    if not kernel.any():
        return []
    all_steps = per_step["step"].to_numpy() if not per_step.empty else np.unique(steps_of_rows)
    period = per_step["period_ns"].dropna().to_numpy(dtype=float) / 1e6 if "period_ns" in per_step else np.array([])
    period_med = float(np.median(period)) if len(period) else None
    noise = _period_noise(period)
    frame = pd.DataFrame({"step": steps_of_rows[kernel], "code": codes[kernel],
                          "dur_ns": events["dur_ns"].to_numpy()[rows][kernel]})
    out = []
    for code, g in frame.groupby("code"):
        name = str(names[code])
        is_pure = _pure_copy(name)
        ms = float(np.median(_per_step_ms(g, "dur_ns", all_steps)))
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


def _per_step_ms(g: pd.DataFrame, col: str, steps: np.ndarray) -> np.ndarray:
    """The group's summed ``col`` per counted step (0 where a step has none), ms."""
    sums = g.groupby("step")[col].sum()
    return sums.reindex(steps, fill_value=0).to_numpy(dtype=float) / 1e6


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


def _commonest(values: pd.Series) -> str:
    seen = values.dropna()
    seen = seen[seen.astype(bool)]
    return str(seen.value_counts().index[0]) if len(seen) else ""


