"""rocprofv3 ``--output-format json`` (``<pid>_results.json``) -> one Trace per process.

Layout (trace-formats.md §2.3): ``{"rocprofiler-sdk-tool": [ {metadata, agents, strings,
kernel_symbols, buffer_records, ...}, ... ]}``, one element per profiled process.

Why typed msgspec Structs: the file is tens of MB, most of it agent topology, PC-sampling
strings and thousands of kernel symbols we do not need. Structs that declare only the
fields used make msgspec skip everything else without allocating it, and ``gc=False``
keeps a million dispatch records from being traversed by the garbage collector.

Why resolve enums through ``strings.buffer_records``: the numeric ``kind``/``operation``
values are rocprofiler-sdk enum positions that change between releases (908 sample:
MEMORY_COPY=10, KERNEL_DISPATCH=11); the file carries its own name table, so use it.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, Any, Union

import msgspec
import numpy as np

from copyprof.errors import CopyprofError
from copyprof.events import Trace, TraceMeta
from copyprof.readers.files import DECOMPRESS_ERRORS, open_binary
from copyprof.readers.rocprof_parts import assemble, copy_dir_of, finish_meta, grid_blocks, memcpy_name, part

# rocprofiler-sdk writes some ids as uint64; one beyond int64 cannot go into the event table, so it
# is a validation error (a one-line "not a rocprofv3 results JSON" error), not an OverflowError later.
I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _S(msgspec.Struct, gc=False):
    """Base: no GC tracking (records hold no cycles)."""


class Handle(msgspec.Struct, frozen=True, gc=False):  # frozen: usable as a default
    handle: I64 = 0


class Dim3(msgspec.Struct, frozen=True, gc=False):  # frozen: usable as a default
    x: I64 = -1
    y: I64 = -1
    z: I64 = -1


class Corr(msgspec.Struct, frozen=True, gc=False):  # frozen: usable as a default
    internal: I64 = -1
    external: I64 = 0


class DispatchInfo(msgspec.Struct, frozen=True, gc=False):  # frozen: usable as a default
    agent_id: Handle = Handle()
    queue_id: Handle = Handle()
    kernel_id: I64 = -1
    workgroup_size: Dim3 = Dim3()
    grid_size: Dim3 = Dim3()


class KernelDispatch(_S):
    kind: I64
    start_timestamp: I64
    end_timestamp: I64
    dispatch_info: DispatchInfo
    operation: I64 = -1
    thread_id: I64 = -1
    correlation_id: Corr = Corr()
    stream_id: Union[Handle, None] = None


class MemoryCopy(_S):
    kind: I64
    start_timestamp: I64
    end_timestamp: I64
    operation: I64 = -1
    thread_id: I64 = -1
    correlation_id: Corr = Corr()
    src_agent_id: Handle = Handle(-1)
    dst_agent_id: Handle = Handle(-1)
    bytes: I64 = -1
    stream_id: Union[Handle, None] = None


class ApiRecord(_S):
    kind: I64
    start_timestamp: I64
    end_timestamp: I64
    operation: I64 = -1
    thread_id: I64 = -1
    correlation_id: Corr = Corr()


class BufferRecords(_S):
    kernel_dispatch: list[KernelDispatch] = []
    memory_copy: list[MemoryCopy] = []
    hip_api: list[ApiRecord] = []
    marker_api: list[ApiRecord] = []


class NameInfo(_S):
    kind: str = ""
    operations: list[str] = []


class MarkerMessage(_S):
    key: I64
    value: str = ""


class Strings(_S):
    buffer_records: list[NameInfo] = []
    # cereal writes a std::unordered_map<uint64, string> as [{"key":..,"value":..}]
    marker_api: Union[list[MarkerMessage], dict[str, str]] = []


class KernelSymbol(_S):
    kernel_id: I64
    kernel_name: str = ""
    formatted_kernel_name: str = ""


class Agent(_S):
    id: Handle
    type: I64 = 0
    name: str = ""
    product_name: str = ""
    cu_count: I64 = 0
    node_id: I64 = -1


class Node(_S):
    hostname: str = ""
    machine_id: str = ""
    system_name: str = ""
    release: str = ""


class Metadata(_S):
    pid: I64 = -1
    init_time: I64 = -1
    fini_time: I64 = -1
    command: list[str] = []
    node: Union[Node, None] = None


class Process(_S):
    metadata: Metadata = msgspec.field(default_factory=Metadata)
    agents: list[Agent] = []
    strings: Strings = msgspec.field(default_factory=Strings)
    kernel_symbols: list[KernelSymbol] = []
    buffer_records: BufferRecords = msgspec.field(default_factory=BufferRecords)


class Root(_S):
    processes: list[Process] = msgspec.field(name="rocprofiler-sdk-tool")


_DECODER = msgspec.json.Decoder(Root)


def read_rocprofv3_json(path: str) -> list[Trace]:
    """Read ``<pid>_results.json[.gz]``: one Trace per element of ``rocprofiler-sdk-tool``."""
    try:
        with open_binary(path) as fh:
            data = fh.read()
    except DECOMPRESS_ERRORS as exc:
        raise CopyprofError(f"compressed stream ends early or is corrupt ({type(exc).__name__})",
                            path=path) from exc
    if not data.strip():
        raise CopyprofError("file is empty", path=path)
    try:
        root = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise CopyprofError(f"not a rocprofv3 results JSON: {exc}", path=path) from exc
    except msgspec.DecodeError as exc:
        raise CopyprofError(f"invalid or truncated JSON ({exc}) in {len(data):,} bytes",
                            path=path) from exc
    del data
    if not root.processes:
        raise CopyprofError("rocprofiler-sdk-tool holds no process", path=path)
    return [_process(path, proc) for proc in root.processes]


def _process(path: str, proc: Process) -> Trace:
    """One element of ``rocprofiler-sdk-tool`` -> its Trace."""
    names = proc.strings.buffer_records
    warnings: list[str] = []
    if not names:
        warnings.append("no strings.buffer_records table: record kinds were not checked")
    kind_name, op_name = _name_lookups(names)
    device_of, devices = _gpu_devices(proc.agents)
    br = proc.buffer_records
    parts: list[dict[str, Any]] = []
    kd, skipped_kd = _of_kind(br.kernel_dispatch, "KERNEL_DISPATCH", kind_name if names else None)
    mc, skipped_mc = _of_kind(br.memory_copy, "MEMORY_COPY", kind_name if names else None)
    use_stream = any(r.stream_id is not None and r.stream_id.handle for r in kd)
    if kd:
        parts.append(_kernel_part(kd, proc.kernel_symbols, device_of, use_stream, warnings))
    if mc:
        parts.append(_memcpy_part(mc, op_name, device_of))
    if br.hip_api:
        parts.append(_hip_part(br.hip_api, op_name))
    if br.marker_api:
        parts.append(_marker_part(br.marker_api, proc.strings.marker_api, op_name))
    if skipped_kd + skipped_mc:
        warnings.append(f"skipped {skipped_kd + skipped_mc} buffer records whose kind did not match their list")
    meta = TraceMeta(path=path, format="rocprofv3-json", flavour="rocprofiler-sdk", ranks=[0],
                     devices=devices, metadata=_metadata(proc.metadata, use_stream), warnings=warnings)
    if not parts:
        meta.warnings.append(f"process {proc.metadata.pid} in {os.path.basename(path)} has no trace records")
    return finish_meta(meta, assemble(parts), parts)


def _name_lookups(names: list[NameInfo]) -> tuple[Callable[[int], str | None], Callable[[int, int], str]]:
    """(kind name of a record's ``kind``, operation name of its ``kind`` and ``operation``) from
    the file's own ``strings.buffer_records`` table; closures, as they run once per record."""

    def kind_name(k: int) -> str | None:
        return names[k].kind if 0 <= k < len(names) else None

    def op_name(k: int, op: int) -> str:
        ops = names[k].operations if 0 <= k < len(names) else []
        return ops[op] if 0 <= op < len(ops) else ""

    return kind_name, op_name


def _gpu_devices(agents: list[Agent]) -> tuple[dict[int, int], list[dict[str, Any]]]:
    """(agent handle -> device ordinal, the devices' descriptions) of the GPU agents (type 2)."""
    gpu_agents = [a for a in agents if a.type == 2]
    device_of = {a.id.handle: i for i, a in enumerate(gpu_agents)}
    devices = [{"index": i, "name": a.product_name or a.name or None, "arch": a.name or None,
                "cus": a.cu_count or None, "product_name": a.product_name or None,
                "node_id": a.node_id, "agent": a.id.handle} for i, a in enumerate(gpu_agents)]
    return device_of, devices


def _of_kind(records: list[Any], kind: str, kind_name: Callable[[int], str | None] | None) -> tuple[list[Any], int]:
    """(the records whose kind is ``kind``, how many others were dropped); all of them when the
    file has no name table to check against (``kind_name`` None)."""
    if kind_name is None:
        return records, 0
    keep = [r for r in records if kind_name(r.kind) == kind]
    return keep, len(records) - len(keep)


def _kernel_part(kd: list[KernelDispatch], symbols: list[KernelSymbol], device_of: dict[int, int],
                 use_stream: bool, warnings: list[str]) -> dict[str, Any]:
    """The kernel dispatches' part, named by their kernel symbols; the stream is the HIP stream
    when the file has one (``use_stream``), else the queue."""
    # formatted = demangled with ".kd" stripped (rocprofv3's default display name)
    sym = {s.kernel_id: s.formatted_kernel_name or s.kernel_name.removesuffix(".kd") for s in symbols}
    unknown = {r.dispatch_info.kernel_id for r in kd} - sym.keys()
    if unknown:
        warnings.append(f"{len(unknown)} kernel ids have no kernel_symbols entry")
    di = [r.dispatch_info for r in kd]
    wg = [np.fromiter((getattr(d.workgroup_size, a) for d in di), np.int64, len(di)) for a in "xyz"]
    grid = [grid_blocks(np.fromiter((getattr(d.grid_size, a) for d in di), np.int64, len(di)), w)
            for a, w in zip("xyz", wg)]
    stream = ([r.stream_id.handle if r.stream_id is not None else -1 for r in kd] if use_stream
              else [d.queue_id.handle for d in di])
    return part(
        "kernel", [sym.get(d.kernel_id, f"kernel_id {d.kernel_id}") for d in di],
        _col(kd, "start_timestamp"), _col(kd, "end_timestamp"), on_gpu=True,
        device=np.array([device_of.get(d.agent_id.handle, -1) for d in di], np.int64),
        stream=np.array(stream, np.int64), correlation=_corr(kd), external_id=_ext(kd),
        grid_x=grid[0], grid_y=grid[1], grid_z=grid[2], block_x=wg[0], block_y=wg[1], block_z=wg[2])


def _memcpy_part(mc: list[MemoryCopy], op_name: Callable[[int, int], str], device_of: dict[int, int]) -> dict[str, Any]:
    """The memory copies' part; a copy's device is the GPU end (dst for HtoD, src for DtoH/DtoD)."""
    direction = [op_name(r.kind, r.operation) for r in mc]
    dirs = [copy_dir_of(d) for d in direction]
    dev = [device_of.get(r.dst_agent_id.handle if d == "HtoD" else r.src_agent_id.handle, -1)
           if d in ("HtoD", "DtoH", "DtoD") else -1 for r, d in zip(mc, dirs)]
    return part(
        "memcpy", [memcpy_name(d) for d in direction], _col(mc, "start_timestamp"),
        _col(mc, "end_timestamp"), on_gpu=True, device=np.array(dev, np.int64),
        stream=np.array([r.stream_id.handle if r.stream_id is not None else -1 for r in mc], np.int64),
        correlation=_corr(mc), external_id=_ext(mc), bytes=_col(mc, "bytes"),
        copy_dir=np.array(dirs, dtype=object))


def _hip_part(hip: list[ApiRecord], op_name: Callable[[int, int], str]) -> dict[str, Any]:
    """The HIP API calls' part (runtime rows on their thread)."""
    return part("runtime", [op_name(r.kind, r.operation) or f"hip_api {r.operation}" for r in hip],
                _col(hip, "start_timestamp"), _col(hip, "end_timestamp"),
                stream=_col(hip, "thread_id"), correlation=_corr(hip), external_id=_ext(hip))


def _marker_part(mk: list[ApiRecord], msgs: Union[list[MarkerMessage], dict[str, str]],
                 op_name: Callable[[int, int], str]) -> dict[str, Any]:
    """The marker (roctx) ranges' part, each named by its message, else by its operation."""
    text = ({int(k): v for k, v in msgs.items() if k.strip().lstrip("-").isdigit()} if isinstance(msgs, dict)
            else {m.key: m.value for m in msgs})
    return part("annotation", [text.get(r.correlation_id.internal) or op_name(r.kind, r.operation) for r in mk],
                _col(mk, "start_timestamp"), _col(mk, "end_timestamp"),
                stream=_col(mk, "thread_id"), correlation=_corr(mk), external_id=_ext(mk))


def _metadata(md: Metadata, use_stream: bool) -> dict[str, Any]:
    """The process's metadata with unset values left out, and which field the streams came from."""
    metadata: dict[str, Any] = {"pid": md.pid, "command": " ".join(md.command) or None,
                                "init_time_ns": md.init_time, "fini_time_ns": md.fini_time}
    if md.node is not None:
        metadata.update(hostname=md.node.hostname, machine_id=md.node.machine_id,
                        os=f"{md.node.system_name} {md.node.release}".strip())
    metadata = {k: v for k, v in metadata.items() if v not in (None, "", -1)}
    metadata["stream_field"] = "stream_id" if use_stream else "queue_id"
    return metadata


def _col(records: list[Any], field: str) -> np.ndarray:
    return np.fromiter((getattr(r, field) for r in records), np.int64, len(records))


def _corr(records: list[Any]) -> np.ndarray:
    return np.fromiter((r.correlation_id.internal for r in records), np.int64, len(records))


def _ext(records: list[Any]) -> np.ndarray:
    """External correlation ids (0 means none was pushed) -> -1 when absent."""
    ext = np.fromiter((r.correlation_id.external for r in records), np.int64, len(records))
    return np.where(ext > 0, ext, -1)
