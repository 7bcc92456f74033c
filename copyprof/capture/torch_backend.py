"""Which profiler back end a ROCm torch build's kineto links, and which HIP / roctracer it vendors.

Why: the back end decides what a torch-profiler trace of HIP-graph replay can be trusted for —
roctracer builds of HIP 7.2 can lose graph kernels (ROCm/ROCm#6102), rocprofiler-sdk builds
inflate every ``hipGraphLaunch`` (ROCm/ATOM#432) — and torch wheels vendor their own HIP and
roctracer under ``torch/lib`` with RPATH ``$ORIGIN``, so the system's /opt/rocm says nothing
(sgl-project/sglang#35390). PyTorch links kineto into ``libtorch_cpu.so``; kineto's ROCm
back end links ``libroctracer64.so`` (kineto before 2026-03, roctracer code read at kineto
094d3c1d) or ``librocprofiler-sdk.so`` (kineto 114171df ``libkineto/CMakeLists.txt``:
``find_library(ROCPROF_LIBRARY NAMES librocprofiler-sdk.so)``; ROCm >= 7.0 only). ATOM#432's
guard reads the same thing with ``ldd libtorch_cpu.so``.

How, without running anything: the ``DT_NEEDED`` entries of the ``libtorch*`` libraries in
``torch/lib``, read from their ELF dynamic section (no ``ldd``, which would run the loader), then
the vendored files' names for versions (``libamdhip64.so.7.2.53211-…``: HIP 7.2.53211;
``libroctracer64.so.4.1.70202``: roctracer 4.1 of ROCm 7.2.2 — the ROCm number in the last
component is inferred from AMD's library names, e.g. the AMD-AGI/Hyperloom#352 hot-fix image).
"""
from __future__ import annotations

import os
import re
import struct
from dataclasses import asdict, dataclass, field
from typing import Any

from copyprof.taxonomy.rocm_defects import applicable

LIBTORCH = ("libtorch_cpu.so", "libtorch_hip.so", "libtorch.so", "libkineto.so")
BACKENDS = (("libroctracer64", "roctracer"), ("librocprofiler-sdk", "rocprofiler-sdk"), ("libcupti", "cupti"))
_SHT_DYNAMIC, _DT_NEEDED, _DT_RPATH, _DT_RUNPATH = 6, 1, 15, 29
_VERSIONED = re.compile(r"^(lib[\w+-]+?)\.so\.(\d+(?:\.\d+)*)(?:-([0-9a-f]+))?$")


@dataclass
class ElfDeps:
    needed: list[str] = field(default_factory=list)
    rpath: str = ""  # DT_RUNPATH, else DT_RPATH


def elf_deps(path: str) -> ElfDeps | None:
    """DT_NEEDED and the run path of a little-endian ELF64 shared object (None: not one, or unreadable)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            shoff, = struct.unpack_from("<Q", head, 0x28)
            shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
            if not shoff or shentsize < 64 or not 0 < shnum < 1 << 16:
                return None
            fh.seek(shoff)
            table = fh.read(shentsize * shnum)
            sections = [struct.unpack_from("<IIQQQQII", table, i * shentsize) for i in range(len(table) // shentsize)]
            dynamic = next((s for s in sections if s[1] == _SHT_DYNAMIC), None)
            if dynamic is None or dynamic[6] >= len(sections):
                return None
            strtab = sections[dynamic[6]]
            fh.seek(dynamic[4])
            entries = fh.read(min(dynamic[5], 1 << 20))
            fh.seek(strtab[4])
            strings = fh.read(min(strtab[5], 64 << 20))
    except OSError:
        return None
    out = ElfDeps()
    runpath = rpath = ""
    for off in range(0, len(entries) - 15, 16):
        tag, val = struct.unpack_from("<qQ", entries, off)
        if tag == 0:
            break
        if tag in (_DT_NEEDED, _DT_RPATH, _DT_RUNPATH) and val < len(strings):
            text = strings[val:strings.find(b"\0", val)].decode("utf-8", "replace")
            if tag == _DT_NEEDED:
                out.needed.append(text)
            elif tag == _DT_RPATH:
                rpath = text
            else:
                runpath = text
    out.rpath = runpath or rpath
    return out


@dataclass
class ProfilerBackend:
    """What ``torch/lib`` says: ``backend`` roctracer | rocprofiler-sdk | cupti | unknown, and ``how``."""

    lib_dir: str
    backend: str = "unknown"
    how: str = ""
    linked_by: dict[str, list[str]] = field(default_factory=dict)  # libtorch file -> profiler libraries it needs
    vendored: dict[str, str] = field(default_factory=dict)  # library -> version from its file name
    hip_vendored: str | None = None
    roctracer_rocm: str | None = None  # ROCm release in the vendored roctracer's name (inferred)
    rpath_origin: bool = False  # libtorch_hip.so / libtorch_cpu.so look in torch/lib first

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _rocm_release(component: str) -> str | None:
    """``70202`` -> ``7.2.2`` (AMD's libraries end in major*10000 + minor*100 + patch)."""
    if not component.isdigit() or len(component) != 5:
        return None
    n = int(component)
    return f"{n // 10000}.{n // 100 % 100}.{n % 100}"


def inspect_torch_lib(lib_dir: str) -> ProfilerBackend:
    out = ProfilerBackend(lib_dir=lib_dir)
    try:
        names = sorted(os.listdir(lib_dir))
    except OSError as exc:
        out.how = f"torch/lib not readable: {exc.strerror or exc}"
        return out
    for name in names:
        m = _VERSIONED.match(name)
        if m and m.group(1) in ("libamdhip64", "libroctracer64", "librocprofiler-sdk", "libroctx64", "libhsa-runtime64"):
            out.vendored[m.group(1)] = m.group(2)
    out.hip_vendored = out.vendored.get("libamdhip64")
    tracer = out.vendored.get("libroctracer64", "")
    out.roctracer_rocm = _rocm_release(tracer.split(".")[-1]) if tracer.count(".") >= 2 else None
    for lib in LIBTORCH:
        path = os.path.join(lib_dir, lib)
        deps = elf_deps(path) if os.path.isfile(path) else None
        if deps is None:
            continue
        found = [n for n in deps.needed if n.startswith(tuple(prefix for prefix, _ in BACKENDS))]
        if found:
            out.linked_by[lib] = found
        if lib in ("libtorch_hip.so", "libtorch_cpu.so") and "$ORIGIN" in deps.rpath:
            out.rpath_origin = True
    for prefix, backend in BACKENDS:
        users = [lib for lib, libs in out.linked_by.items() if any(n.startswith(prefix) for n in libs)]
        if users:
            out.backend, out.how = backend, f"DT_NEEDED of {', '.join(users)}"
            return out
    for prefix, backend in BACKENDS[:2]:
        if prefix in out.vendored:
            out.backend, out.how = backend, f"{prefix}.so vendored in torch/lib (no libtorch library names it)"
            return out
    out.how = "no libtorch library in torch/lib names a profiler library"
    return out


def preflight(lib_dir: str | None, hip_version: str | None) -> dict[str, Any] | None:
    """run.json's ``profiler_backend`` record with the known defects that apply (None: not ROCm)."""
    if not hip_version:
        return None
    found = inspect_torch_lib(lib_dir) if lib_dir else ProfilerBackend(lib_dir="", how="torch/lib not reported")
    record = found.to_json()
    record["torch_hip"] = hip_version
    record["known_defects"] = [d.to_json() for d in applicable(found.backend, hip_version)]
    return record


def preflight_lines(record: dict[str, Any]) -> list[str]:
    """What ``copyprof run`` prints before the capture."""
    vendored = record.get("hip_vendored")
    hip = f"HIP {record['torch_hip']}" + (f" (torch/lib vendors libamdhip64 {vendored})" if vendored else "")
    tracer = record.get("roctracer_rocm")
    lines = [f"profiler: torch's kineto links {record['backend']} ({record['how']}); {hip}"
             + (f"; vendored roctracer is ROCm {tracer}'s (by its file name)" if tracer else "")
             + ("; libtorch loads torch/lib first (RPATH $ORIGIN): /opt/rocm does not replace these" if
                record.get("rpath_origin") else "")]
    for d in record["known_defects"]:
        fixed = f" (fixed in ROCm {d['fixed_in']})" if d["fixed_in"] else ""
        lines.append(f"known defect {d['id']}{fixed}: {d['effect']} — {', '.join(d['links'])}")
    return lines
