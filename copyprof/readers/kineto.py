"""PyTorch profiler / Kineto Chrome-trace JSON reader (CUPTI, roctracer, rocprofiler-sdk, legacy).

Layout facts (../shared/docs/trace-formats.md §1, verified against pytorch/kineto
``libkineto/src/output_json.cpp``): ``ts``/``dur`` are float microseconds; GPU ops carry
``args.device``/``args.stream``/``args.correlation``; memcpy/memset carry ``args.bytes``;
CUPTI kernels carry ``grid``/``block`` in blocks/threads and (2026 kineto) ``graph id`` /
``graph node id``; ROCm runtime rows are ``cat: cuda_runtime``; legacy (2020-21) files use a
bare list, capitalised categories and ``"external id"``; ``pid`` may be a string.

Speed: events are decoded by msgspec into Structs that declare only the fields we use (other
keys are skipped without allocation), chunk by chunk (see json_stream), and appended to
per-column lists. Events of other categories (python_function, flows, counters) are counted
and dropped without building anything else; cpu_ops are kept only when they are copy ops.
"""
from __future__ import annotations

import os
import re
from typing import Any

import msgspec

from copyprof.errors import CopyprofError
import numpy as np
import pandas as pd

from copyprof.events import KINDS, Trace, TraceMeta, make_table
from copyprof.readers.json_stream import MalformedChunk, NotStreamable, StreamState, stream_event_chunks
from copyprof.readers.kineto_columns import CategoryMap, ChunkResult, columnize
from copyprof.readers.source import BlockStream, open_binary

_RANK_IN_NAME = re.compile(r"(?:^|[_.\-])rank[_\-]?(\d+)(?:[_.\-]|$)")


# Concrete field types let msgspec decode ~3x faster than `Any`; unions cover the spellings
# seen in real files (roctracer writes runtime args as strings: "bytes": "9216", "kind": "1").
# An event that fits none of them sends its chunk down the generic path in _decode_chunk.
_IntLike = int | float | str | None


class _Args(msgspec.Struct):
    device: _IntLike = None
    stream: _IntLike = None
    correlation: _IntLike = None
    external_id: _IntLike = msgspec.field(default=None, name="External id")
    external_id_legacy: _IntLike = msgspec.field(default=None, name="external id")
    bytes: _IntLike = None
    size: _IntLike = None  # ROCm 6.2 runtime copy rows carry `size` instead of `bytes`
    kind: _IntLike = None
    grid: list[int] | None = None
    block: list[int] | None = None
    graph_id: _IntLike = msgspec.field(default=None, name="graph id")
    graph_node_id: _IntLike = msgspec.field(default=None, name="graph node id")
    from_device: _IntLike = msgspec.field(default=None, name="fromDevice")  # CUPTI PtoP has no `device`


class _Event(msgspec.Struct):
    ph: str | None = None
    cat: str | None = None
    name: str | int | float | None = None
    pid: _IntLike = None
    tid: _IntLike = None
    ts: float | str | None = None
    dur: float | str | None = None
    args: _Args | None = None


_EMPTY_ARGS = _Args()
_FAST = msgspec.json.Decoder(list[_Event])
_GENERIC = msgspec.json.Decoder()


def _decode_chunk(data: bytes) -> list[_Event]:
    try:
        return _FAST.decode(data)
    except msgspec.ValidationError:
        # Some event has a field of an unexpected shape (args not an object, ...). Decode
        # generically and keep the events that fit; the rest are skipped.
        items = _GENERIC.decode(data)
        out: list[_Event] = []
        for item in items:
            try:
                out.append(msgspec.convert(item, _Event))
            except (msgspec.ValidationError, TypeError):
                continue
        return out


class _Accumulator:
    """Merges per-chunk columns; names are re-coded against one global list."""

    def __init__(self) -> None:
        self.catmap = CategoryMap()
        self.names: dict[str, int] = {}
        self.parts: list[ChunkResult] = []
        self.counts = np.zeros(len(KINDS), dtype=np.int64)
        self.other = self.bad = self.graph_launches = 0
        self.rows = 0

    def take(self, events: list[_Event]) -> None:
        res = columnize(events, self.catmap, _EMPTY_ARGS)
        remap = np.array([self.names.setdefault(n, len(self.names)) for n in res.names], dtype=np.int32)
        res.name_codes = remap[res.name_codes] if len(remap) else res.name_codes
        self.parts.append(res)
        self.counts += res.counts
        self.other += res.other
        self.bad += res.bad
        self.graph_launches += res.graph_launches
        self.rows += len(res.name_codes)

    def kind_counts(self) -> dict[str, int]:
        return {k: int(c) for k, c in zip(KINDS, self.counts)}

    def build(self, rank: int) -> pd.DataFrame:
        names = list(self.names)
        parts = self.parts
        cols: dict[str, Any] = {}
        keys = [k for k in (parts[0].cols if parts else {}) if k not in ("copy_kind_arg", "memcpy_rows")]
        for key in keys:
            cols[key] = np.concatenate([p.cols[key] for p in parts])
        codes = np.concatenate([p.name_codes for p in parts]) if parts else np.zeros(0, np.int32)
        n = len(codes)
        kinds = np.array(KINDS, dtype=object)
        cols["kind"] = kinds[cols.pop("kind_idx")] if n else []
        cols["rank"] = np.full(n, rank, dtype=np.int32)
        cols["bytes_src"] = np.where(cols["bytes"] >= 0, "event", "none") if n else []
        cols["copy_dir"] = self._copy_dirs(parts, names, n)
        return make_table(codes, names, cols)

    def _copy_dirs(self, parts: list[ChunkResult], names: list[str], n: int) -> np.ndarray:
        by_name = np.array([_dir_from_name(nm) for nm in names] or [""], dtype=object)
        out = np.full(n, "", dtype=object)
        offset = 0
        for p in parts:
            rows = p.cols["memcpy_rows"]
            if len(rows):
                d = by_name[p.name_codes[rows]]
                arg = p.cols["copy_kind_arg"]
                d = np.where(d == "", arg, d)
                out[offset + rows] = d
            offset += len(p.name_codes)
        return out


def _dir_from_name(name: str) -> str:
    parts = name.split()
    return parts[1] if len(parts) > 1 and parts[0].lower() == "memcpy" else ""


def read_kineto(path: str) -> list[Trace]:
    """Read one Kineto Chrome-trace file (plain or gzip) into a Trace."""
    stream = BlockStream(path)
    state = StreamState()
    cols = _Accumulator()
    partial: str | None = None
    try:
        for events in stream_event_chunks(stream, _decode_chunk, state):
            cols.take(events)
    except NotStreamable:
        header, events = _decode_whole(path)
        state.header = header
        cols.take(events)
    except MalformedChunk as exc:
        partial = f"invalid JSON after byte {exc.offset:,} ({exc.reason}); kept {cols.rows:,} events before it"
    if stream.truncated:
        partial = f"{stream.describe_partial()}; kept {cols.rows:,} whole events"
    elif state.truncated and partial is None:
        partial = f"{state.truncated}; kept {cols.rows:,} whole events"
    if partial and cols.rows == 0 and cols.counts.sum() == 0:
        raise CopyprofError(f"no events could be read ({partial})", path=path)
    header = {**state.header, **state.tail}
    meta = _meta(path, header, cols)
    meta.partial = partial
    return [Trace(meta=meta, events=cols.build(meta.ranks[0]))]


def _decode_whole(path: str) -> tuple[dict[str, Any], list[_Event]]:
    """Small or unusual documents (traceEvents as a dict keyed "pid,tid"): decode at once."""
    with open_binary(path) as fh:
        try:
            data = fh.read()
        except (EOFError, OSError) as exc:
            raise CopyprofError(f"compressed stream is damaged ({exc})", path=path) from exc
    try:
        doc = _GENERIC.decode(data)
    except msgspec.DecodeError as exc:
        raise CopyprofError(f"not valid JSON ({exc})", path=path) from exc
    if isinstance(doc, list):
        raw, header = doc, {}
    elif isinstance(doc, dict) and "traceEvents" in doc:
        raw = doc.pop("traceEvents")
        header = doc
        if isinstance(raw, dict):  # {"pid,tid": [events]} (third-party writers)
            raw = [e for group in raw.values() if isinstance(group, list) for e in group]
    else:
        raise CopyprofError("JSON has no traceEvents: not a Chrome trace", path=path)
    events = []
    for item in raw if isinstance(raw, list) else []:
        try:
            events.append(msgspec.convert(item, _Event))
        except (msgspec.ValidationError, TypeError):
            continue
    return header, events


def _flavour(header: dict[str, Any], has_gpu: bool) -> str:
    if "rocprofiler-sdk_version" in header:
        return "rocprofiler-sdk"
    if "roctracer_version" in header or "hip_runtime_version" in header:
        return "roctracer"
    if "cupti_version" in header or "cuda_runtime_version" in header:
        return "cupti"
    props = header.get("deviceProperties") or []
    if any(isinstance(p, dict) and p.get("warpSize") == 64 for p in props):
        return "roctracer"  # ROCm traces before version keys (HTA MI250 ROCm 6.2 sample)
    if not has_gpu:
        return "cpu"
    return "cupti"


def _meta(path: str, header: dict[str, Any], cols: _Accumulator) -> TraceMeta:
    counts = cols.kind_counts()
    has_gpu = any(counts[k] for k in ("kernel", "memcpy", "memset"))
    flavour = _flavour(header, has_gpu)
    if flavour != "cpu" and not has_gpu:
        flavour = f"{flavour} (no GPU events)"
    meta = TraceMeta(path=path, format="kineto", flavour=flavour)
    dist = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
    rank = dist.get("rank") if isinstance(dist.get("rank"), int) else None
    if rank is None:
        m = _RANK_IN_NAME.search(os.path.basename(path))
        rank = int(m.group(1)) if m else 0
    meta.ranks = [rank]
    for p in header.get("deviceProperties") or []:
        if isinstance(p, dict):
            meta.devices.append(_device(p))
    keep = {k: v for k, v in header.items() if k not in ("deviceProperties", "traceEvents") and not isinstance(v, (list, dict))}
    if dist:
        keep["distributedInfo"] = {k: dist.get(k) for k in ("backend", "rank", "world_size", "nccl_version") if k in dist}
    meta.metadata = keep
    meta.kind_counts = counts
    meta.graph_launches = cols.graph_launches
    if cols.bad:
        meta.warnings.append(f"{cols.bad} events had unreadable timestamps and were skipped")
    return meta


def _device(p: dict[str, Any]) -> dict[str, Any]:
    major, minor = p.get("computeMajor"), p.get("computeMinor")
    amd = p.get("warpSize") == 64
    return {
        "id": p.get("id"),
        "name": p.get("name") or "",
        "arch": (f"gfx{major}{minor}x" if amd else f"sm_{major}{minor}") if major is not None else "",
        "cus" if amd else "sms": p.get("numSms"),
        "memory_bytes": p.get("totalGlobalMem"),
    }
