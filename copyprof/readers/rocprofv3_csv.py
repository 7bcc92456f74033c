"""rocprofv3 CSV output directories (``<pid>_kernel_trace.csv`` & co.) -> one event table.

Why pandas' C parser and not ``csv``: a kernel trace of a serving run has millions of rows;
the C parser reads them ~20x faster. It is never handed a cut-off last line: a file that
does not end in a newline has its tail line checked by hand first and dropped when
incomplete, so a truncated capture still yields its good rows plus a ``meta.partial`` note.

Header generations (trace-formats.md §2.2) are handled by column *name*, case-insensitively:
kernel_trace with/without ``Stream_Id``, old register columns vs ``LDS_Block_Size``/``VGPR_Count``,
and the rocpd2csv variant with a leading ``Guid`` and ``Lds_Block_Size`` casing. ``Grid_Size_*``
is in work-items; the table wants blocks (grid / workgroup, rounded up).

Which files are rocprofv3 CSVs, of which domain, and which belong together is
copyprof/readers/rocprofv3_csv_files.py. Rows are assembled into the table by
copyprof/readers/rocprof_parts.py, shared with the rocprofv3 JSON and rocpd readers so the
three agree on every convention.
"""
from __future__ import annotations

import csv
import io
import os
import re
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pandas as pd

from copyprof.errors import CopyprofError
from copyprof.events import Trace, TraceMeta
from copyprof.readers.files import BlockStream, is_gzip
from copyprof.readers.rocprof_parts import assemble, copy_dir_of, finish_meta, grid_blocks, memcpy_name, part
from copyprof.readers.rocprofv3_csv_files import FILE_RE, REQUIRED, csv_groups, domain_of, header_fields

_KERNEL_COLS = {"agent_id", "queue_id", "stream_id", "thread_id", "kernel_name", "correlation_id",
                "start_timestamp", "end_timestamp", "workgroup_size_x", "workgroup_size_y",
                "workgroup_size_z", "grid_size_x", "grid_size_y", "grid_size_z",
                "graph_exec_id", "graph_node_id"}
_COPY_COLS = {"direction", "stream_id", "source_agent_id", "destination_agent_id",
              "correlation_id", "start_timestamp", "end_timestamp"}
_API_COLS = {"domain", "function", "process_id", "thread_id", "correlation_id",
             "start_timestamp", "end_timestamp"}
_AGENT_COLS = {"node_id", "logical_node_id", "agent_type", "type", "name", "product_name", "cu_count"}
_WANTED = {"kernel": _KERNEL_COLS, "memcpy": _COPY_COLS, "api": _API_COLS, "agents": _AGENT_COLS}


# ----------------------------------------------------------------------------- file loading
def _load(path: str) -> tuple[pd.DataFrame, str, str | None]:
    """Read one CSV: (frame with lower-case columns, domain, partial note or None)."""
    name = os.path.basename(path)
    if os.path.getsize(path) == 0:
        raise CopyprofError("file is empty", path=path)
    note = None
    gz = is_gzip(path)
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        clean_end = fh.read(1) == b"\n" and not gz
        fh.seek(0)
        head = fh.read(65536) if not gz else b""
    data: bytes | None = None
    if not clean_end:
        stream = BlockStream(path)
        data = b"".join(stream)
        if stream.truncated:
            note = f"{name}: {stream.describe_partial()}"
        head = data[:65536]
    header = header_fields(head)
    if not any(header):
        raise CopyprofError("file is empty (no CSV header)", path=path)
    domain = domain_of(header)
    if domain is None:
        raise CopyprofError(
            f"not a rocprofv3 CSV: header {','.join(header[:6])}... has none of the "
            "kernel_trace / memory_copy_trace / api_trace / agent_info column sets", path=path)
    missing = [c for c in REQUIRED[domain] if c not in header]
    if missing:
        raise CopyprofError(f"header lacks column(s) {', '.join(missing)}", path=path)
    if data is not None and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        tail = data[cut:]
        if cut and tail.strip() and not _tail_ok(tail, header):
            data = data[:cut]
            note = f"{note or name}: the last line is cut off and was dropped"
    wanted = _WANTED[domain]
    try:
        df = pd.read_csv(io.BytesIO(data) if data is not None else path, engine="c",
                         keep_default_na=False, low_memory=False,
                         usecols=lambda c: c.strip().lstrip("\ufeff").lower() in wanted)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise CopyprofError(f"cannot parse CSV: {str(exc).strip().splitlines()[0]}", path=path) from exc
    df.columns = [c.strip().lstrip("\ufeff").lower() for c in df.columns]
    if note:
        note = f"{note}; read {len(df):,} rows"
    return df, domain, note


def _tail_ok(tail: bytes, header: list[str]) -> bool:
    """A last line without newline is kept only if it is complete and its times are sane."""
    try:
        fields = next(csv.reader([tail.decode("utf-8")], strict=True))
    except (csv.Error, UnicodeDecodeError, StopIteration):
        return False
    if len(fields) != len(header) or tail.count(b'"') % 2:
        return False
    row = dict(zip(header, fields))
    try:
        return int(row.get("end_timestamp", 0)) >= int(row.get("start_timestamp", 0))
    except ValueError:
        return False


def _ints(df: pd.DataFrame, col: str, path: str, required: bool = False) -> np.ndarray:
    """An integer column; empty cells are -1 unless required; other junk is an error."""
    if col not in df:
        return np.full(len(df), -1, np.int64)
    s = df[col]
    if s.dtype.kind == "i":
        return s.to_numpy().astype(np.int64)
    text = s.astype(str).str.strip()
    empty = (text == "").to_numpy() | s.isna().to_numpy()
    # Parse only the filled cells so they stay int64 (ns clocks exceed float's 2**53).
    num = pd.to_numeric(text[~empty], errors="coerce").to_numpy()
    bad = np.zeros(len(s), bool)
    if num.dtype.kind == "f":  # junk, fractions, inf, or beyond uint64: none of them is an int64
        with np.errstate(invalid="ignore"):
            bad[~empty] = ~(np.isfinite(num) & (num % 1 == 0) & (num >= -(2.0**63)) & (num < 2.0**63))
    elif num.dtype.kind == "u":  # pandas keeps 2**63 .. 2**64-1 as uint64: too big for the table
        bad[~empty] = num > np.iinfo(np.int64).max
    elif num.dtype.kind != "i":
        bad[~empty] = True
    if required:
        bad |= empty
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        what = "missing" if empty[i] else f"{str(s.iloc[i])[:40]!r}, not a 64-bit integer"
        raise CopyprofError(f"line {i + 2}: {col} is {what}", path=path)
    out = np.full(len(s), -1, np.int64)
    out[~empty] = num.astype(np.int64)
    return out


# ----------------------------------------------------------------------------- agents
def _agent_key(value: Any) -> tuple[str, int] | None:
    """``2`` / ``"Agent 2"`` -> ("agent", 2); ``"GPU 0"`` -> ("gpu", 0); ``"CPU 0"`` -> ("cpu", 0)."""
    m = re.fullmatch(r"\s*(agent|gpu|cpu)?\s*(\d+)\s*", str(value), re.I)
    if not m:
        return None
    return ((m[1] or "agent").lower(), int(m[2]))


class _Agents:
    """Maps agent ids to GPU device ordinals: from agent_info when present, else by ordinal
    among the agents the kernels (and device side of copies) ran on."""

    def __init__(self, info: pd.DataFrame | None, gpu_seen: set[int], path: str | None) -> None:
        self.devices: list[dict[str, Any]] = []
        self.by_node: dict[int, int] = {}
        self.by_logical: dict[int, int] = {}
        if info is not None and len(info):
            tcol = "agent_type" if "agent_type" in info else "type"
            types = info[tcol].astype(str).str.strip().str.upper() if tcol in info else None
            nodes = _ints(info, "node_id", path or "", True)
            logical = _ints(info, "logical_node_id", path or "")
            gpu = (types.isin(["GPU", "2"]).to_numpy() if types is not None
                   else np.ones(len(info), bool))
            cus = _ints(info, "cu_count", path or "")
            for rank, i in enumerate(sorted(np.flatnonzero(gpu), key=lambda i: nodes[i])):
                self.by_node[int(nodes[i])] = rank
                self.by_logical.setdefault(int(logical[i]), rank)
                row = info.iloc[i]
                self.devices.append({"index": rank, "name": str(row.get("product_name", "")) or None,
                                     "arch": str(row.get("name", "")) or None,
                                     "cus": int(cus[i]) if cus[i] > 0 else None, "node_id": int(nodes[i])})
        else:
            for rank, n in enumerate(sorted(gpu_seen)):
                self.by_node[n] = rank
                self.devices.append({"index": rank, "name": None, "arch": None, "cus": None,
                                     "agent": f"Agent {n}"})

    def device(self, key: tuple[str, int] | None) -> int:
        if key is None or key[0] == "cpu":
            return -1
        if key[0] == "gpu":
            return key[1]
        return self.by_node.get(key[1], self.by_logical.get(key[1], -1))

    def map(self, column: pd.Series) -> np.ndarray:
        codes, uniq = pd.factorize(column)  # hash a few distinct agents, not sort a million
        dev = np.array([self.device(_agent_key(u)) for u in uniq] + [-1], np.int64)
        return dev[codes]  # code -1 (missing) picks the trailing -1


def _device_side(direction: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Which end of a copy is the GPU that did it: dst for HtoD, src for DtoH and DtoD."""
    d = direction.astype(str).map(copy_dir_of).to_numpy()
    return (d == "DtoH") | (d == "DtoD"), d == "HtoD"


# ----------------------------------------------------------------------------- reading a group
def read_rocprofv3_csv_file(path: str) -> list[Trace]:
    """One CSV named alone: read with the other parts of its process from the same folder
    (kernel, memory copy, API and marker traces are separate files), or alone if none."""
    folder = os.path.dirname(path) or "."
    for group in csv_groups(sorted(os.path.join(folder, f) for f in os.listdir(folder))):
        if os.path.abspath(path) in {os.path.abspath(p) for p in group}:
            return read_rocprofv3_csv(group)
    return read_rocprofv3_csv([path])


def read_rocprofv3_csv(paths: list[str]) -> list[Trace]:
    """Read one group of rocprofv3 CSV files (see ``csv_groups``) into a one-element list."""
    if not paths:
        raise CopyprofError("no rocprofv3 CSV files given")
    frames, notes = _load_group(paths)
    agents = _agents_of(frames)
    parts: list[dict[str, Any]] = []
    warnings: list[str] = []
    stream_fields: set[str] = set()
    for p, df in frames["kernel"]:
        kernels, field = _kernel_part(p, df, agents)
        parts.append(kernels)
        stream_fields.add(field)
    parts += [_memcpy_part(p, df, agents) for p, df in frames["memcpy"]]
    pids: set[int] = set()
    for p, df in frames["api"]:
        parts.append(_api_part(p, df, warnings, pids))
    meta = TraceMeta(path=paths[0], format="rocprofv3-csv", flavour="rocprofiler-sdk", ranks=[0],
                     devices=agents.devices, metadata=_metadata(paths, pids, stream_fields), warnings=warnings,
                     partial="; ".join(notes) if notes else None)
    return [finish_meta(meta, assemble(parts), parts)]


def _load_group(paths: list[str]) -> tuple[dict[str, list[tuple[str, pd.DataFrame]]], list[str]]:
    """Load every file: ({domain: [(path, frame)]}, partial notes); a group without a trace file
    or without any row is a CopyprofError."""
    frames: dict[str, list[tuple[str, pd.DataFrame]]] = defaultdict(list)
    notes: list[str] = []
    for p in paths:
        df, domain, note = _load(p)
        frames[domain].append((p, df))
        notes += [note] if note else []
    events_files = [(p, df) for d in ("kernel", "memcpy", "api") for p, df in frames[d]]
    if not events_files:
        raise CopyprofError("only agent_info, no kernel/memory copy/API trace", path=paths[0])
    if not any(len(df) for _, df in events_files):
        raise CopyprofError("has a header but no rows", path=events_files[0][0])
    return frames, notes


def _agents_of(frames: dict[str, list[tuple[str, pd.DataFrame]]]) -> _Agents:
    """The agent map of the group: agent_info's when there is one, else the GPU agents seen in
    the kernels' ``Agent_Id`` and on the device side of the copies."""
    gpu_seen: set[int] = set()
    for _, df in frames["kernel"]:
        gpu_seen |= {k[1] for k in map(_agent_key, pd.unique(df["agent_id"].astype(str))) if k and k[0] == "agent"}
    for _, df in frames["memcpy"]:
        src_side, dst_side = _device_side(df["direction"])
        for col, side in (("source_agent_id", src_side), ("destination_agent_id", dst_side)):
            if col in df:
                keys = map(_agent_key, pd.unique(df.loc[side, col].astype(str)))
                gpu_seen |= {k[1] for k in keys if k and k[0] == "agent"}
    info_path, info = (frames["agents"][0] if frames["agents"] else (None, None))
    return _Agents(info, gpu_seen, info_path)


def _kernel_part(p: str, df: pd.DataFrame, agents: _Agents) -> tuple[dict[str, Any], str]:
    """(one kernel_trace file's part, the field its streams came from): ``Stream_Id`` when the
    file has one that is ever set, else ``Queue_Id``."""
    start, end = _ints(df, "start_timestamp", p, True), _ints(df, "end_timestamp", p, True)
    stream = _ints(df, "stream_id", p)
    field = "stream_id" if "stream_id" in df and (stream > 0).any() else "queue_id"
    wg = [_ints(df, f"workgroup_size_{a}", p) for a in "xyz"]
    grid = [grid_blocks(_ints(df, f"grid_size_{a}", p), w) for a, w in zip("xyz", wg)]
    return part("kernel", df["kernel_name"].astype(str).to_numpy(), start, end,
                on_gpu=True, device=agents.map(df["agent_id"]),
                stream=stream if field == "stream_id" else _ints(df, "queue_id", p),
                correlation=_ints(df, "correlation_id", p),
                grid_x=grid[0], grid_y=grid[1], grid_z=grid[2],
                block_x=wg[0], block_y=wg[1], block_z=wg[2],
                graph_id=_ints(df, "graph_exec_id", p), graph_node_id=_ints(df, "graph_node_id", p)), field


def _memcpy_part(p: str, df: pd.DataFrame, agents: _Agents) -> dict[str, Any]:
    """One memory_copy_trace file's part, each copy on the device at its GPU end."""
    start, end = _ints(df, "start_timestamp", p, True), _ints(df, "end_timestamp", p, True)
    direction = df["direction"].astype(str)
    src_side, dst_side = _device_side(direction)
    dev = np.full(len(df), -1, np.int64)
    if "source_agent_id" in df:
        dev = np.where(src_side, agents.map(df["source_agent_id"]), dev)
    if "destination_agent_id" in df:
        dev = np.where(dst_side, agents.map(df["destination_agent_id"]), dev)
    return part("memcpy", direction.map(memcpy_name).to_numpy(), start, end, on_gpu=True,
                device=dev, stream=_ints(df, "stream_id", p),
                correlation=_ints(df, "correlation_id", p),
                copy_dir=direction.map(copy_dir_of).to_numpy().astype(object))


def _api_part(p: str, df: pd.DataFrame, warnings: list[str], pids: set[int]) -> dict[str, Any]:
    """One API trace file's part: HIP calls as runtime rows, markers as annotations; rows of
    other domains are skipped with a warning. The file's process ids are added to ``pids``."""
    dom = df["domain"].astype(str).str.strip().str.upper()
    marker, hip = dom.str.startswith("MARKER").to_numpy(), dom.str.startswith("HIP").to_numpy()
    keep = marker | hip
    if (~keep).any():
        skipped = Counter(dom[~keep])
        warnings.append(f"{os.path.basename(p)}: skipped {int((~keep).sum())} rows of domains "
                        + ", ".join(sorted(skipped)))
    df = df[keep]
    kind = np.where(marker[keep], "annotation", "runtime").astype(object)
    pids |= set(_ints(df, "process_id", p).tolist()) - {-1}
    return part(kind, df["function"].astype(str).to_numpy(), _ints(df, "start_timestamp", p, True),
                _ints(df, "end_timestamp", p, True), stream=_ints(df, "thread_id", p),
                correlation=_ints(df, "correlation_id", p))


def _metadata(paths: list[str], pids: set[int], stream_fields: set[str]) -> dict[str, Any]:
    """The group's files and folder, its pid (from the ``<pid>_`` prefix, else the one process
    of the API rows), a prefix that is not a pid, and the stream fields used."""
    prefix = FILE_RE.match(os.path.basename(paths[0]))
    pre = prefix["prefix"].rstrip("_") if prefix else ""
    metadata: dict[str, Any] = {"files": [os.path.basename(p) for p in paths],
                                "directory": os.path.dirname(os.path.abspath(paths[0]))}
    if pre.isdigit():
        metadata["pid"] = int(pre)
    elif len(pids) == 1:
        metadata["pid"] = next(iter(pids))
    if pre and not pre.isdigit():
        metadata["prefix"] = pre
    if stream_fields:
        metadata["stream_field"] = "/".join(sorted(stream_fields))
    return metadata
