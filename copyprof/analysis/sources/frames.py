"""Which code issued each copy: GPU copy → runtime call → CPU op → Python frames.

Why: after "93 copies cost 0.5 ms" a reviewer asks where in the model code they are. A
torch-profiler trace with stacks (vLLM records them by default: ``torch_profiler_with_stack``)
has ``python_function`` events; each GPU copy carries the correlation id of the runtime call
that launched it (``cudaMemcpyAsync``), that call the ``External id`` of the CPU op around it
(``aten::copy_``), and the op runs inside the Python frames of its thread. The source of a
copy is the innermost of those frames that is not inside torch itself — named as torch names
it: the *first line of the function* (``vllm/.../qwen3_next.py(412): forward``), not the
statement — and ``stack`` is that frame and the callers above it, innermost first.

Copies launched by a graph replay (``cudaGraphLaunch``/``hipGraphLaunch``) have no stack; an
eager capture of the same step carries its sources over (analysis/sources/across_captures.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from copyprof.columns import Categorical, Columns
from copyprof.grouping import distinct
from copyprof.taxonomy.copies import is_graph_launch
from copyprof.taxonomy.modules import MODULE_PREFIX

STACK_DEPTH = 4  # frames in a copy's stack: its source and up to three callers
NO_STACKS = "the trace has no Python stacks (capture with with_stack on, e.g. `copyprof run --with-stack`)"
GRAPH = "launched by a graph replay: no Python stack (map an eager capture with --sources)"
NO_OP = "no CPU op found for its launch"

# Frames that are torch's own (or the interpreter's), never a model's source: torch's Python
# files, C functions and methods, the profiler's own frames, import machinery.
_TORCH_FRAME = re.compile(r"^(<built-in |<frozen |torch/|.*/site-packages/torch/|.*/torch/(nn|_tensor|functional|"
                          r"autograd|_ops|cuda|utils|_dynamo|_inductor|profiler)\b)")


def is_torch_frame(frame: str) -> bool:
    return bool(_TORCH_FRAME.match(frame))


@dataclass
class CopySources:
    """Per copy: ``source`` (frame or None), ``stack`` (innermost first), ``op`` (the CPU op,
    e.g. ``aten::copy_``), ``why`` (why there is no source, "" when there is one), ``shape``
    (the dims and dtypes its CPU op recorded, "" when not recorded)."""

    source: list[str | None]
    stack: list[list[str]]
    op: list[str]
    why: list[str]
    shape: list[str]
    modules: list[list[str]] | None = None  # the nn.Module frames around it, innermost first


class _Frames:
    """One thread's Python frames as a call tree: start-sorted intervals and each one's parent."""

    def __init__(self, start: np.ndarray, end: np.ndarray, names: np.ndarray) -> None:
        order = np.argsort(start, kind="stable")
        self.start, self.end, self.names = start[order], end[order], names[order]
        self.parent = np.full(len(order), -1, dtype=np.int64)
        open_: list[int] = []
        for i, (s, e) in enumerate(zip(self.start.tolist(), self.end.tolist())):
            while open_ and self.end[open_[-1]] < s:
                open_.pop()
            self.parent[i] = open_[-1] if open_ else -1
            open_.append(i)

    def enclosing(self, t: int) -> list[str]:
        """Frames whose interval holds ``t``, innermost first."""
        i = int(np.searchsorted(self.start, t, side="right")) - 1
        while i >= 0 and self.end[i] < t:
            i = int(self.parent[i])
        out = []
        while i >= 0:
            out.append(str(self.names[i]))
            i = int(self.parent[i])
        return out


def copy_sources(events: Columns, rows: np.ndarray, op_shapes: dict[str, str] | None = None) -> CopySources:
    """Sources of the events at positional ``rows`` (GPU copies, or host copy ops themselves)."""
    n = len(rows)
    out = CopySources([None] * n, [[] for _ in range(n)], [""] * n, [NO_STACKS] * n, [""] * n, [[] for _ in range(n)])
    if not n:
        return out
    rows = np.asarray(rows)
    kind = events["kind"]
    ops, anchors = _issuers(events, rows, kind)
    if op_shapes:
        ext = events["external_id"]
        out.shape = [op_shapes.get(str(int(ext[op])), "") if op >= 0 else "" for op in ops.tolist()]
    py = np.flatnonzero(kind == "python")
    for i in np.flatnonzero(anchors == -2).tolist():
        out.why[i] = GRAPH
    if not len(py):
        return out
    names, codes = _per_code(events["name"]), events["name"].codes
    tid = events["stream"]
    start = events["start_ns"]
    end = start[py] + events["dur_ns"][py]
    py_tid = tid[py]
    frames = {int(t): _Frames(start[py[py_tid == t]], end[py_tid == t], names[codes[py[py_tid == t]]])
              for t in distinct(py_tid).tolist()}
    for i, (op, anchor) in enumerate(zip(ops.tolist(), anchors.tolist())):
        if anchor == -2:
            continue
        if anchor < 0:
            out.why[i] = NO_OP
            continue
        out.op[i] = str(names[codes[op]]) if op >= 0 else ""
        tree = frames.get(int(tid[anchor]))
        chain = tree.enclosing(int(start[anchor])) if tree is not None else []
        out.modules[i] = [f for f in chain if f.startswith(MODULE_PREFIX)]  # type: ignore[index]
        mine = [f for f in chain if not is_torch_frame(f) and not f.startswith(MODULE_PREFIX)]
        if mine:
            out.source[i], out.stack[i], out.why[i] = mine[0], mine[:STACK_DEPTH], ""
        else:
            out.why[i] = "no frame outside torch encloses its CPU op"
    return out


def _per_code(col: Categorical) -> np.ndarray:
    """The names by code, then "" for a missing one (code -1): index it with the codes of the
    rows wanted, never a string per event."""
    per_code = np.empty(len(col.categories) + 1, dtype=object)
    per_code[:-1] = col.categories
    per_code[-1] = ""
    return per_code


def _issuers(events: Columns, rows: np.ndarray, kind: Categorical) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the CPU op that issued it (row, -1 unknown) and the host event to look up its
    Python frames at (the op, else the runtime call; -2 for a graph replay, -1 unknown).

    A host op is its own issuer. A GPU op's correlation id names its runtime call (the first
    with that id); the call's External id names the CPU op, else the innermost kept CPU op of
    its thread around the call (only copy ops are kept: a copy inside a custom op's C++ is
    found by its call alone). Vectorised over the runtime calls (an eager GB trace has ~10^6)."""
    corr = events["correlation"]
    out = np.full(len(rows), -1, dtype=np.int64)
    anchor = np.full(len(rows), -1, dtype=np.int64)
    is_cpu = kind == "cpu_op"
    host = is_cpu[rows]
    out[host] = anchor[host] = rows[host]
    runtime = np.flatnonzero((kind == "runtime") & (corr >= 0))
    if not len(runtime) or host.all():
        return out, anchor
    keys, first = np.unique(corr[runtime], return_index=True)
    at = np.clip(np.searchsorted(keys, corr[rows]), 0, len(keys) - 1)
    found = ~host & (keys[at] == corr[rows])
    call = np.where(found, runtime[first[at]], -1)
    name = events["name"]
    launch = name.flags(is_graph_launch)  # per name code (and a last False for a missing name)
    ext = events["external_id"]
    cpu = np.flatnonzero(is_cpu)
    op_of_ext = {int(e): int(r) for e, r in zip(ext[cpu][::-1].tolist(), cpu[::-1].tolist()) if e >= 0}
    tid = events["stream"][cpu]
    start = events["start_ns"][cpu]
    end = start + events["dur_ns"][cpu]
    c_tid, c_start = events["stream"], events["start_ns"]
    for i in np.flatnonzero(found).tolist():
        c = int(call[i])
        if launch[name.codes[c]]:
            anchor[i] = -2
            continue
        if int(ext[c]) in op_of_ext:
            out[i] = op_of_ext[int(ext[c])]
        else:
            inside = (tid == c_tid[c]) & (start <= c_start[c]) & (end >= c_start[c])
            out[i] = int(cpu[inside][np.argmax(start[inside])]) if inside.any() else -1
        anchor[i] = out[i] if out[i] >= 0 else c
    return out, anchor
