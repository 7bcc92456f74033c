"""``copyprof run`` on ROCm says which profiler back end torch's kineto links, which HIP it
vendors and the known defects of that combination, before the capture and in run.json; after
the capture, run.json says whether the trace holds its graph work.

There is no ROCm machine here: torch/lib folders are built from minimal ELF shared objects
(their DT_NEEDED and RPATH are what ``ldd libtorch_cpu.so`` would show, ROCm/ATOM#432's check),
and the ELF reader is checked against this machine's real CPU libtorch.
"""
from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.capture.on_disk import read_run_json
from copyprof.capture.torch_backend import elf_deps, inspect_torch_lib, preflight, preflight_lines
from copyprof.capture.vllm.probe import probe_vllm
from tests.capture.test_run_fake_server import write_fake_rocm_torch, write_fake_vllm

REPO = Path(__file__).resolve().parents[2]


def elf_so(needed: list[str], rpath: str = "") -> bytes:
    """A minimal little-endian ELF64 shared object: a .dynstr and a .dynamic section (DT_NEEDED
    entries, DT_RUNPATH) and the section table that points at them; nothing else."""
    strings = b"\0"
    offsets = []
    for name in [*needed, rpath] if rpath else needed:
        offsets.append(len(strings))
        strings += name.encode() + b"\0"
    dyn = b"".join(struct.pack("<qQ", 1, off) for off in offsets[: len(needed)])
    if rpath:
        dyn += struct.pack("<qQ", 29, offsets[-1])
    dyn += struct.pack("<qQ", 0, 0)
    strtab_off = 64
    dyn_off = strtab_off + len(strings)
    shoff = dyn_off + len(dyn)
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, 3, 0)  # e_shentsize, e_shnum, e_shstrndx
    null = bytes(64)
    strsec = struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, strtab_off, len(strings), 0, 0, 1, 0)
    dynsec = struct.pack("<IIQQQQIIQQ", 0, 6, 0, 0, dyn_off, len(dyn), 1, 0, 8, 16)
    return bytes(header) + strings + dyn + null + strsec + dynsec


ROCTRACER_BUILD = {  # a torch 2.x ROCm 7.2 wheel as sglang#35390 describes it
    "libtorch_cpu.so": elf_so(["libc10.so", "libroctracer64.so.4", "libamdhip64.so.7"], "$ORIGIN"),
    "libtorch_hip.so": elf_so(["libtorch_cpu.so", "libamdhip64.so.7"], "$ORIGIN"),
    "libamdhip64.so.7.2.53211-35e8c7bf89": b"",
    "libroctracer64.so.4.1.70200": b"",
}
SDK_BUILD = {  # kineto on rocprofiler-sdk (ATOM#432's failing image)
    "libtorch_cpu.so": elf_so(["libc10.so", "librocprofiler-sdk.so.1"], "$ORIGIN"),
    "libamdhip64.so.7.2.53211": b"",
}


def test_the_elf_reader_agrees_with_this_machines_libtorch():
    spec = importlib.util.find_spec("torch")  # its files, without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch is not installed")
    lib = os.path.join(list(spec.submodule_search_locations)[0], "lib", "libtorch_cpu.so")
    deps = elf_deps(lib)
    assert deps is not None and "libc10.so" in deps.needed and deps.rpath == "$ORIGIN"
    assert inspect_torch_lib(os.path.dirname(lib)).backend == "unknown"  # a CPU wheel links no GPU profiler


def test_a_roctracer_build_of_hip_7_2_is_at_risk_of_losing_graph_kernels(tmp_path):
    lib = write_fake_rocm_torch(tmp_path, ROCTRACER_BUILD) / "torch" / "lib"
    record = preflight(str(lib), "7.2.53211")
    assert record["backend"] == "roctracer" and record["how"] == "DT_NEEDED of libtorch_cpu.so"
    assert record["hip_vendored"] == "7.2.53211" and record["roctracer_rocm"] == "7.2.0"
    assert record["rpath_origin"] is True
    ids = [d["id"] for d in record["known_defects"]]
    assert ids == ["roctracer-graph-kernels", "rocm-no-graph-node-ids"]
    assert "https://github.com/ROCm/ROCm/issues/6102" in record["known_defects"][0]["links"]
    lines = preflight_lines(record)
    assert lines[0].startswith("profiler: torch's kineto links roctracer") and "RPATH $ORIGIN" in lines[0]
    assert "(fixed in ROCm 7.2.2)" in lines[1]


def test_a_rocprofiler_sdk_build_inflates_graph_launches(tmp_path):
    lib = write_fake_rocm_torch(tmp_path, SDK_BUILD) / "torch" / "lib"
    record = preflight(str(lib), "7.2.53211")
    assert record["backend"] == "rocprofiler-sdk"
    assert [d["id"] for d in record["known_defects"]] == ["rocprofiler-sdk-launch-overhead", "rocm-no-graph-node-ids"]


def test_other_hip_versions_and_cuda_builds(tmp_path):
    lib = write_fake_rocm_torch(tmp_path, ROCTRACER_BUILD) / "torch" / "lib"
    assert [d["id"] for d in preflight(str(lib), "7.0.51831")["known_defects"]] == ["rocm-no-graph-node-ids"]
    assert preflight(str(lib), None) is None  # torch.version.hip is None: not a ROCm build
    gone = preflight(str(tmp_path / "missing"), "7.2.1")
    assert gone["backend"] == "unknown" and gone["how"].startswith("torch/lib not readable")


def test_the_probe_reports_torch_lib(tmp_path):
    """The probe runs in the target Python; a stand-in interpreter prints its answer."""
    fake = tmp_path / "python"
    answer = {"vllm_importable": True, "vllm_version": "0.30.0", "torch_version": "2.13.0+rocm7.2",
              "torch_hip": "7.2.53211", "torch_lib": "/opt/venv/lib/python3.12/site-packages/torch/lib", "errors": {}}
    fake.write_text(f"#!/bin/sh\necho 'COPYPROF_PROBE {json.dumps(answer)}'\n")
    fake.chmod(0o755)
    info = probe_vllm(str(fake))
    assert info.torch_hip == "7.2.53211" and info.torch_lib == answer["torch_lib"]
    assert info.to_json()["torch_lib"] == answer["torch_lib"]


def _run(tmp_path: Path, graph: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    root = write_fake_vllm(tmp_path / "fake")
    write_fake_rocm_torch(root, ROCTRACER_BUILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(REPO)]), FAKE_VLLM_GRAPH=graph, CI="1")
    cmd = [sys.executable, "-m", "copyprof", "run", "--model", "fake/model", "--tp", "1", "--concurrency", "3",
           "--prefix-len", "32", "--suffix-len", "8", "--steps", "5", "--decode-tokens", "10000",
           "--out", str(tmp_path / "out"), "--boot-timeout", "20", "--timeout", "30"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return proc, Path(proc.stdout.strip().splitlines()[-1])


def test_run_says_the_back_end_before_capturing_and_marks_a_trace_that_lost_graph_work(tmp_path):
    proc, run_dir = _run(tmp_path, "lost")
    said = proc.stdout + proc.stderr
    assert "profiler: torch's kineto links roctracer" in said and "known defect roctracer-graph-kernels" in said
    assert said.index("known defect roctracer-graph-kernels") < said.index("profile window")  # before the capture
    data = read_run_json(run_dir)
    assert data["profiler_backend"]["backend"] == "roctracer"
    assert [d["id"] for d in data["profiler_backend"]["known_defects"]][0] == "roctracer-graph-kernels"
    assert data["status"] == "complete" and data["completeness"]["status"] == "lower-bound"
    assert data["completeness"]["message"].startswith("GPU work under graph launches is missing from this trace")
    assert "warning: GPU work under graph launches is missing" in said


def test_the_capture_check_reads_every_rank_trace(tmp_path):
    """What run writes after the flush, on a trace folder: a complete trace, then one that lost
    its graph kernels, then a folder with nothing readable."""
    from copyprof.capture.trace_check import check_capture
    from tests.synth.graph_replay import GraphTrace, drop_all

    (tmp_path / "ok").mkdir()
    GraphTrace().write(tmp_path / "ok" / "rank0.1.pt.trace.json.gz")
    whole = check_capture(tmp_path / "ok")
    assert whole["status"] == "complete" and whole["ranks"]["0"]["graph_launches"] == 8 and whole["message"] == ""
    (tmp_path / "lost").mkdir()
    GraphTrace(drop=drop_all).write(tmp_path / "lost" / "rank0.1.pt.trace.json.gz")
    lost = check_capture(tmp_path / "lost")
    assert lost["status"] == "lower-bound" and lost["ranks"]["0"]["launches_without_gpu_work"] == 8
    (tmp_path / "empty").mkdir()
    assert check_capture(tmp_path / "empty")["status"] == "unchecked"
