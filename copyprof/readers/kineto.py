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
from copyprof.events import EventTableBuilder, Trace, TraceMeta
from copyprof.readers.json_stream import MalformedChunk, NotStreamable, StreamState, stream_event_chunks
from copyprof.readers.source import BlockStream, open_binary
from copyprof.taxonomy.copies import HOST_COPY_OPS, is_graph_launch

# Category -> (kind, on_gpu). Lower-cased lookups; ActivityType.h list + legacy spellings
# (tb_plugin samples 2020-21: Kernel, Memcpy, Memset, Runtime, Operator).
_CATEGORIES: dict[str, tuple[str, bool]] = {
    "kernel": ("kernel", True),
    "gpu_memcpy": ("memcpy", True),
    "memcpy": ("memcpy", True),
    "gpu_memset": ("memset", True),
    "memset": ("memset", True),
    "cuda_runtime": ("runtime", False),
    "cuda_driver": ("runtime", False),
    "runtime": ("runtime", False),
    "hip_runtime": ("runtime", False),
    "xpu_runtime": ("runtime", False),
    "privateuse1_runtime": ("runtime", False),
    "user_annotation": ("annotation", False),
    "gpu_user_annotation": ("annotation", True),
    "cpu_op": ("cpu_op", False),
    "operator": ("cpu_op", False),
}
_RANK_IN_NAME = re.compile(r"(?:^|[_.\-])rank[_\-]?(\d+)(?:[_.\-]|$)")
_STREAM_IN_TID = re.compile(r"(\d+)")


class _Args(msgspec.Struct):
    device: Any = None
    stream: Any = None
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_legacy: Any = msgspec.field(default=None, name="external id")
    bytes: Any = None
    size: Any = None  # ROCm 6.2 runtime copy rows carry `size` instead of `bytes`
    kind: Any = None
    grid: Any = None
    block: Any = None
    graph_id: Any = msgspec.field(default=None, name="graph id")
    graph_node_id: Any = msgspec.field(default=None, name="graph node id")
    from_device: Any = msgspec.field(default=None, name="fromDevice")  # CUPTI PtoP has no `device`


class _Event(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: _Args | None = None


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


def _as_int(v: Any, default: int = -1) -> int:
    if type(v) is int:
        return v
    if v is None:
        return default
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return default


def _dim3(v: Any) -> tuple[int, int, int]:
    if isinstance(v, list) and len(v) == 3:
        return (_as_int(v[0]), _as_int(v[1]), _as_int(v[2]))
    return (-1, -1, -1)


class _Columns:
    """Per-chunk event sink: category filter, name interning, column lists."""

    def __init__(self, builder: EventTableBuilder) -> None:
        self.b = builder
        self.cat_cache: dict[Any, tuple[str, bool] | None] = {}
        self.dir_cache: dict[str, str] = {}
        self.counts = {k: 0 for k in ("kernel", "memcpy", "memset", "runtime", "annotation", "cpu_op")}
        self.other = 0
        self.bad = 0
        self.graph_launches = 0

    def _category(self, cat: Any) -> tuple[str, bool] | None:
        hit = self.cat_cache.get(cat, False)
        if hit is False:
            hit = _CATEGORIES.get(cat.lower()) if isinstance(cat, str) else None
            self.cat_cache[cat] = hit
        return hit

    def _copy_dir(self, name: str, args: _Args | None) -> str:
        d = self.dir_cache.get(name)
        if d is None:
            parts = name.split()
            d = parts[1] if len(parts) > 1 and parts[0].lower() == "memcpy" else ""
            self.dir_cache[name] = d
        if not d and args is not None and isinstance(args.kind, str) and args.kind.endswith(("toD", "toH", "toP")):
            return args.kind
        return d

    def take(self, events: list[_Event]) -> None:
        add = self.b.add
        counts = self.counts
        for e in events:
            ph = e.ph
            if ph != "X" and ph is not None:
                continue
            kc = self._category(e.cat)
            if kc is None:
                self.other += 1
                continue
            kind, on_gpu = kc
            name = e.name if isinstance(e.name, str) else str(e.name or "")
            counts[kind] += 1
            if kind == "cpu_op" and name not in HOST_COPY_OPS:
                continue
            ts, dur = e.ts, e.dur
            try:
                start = round((ts if type(ts) is float or type(ts) is int else float(ts)) * 1000)
                d = round((dur if type(dur) is float or type(dur) is int else float(dur or 0)) * 1000)
            except (TypeError, ValueError, OverflowError):
                self.bad += 1
                continue
            if d < 0 or d != d:
                d = 0
            a = e.args
            if kind == "runtime" and is_graph_launch(name):
                self.graph_launches += 1
            if a is None:
                tid = e.tid
                add(kind, name, start, d, on_gpu=on_gpu,
                    device=(e.pid if on_gpu and type(e.pid) is int else -1),
                    stream=tid if type(tid) is int else _tid_int(tid))
                continue
            if on_gpu:
                dev = a.device if type(a.device) is int else _as_int(a.from_device, e.pid if type(e.pid) is int else -1)
                stream = a.stream if type(a.stream) is int else _as_int(a.stream, _tid_int(e.tid))
            else:
                dev = -1
                stream = e.tid if type(e.tid) is int else _tid_int(e.tid)
            nbytes = _as_int(a.bytes if a.bytes is not None else a.size)
            ext = a.external_id if a.external_id is not None else a.external_id_legacy
            add(
                kind, name, start, d, on_gpu=on_gpu, device=dev, stream=stream,
                correlation=_as_int(a.correlation), external_id=_as_int(ext),
                bytes_=nbytes, bytes_src="event",
                grid=_dim3(a.grid) if a.grid is not None else (-1, -1, -1),
                block=_dim3(a.block) if a.block is not None else (-1, -1, -1),
                graph_id=_as_int(a.graph_id), graph_node_id=_as_int(a.graph_node_id),
                copy_dir=self._copy_dir(name, a) if kind == "memcpy" else "",
            )


def _tid_int(tid: Any) -> int:
    if type(tid) is int:
        return tid
    if isinstance(tid, str):
        m = _STREAM_IN_TID.search(tid)
        if m:
            return int(m.group(1))
    return -1


def read_kineto(path: str) -> list[Trace]:
    """Read one Kineto Chrome-trace file (plain or gzip) into a Trace."""
    stream = BlockStream(path)
    state = StreamState()
    builder = EventTableBuilder()
    cols = _Columns(builder)
    partial: str | None = None
    try:
        for events in stream_event_chunks(stream, _decode_chunk, state):
            cols.take(events)
    except NotStreamable:
        header, events = _decode_whole(path)
        state.header = header
        cols.take(events)
    except MalformedChunk as exc:
        partial = f"invalid JSON after byte {exc.offset:,} ({exc.reason}); kept {len(builder):,} events before it"
    if stream.truncated:
        partial = f"{stream.describe_partial()}; kept {len(builder):,} whole events"
    elif state.truncated and partial is None:
        partial = f"{state.truncated}; kept {len(builder):,} whole events"
    if partial and len(builder) == 0 and sum(cols.counts.values()) == 0:
        raise CopyprofError(f"no events could be read ({partial})", path=path)
    header = {**state.header, **state.tail}
    meta = _meta(path, header, cols)
    meta.partial = partial
    rank = meta.ranks[0]
    builder.rank = rank
    table = builder.build()
    if rank:
        table["rank"] = rank
    return [Trace(meta=meta, events=table)]


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


def _meta(path: str, header: dict[str, Any], cols: _Columns) -> TraceMeta:
    has_gpu = any(cols.counts[k] for k in ("kernel", "memcpy", "memset"))
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
    meta.kind_counts = dict(cols.counts)
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
