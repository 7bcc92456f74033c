"""Copy taxonomy, kept as data: which events are device-to-device copies, and their bytes.

Each pattern says where it was seen. Classification runs on the *unique* names of a table
(a Categorical), never per event.

Classes:
- ``d2d``: device-to-device copies — the ones counted in ``d2d_copies``.
- ``elementwise_copy``: copy kernels that torch / Triton generate; listed on their own,
  never counted as d2d (they are not memcpy commands, and compile/dtype changes create them).
- ``memset``: fills (rocclr fill kernels are memsets, not copies).
- ``other_copy``: host<->device and other memcpy directions.
- ``""``: not a copy.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Union

import numpy as np

from copyprof.columns import Categorical, Columns

if TYPE_CHECKING:
    import pandas as pd

# The event table: ``Columns`` on the report path; a DataFrame still works here for code off it
# (inspect, a library user) that reads ``trace.events``.
Table = Union[Columns, "pd.DataFrame"]

# Kernels that ARE device-to-device memcpy commands.
D2D_KERNEL_PATTERNS: tuple[tuple[str, str], ...] = (
    # ROCclr blit kernel used by HIP for every intra-device D2D hipMemcpy*, and for D2D memcpy
    # nodes in HIP graphs (ROCm/clr rocclr/device/blitcl.cpp, rocblit.cpp). Seen as
    # `__amd_rocclr_copyBuffer.kd` in rocprofiler-sdk Kineto and rocprofv3 JSON (908 sample,
    # 3,153 dispatches), `__amd_rocclr_copyBuffer` in rocprofv3 CSV (name formatted, .kd cut).
    (r"^__amd_rocclr_copyBuffer(Rect)?(Aligned)?(\.kd)?$", "rocclr-blit"),
    # ROCclr batch blit: one dispatch copies several same-size buffers of a hipMemcpyBatchAsync
    # (ROCm/rocm-systems#5967 "Add shader batch copy", merged 2026-05): ``__kernel void
    # __amd_rocclr_copyBufferBatch(descriptors, workgroup_size, copy_stride)`` in
    # projects/clr/rocclr/device/blitcl.cpp (read at rocm-systems 01d1c717), descriptor =
    # workgroup_id_y, so grid.y is the number of buffers and the grid says nothing of their size.
    # Counted as one copy event; its bytes are left unknown. Users report faults "in
    # __amd_rocclr_copyBufferBatch" on ROCm 7.15 (public code comments), so the name is dispatched.
    (r"^__amd_rocclr_copyBufferBatch(\.kd)?$", "rocclr-blit-batch"),
    # Indirect batch blit for unaligned and small copies: named by ROCm/rocm-systems#10118 ("Adds
    # __amd_rocclr_copyBufferBatchIndirect to the blit kernels", closed 2026-08). NOT verified:
    # no stored rocclr blitcl.cpp version defines it (checked up to the 2026 versions readable
    # here); kept because a kernel of that name would be the same batch copy.
    (r"^__amd_rocclr_copyBufferBatchIndirect(\.kd)?$", "rocclr-blit-batch"),
    # Device-library batch copy, ROCm/llvm-project#2556 ("New kernel __amd_copyBufferBatch is
    # added ... used for D2D batch copies in hipMemcpyBatchAsync", merged 2026-05-15). NOT verified
    # as a dispatched name: the stored amdblit.cl (ROCm/llvm-project 0f05e4e1) predates it, and in
    # amdblit.cl the ``__amd_*`` copy helpers are always-inline functions that rocclr wraps in
    # ``__amd_rocclr_*`` kernels (the name a trace shows). Listed so a direct dispatch is counted.
    (r"^__amd_copyBufferBatch(\.kd)?$", "rocclr-blit-batch"),
    # rocprofiler-sdk Kineto before kineto 03ab8cb0 (2026-03-12) typed SDMA copies as kernels
    # with these names (KIN RocprofActivity_inl.h; TraceLens util.py notes the same).
    (r"^MEMORY_COPY_DEVICE_TO_DEVICE$", "sdma-as-kernel"),
    # CUDA driver memcpy kernel in CUDA-graph replay, measured on H200 torch 2.11 + CUDA 13
    # (trace-formats.md §1.5.1): bytes = grid.x * 256 * 4. Sibling names are unverified.
    (r"^memcpy\d*_post$", "cuda-driver-memcpy"),
)
ELEMENTWISE_COPY_PATTERNS: tuple[tuple[str, str], ...] = (
    # torch dtype/stride-changing copies (pytorch aten/src/ATen/native/cuda/Copy.cu); seen in
    # H200 captures of a bf16->fp32 `copy_` (vllm-and-kimi.md §5.1).
    (r"direct_copy_kernel", "torch-elementwise"),
    (r"CatArrayBatchedCopy", "torch-cat"),
    # Inductor: `triton_poi_fused_copy__0` (H200, torch.compile writing into a buffer).
    (r"^triton_\w*_fused_\w*copy", "triton-copy"),
)
MEMSET_KERNEL_PATTERNS: tuple[tuple[str, str], ...] = (
    # ROCclr fill kernels (fillBufferAligned[2D], fillBufferUnAligned): 3,213 in the 908 sample.
    (r"^__amd_rocclr_fill\w*(\.kd)?$", "rocclr-fill"),
)
OTHER_COPY_KERNEL_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"^MEMORY_COPY_(HOST_TO_DEVICE|DEVICE_TO_HOST|HOST_TO_HOST)$", "sdma-as-kernel"),
)
# Copies as ``gpu_memcpy`` records (kind memcpy; the direction from ``args.kind`` or the name):
# CUPTI and roctracer ``Memcpy DtoD (Device -> Device)``; rocprofiler-sdk kineto writes its
# MEMORY_COPY buffer records the same way since kineto 03ab8cb0 (2026-03-12; verified in kineto
# 114171df ``RocprofActivity_inl.h``: GpuActivity::name "Memcpy {DtoD|HtoD|DtoH|HtoH} ({src} ->
# {dst})", ``args.kind`` "DtoD", ``args.bytes`` from the copy API). TraceLens (util.py,
# TraceEventUtils) says ROCm 7.2 moved copies from cat=kernel (MEMORY_COPY_*,
# __amd_rocclr_copyBuffer*) to cat=gpu_memcpy; for the SDMA copies kineto's source agrees, for
# blit kernels it does not (they stay kernel dispatches there): both forms are counted.
D2D_DIRECTIONS = frozenset({"DtoD", "PtoP"})

# Host-side copy ops kept from cpu_op events (CPU-only traces list these per step).
HOST_COPY_OPS = frozenset({"aten::copy_", "aten::_to_copy", "aten::clone", "aten::contiguous", "aten::to"})

# Graph launches: CUDA runtime/driver and HIP names; nsys appends _v\d+ (stripped by its reader).
_GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch")


def is_graph_launch(name: str) -> bool:
    return bool(_GRAPH_LAUNCH.match(name))


def _compile(patterns: tuple[tuple[str, str], ...]) -> list[re.Pattern[str]]:
    return [re.compile(p) for p, _ in patterns]


_D2D = _compile(D2D_KERNEL_PATTERNS)
_ELEM = _compile(ELEMENTWISE_COPY_PATTERNS)
_FILL = _compile(MEMSET_KERNEL_PATTERNS)
_OTHER = _compile(OTHER_COPY_KERNEL_PATTERNS)


def kernel_copy_class(name: str) -> str:
    if any(p.search(name) for p in _D2D):
        return "d2d"
    if any(p.search(name) for p in _ELEM):
        return "elementwise_copy"
    if any(p.search(name) for p in _FILL):
        return "memset"
    if any(p.search(name) for p in _OTHER):
        return "other_copy"
    return ""


def _column(events: Table, name: str) -> np.ndarray:
    """A numeric column as a numpy array (a ``Columns`` column is one already; a Series' values)."""
    return np.asarray(events[name])


def _cat(events: Table, name: str) -> Categorical:
    """A string column as a ``Categorical`` (a pandas categorical through its codes: no string per row)."""
    col = events[name]
    if isinstance(col, Categorical):
        return col
    if hasattr(col, "cat"):  # a pandas categorical Series
        return Categorical(col.cat.codes.to_numpy(), col.cat.categories.tolist())
    return Categorical.from_values(np.asarray(col, dtype=object))


def _class_by_name(names: Categorical) -> np.ndarray:
    return np.array([kernel_copy_class(str(n)) for n in names.categories.tolist()], dtype=object)


def _by_code(names: Categorical, per_name: np.ndarray, missing: object) -> np.ndarray:
    """A per-name value for every event, through the Categorical's codes (no string per event)."""
    return per_name[names.codes] if len(per_name) else np.full(len(names), missing, dtype=per_name.dtype)


def copy_class(events: Table) -> np.ndarray | pd.Series:
    """Copy class of every event (see module docstring): an object array of strings for a
    ``Columns`` table, a string Series (on the frame's index) for a DataFrame."""
    names, kind = _cat(events, "name"), _cat(events, "kind")
    kernel_cls = _by_code(names, _class_by_name(names), "")
    out = np.where(kind == "kernel", kernel_cls, "")
    is_memcpy = kind == "memcpy"
    d2d_dir = _cat(events, "copy_dir").isin(D2D_DIRECTIONS)
    out = np.where(is_memcpy & d2d_dir, "d2d", out)
    out = np.where(is_memcpy & ~d2d_dir, "other_copy", out)
    out = np.where(kind == "memset", "memset", out).astype(object)
    if isinstance(events, Columns):
        return out
    import pandas as pd  # a DataFrame's caller has pandas loaded already

    return pd.Series(out, index=events.index, dtype=object)


def d2d_mask(events: Table) -> np.ndarray:
    """``copy_class(events) == "d2d"`` without building a string per event (the census's filter)."""
    return d2d_at(events, None, _cat(events, "kind").codes, _cat(events, "name").codes)


def d2d_at(events: Table, rows: np.ndarray | None, kind_codes: np.ndarray, name_codes: np.ndarray) -> np.ndarray:
    """:func:`d2d_mask` at positional ``rows`` (None: every row), whose kind and name codes the
    caller has already gathered (the census reads them for other ends too): no table-sized mask,
    and the copy direction read only at the memcpy rows."""
    kind, names = _cat(events, "kind"), _cat(events, "name")
    per_name = _class_by_name(names) == "d2d"
    kernel_d2d = per_name[name_codes] if len(per_name) else np.zeros(len(name_codes), dtype=bool)  # as _by_code
    out = (kind_codes == kind.code_of("kernel")) & kernel_d2d
    memcpy = np.flatnonzero(kind_codes == kind.code_of("memcpy"))
    direction = _cat(events, "copy_dir")
    out[memcpy] = direction.flags(D2D_DIRECTIONS.__contains__)[direction.codes[memcpy if rows is None else rows[memcpy]]]
    return out


def resolve_bytes_at(events: Table, rows: np.ndarray, cus: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Bytes (int64) and their source (object array) of the copies at positional ``rows``,
    filling those the trace left unknown: correlated runtime call, else launch geometry.

    Only the given rows are touched, so the census never copies a multi-million-row table.
    Geometry:
    - ``memcpy\\d*_post`` (CUDA): bytes = grid.x * block.x * 4 (measured on H200 with block 256).
    - ``__amd_rocclr_copyBuffer``: grid work-items = alignUp(min(CUs*512, ceil(bytes/16)), 512)
      for 16-B aligned copies (workgroup 512; 4-B elements with workgroup 1024). Only an
      upper bound is known (bytes in (bound - 512*elem, bound]); marked ``grid-bound``. When
      the grid is saturated (CUs*512 work-items) the size is unknown and stays -1.
    """
    all_bytes = _column(events, "bytes")
    nbytes = all_bytes[rows].astype(np.int64)
    src_col = _cat(events, "bytes_src")  # through the codes: no string per event
    src = src_col.categories[src_col.codes[rows]]
    need = nbytes < 0
    if not need.any():
        return nbytes, src
    # 1) the runtime call with the same correlation id (hipMemcpyAsync rows carry bytes/size);
    #    the first such call wins when an id repeats.
    corr = _column(events, "correlation")
    rt = np.flatnonzero((_cat(events, "kind") == "runtime") & (all_bytes >= 0) & (corr >= 0))
    if len(rt):
        keys, first = np.unique(corr[rt], return_index=True)
        looked = corr[rows]
        at = np.clip(np.searchsorted(keys, looked), 0, len(keys) - 1)
        take = need & (keys[at] == looked)
        nbytes[take] = all_bytes[rt[first[at[take]]]]
        src[take] = "runtime"
        need &= ~take
    # 2) launch geometry (vectorised: a census asks this for tens of thousands of copies).
    grid_x = _column(events, "grid_x")[rows]
    at = np.flatnonzero(need & (grid_x > 0))
    if not len(at):
        return nbytes, src
    gx = grid_x[at].astype(np.int64)
    bx = _column(events, "block_x")[rows[at]].astype(np.int64)
    memcpy, blit = _geometry_kernels(events, rows[at])
    nbytes[at[memcpy]] = gx[memcpy] * np.where(bx[memcpy] > 0, bx[memcpy], 256) * 4
    src[at[memcpy]] = "grid"
    wg = np.where(bx > 0, bx, 512)
    work_items = gx * wg
    if cus:
        blit &= work_items < cus * wg  # a saturated grid: bytes not recoverable
    nbytes[at[blit]] = work_items[blit] * np.where(wg[blit] == 512, 16, 4)
    src[at[blit]] = "grid-bound"
    return nbytes, src


def _is_memcpy_kernel(name: str) -> bool:
    return name.startswith("memcpy")


def _is_linear_blit(name: str) -> bool:
    return name.startswith("__amd_rocclr_copyBuffer") and "Rect" not in name and "Batch" not in name


def _geometry_kernels(events: Table, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the events at ``rows``: a CUDA ``memcpy*`` copy kernel, and a rocclr linear blit (not
    Rect, not Batch) — the two whose launch geometry gives their size. Judged once per name."""
    col = _cat(events, "name")
    codes = col.codes[rows]
    return col.flags(_is_memcpy_kernel)[codes], col.flags(_is_linear_blit)[codes]


def bytes_match(nbytes: np.ndarray, bytes_src: np.ndarray, target: int) -> np.ndarray:
    """Whether each copy's bytes are consistent with a copy of exactly ``target`` bytes."""
    exact = (nbytes == target) & (bytes_src != "grid-bound")
    # rocclr aligned blit: bound = alignUp(ceil(target/16), 512) * 16.
    bound = -(-(-(-target // 16)) // 512) * 512 * 16
    approx = (bytes_src == "grid-bound") & (nbytes == bound)
    return exact | approx
