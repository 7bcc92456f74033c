"""Seed inputs for the reader fuzzers: small hand-made files per format plus the real samples.

Why both: the real samples (``../shared/sample_traces``) carry the quirks of real profilers
(roctracer string args, nsys schema drift, rocprofiler-sdk string tables) but are few and
mostly large; hand-made seeds are tiny (fast to mutate ten thousand times) and each one packs
the features a reader branches on: copies of every direction, graph launches, step
annotations, correlation ids, grids, multi-process rows. Every seed here is read cleanly by
copyprof before mutation (tests/fuzz/test_fuzz_smoke.py checks that), so a failure after
mutation is the mutation's doing.

``build_seeds(root)`` writes the hand-made seeds under ``root`` and returns every seed
(hand-made and real) grouped by format. A seed is a file, or a directory for rocprofv3 CSV.
"""
from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO.parent / "shared" / "sample_traces"
DATA = REPO / "tests" / "data"
FORMATS = ("kineto", "rocprofv3-csv", "rocprofv3-json", "rocpd", "nsys-sqlite", "rocprof-v1")
REAL_SEEDS = {  # name in ../shared/sample_traces -> format
    "kineto_roctracer_mi250_rocm6_2_minitoy.json.gz": "kineto",
    "kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz": "kineto",
    "kineto_roctracer_mi300x_sglang_qwen3_8b_decode.json.gz": "kineto",
    "kineto_cupti_b200_eager.json.gz": "kineto",
    "kineto_cupti_a100_cudagraph_rank0.json.gz": "kineto",
    "rocprofv3_json_gfx950_mi350x_908_results.json.gz": "rocprofv3-json",
    "nsys_sqlite_a100_saxpy_mpi_schema2.9.sqlite": "nsys-sqlite",
    "nsys_sqlite_a100_cloverleaf_schema3.13.sqlite": "nsys-sqlite",
}
BIG = 256 << 10  # seeds larger than this are mutated less often (each costs ~1 s to parse)


@dataclass(frozen=True)
class Seed:
    fmt: str
    name: str
    path: Path
    model: str | None = None  # --model for `report` (the attribution path needs a layout)

    @property
    def size(self) -> int:
        if self.path.is_dir():
            return sum(p.stat().st_size for p in self.path.iterdir())
        return self.path.stat().st_size


def _x(cat: str, name: str, ts: float, dur: float, pid: int | str = 0, tid: int | str = 7, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def kineto_cupti(steps: int = 4) -> dict:
    """CUPTI flavour: vLLM step annotations, launches by correlation, DtoD/PtoP copies, a graph launch."""
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}}]
    corr, t = 100, 1000.0
    for s in range(steps):
        ev.append(_x("user_annotation", "execute_context_0(0)_generation_4(4)", t, 90.0, pid=1, tid=1))
        ev.append(_x("gpu_user_annotation", "execute_context_0(0)_generation_4(4)", t + 5, 88.0, device=0, stream=7))
        for k in range(3):
            corr += 1
            ev.append(_x("cuda_runtime", "cudaLaunchKernel", t + 1 + k, 0.5, pid=1, tid=1, correlation=corr,
                         **{"External id": corr}))
            ev.append(_x("kernel", f"gemm_{k}", t + 10 + 20 * k, 8.0, device=0, stream=7, correlation=corr,
                         grid=[64, 1, 1], block=[256, 1, 1], **{"graph id": -1}))
        corr += 1
        ev.append(_x("cuda_runtime", "cudaMemcpyAsync", t + 4, 0.5, pid=1, tid=1, correlation=corr, bytes=229376))
        ev.append(_x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", t + 75, 2.5, device=0, stream=7,
                     correlation=corr, bytes=229376))
        ev.append(_x("gpu_memcpy", "Memcpy PtoP (Device -> Device)", t + 80, 2.0, fromDevice=0, stream=7,
                     correlation=corr + 1, bytes=4096))
        ev.append(_x("cpu_op", "aten::copy_", t + 3, 1.0, pid=1, tid=1, **{"External id": corr}))
        corr += 2
        t += 100.0
    ev.append(_x("cuda_runtime", "cudaGraphLaunch", t, 1.0, pid=1, tid=1, correlation=corr))
    ev.append(_x("kernel", "memcpy32_post", t + 5, 1.5, device=0, stream=7, correlation=corr, grid=[56, 1, 1],
                 block=[256, 1, 1], **{"graph id": 3, "graph node id": 9}))
    ev.append({"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": t, "cat": "ac2g", "name": "ac2g"})
    return {"schemaVersion": 1, "cupti_version": 24, "cuda_runtime_version": 12080,
            "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2},
            "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "computeMajor": 9, "computeMinor": 0,
                                  "totalGlobalMem": 150000000000, "numSms": 132, "warpSize": 32}],
            "traceEvents": ev, "traceName": "rank0.pt.trace.json", "displayTimeUnit": "ms",
            "baseTimeNanoseconds": 1700000000000000000}


def kineto_roctracer() -> dict:
    """roctracer flavour: string runtime args, ``Memcpy DtoD`` with args.kind, a hipGraphLaunch."""
    ev = []
    for i in range(6):
        ts = 5000 + 40 * i
        ev.append(_x("cuda_runtime", "hipMemcpyWithStream", ts, 3, pid=9, tid=9,
                     correlation=str(300 + i), bytes="9216", kind="3"))
        ev.append(_x("gpu_memcpy", "Memcpy DtoD", ts + 5, 1.2, pid=2, tid="stream 0", device=2,
                     correlation=300 + i, bytes=9216, kind="DtoD"))
        ev.append(_x("kernel", "Cijk_Alik_Bljk", ts + 10, 9.0, pid=2, tid=0, device=2, stream=0,
                     correlation=400 + i, kind="Dispatch Task"))
        ev.append(_x("user_annotation", "execute_32_context_0(0)_generation_32(32)", ts - 1, 39, pid=9, tid=9))
    ev.append(_x("cuda_runtime", "hipGraphLaunch", 6000, 2, pid=9, tid=9, correlation=500))
    return {"roctracer_version": 4.1, "hip_runtime_version": 70051831,
            "deviceProperties": [{"id": 2, "name": "AMD Instinct MI300X", "computeMajor": 9, "computeMinor": 4,
                                  "numSms": 304, "warpSize": 64}], "traceEvents": ev}


def kineto_sdk() -> dict:
    """rocprofiler-sdk flavour: rocclr blit copies (no bytes, no grid) between GEMMs, a step marker."""
    ev = [_x("user_annotation", "execute_context_0(0)_generation_16(16)", 0, 400, pid=5, tid=5)]
    for i in range(8):
        ev.append(_x("hip_runtime", "hipGraphLaunch" if i == 0 else "hipLaunchKernel", 1 + i, 1, pid=5, tid=5,
                     correlation=700 + i))
        ev.append(_x("kernel", "Cijk_gemm", 10 + 30 * i, 12, pid=0, tid=1, device=0, stream=1, correlation=700 + i))
        ev.append(_x("kernel", "__amd_rocclr_copyBuffer.kd", 25 + 30 * i, 2.7, pid=0, tid=1, device=0, stream=1,
                     correlation=700 + i))
    return {"rocprofiler-sdk_version": "1.0.0", "traceEvents": ev}


def kineto_legacy() -> list:
    """2020-21 tb_plugin layout: a bare list, capitalised categories, ``external id``, string tids."""
    return [
        {"ph": "X", "cat": "Runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 5, "ts": 10, "dur": 2,
         "args": {"correlation": 9, "external id": 3}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": "stream 7",
         "ts": 12, "dur": 1.5, "args": {"device": 0, "correlation": 9, "bytes": 4096}},
        {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 14, "dur": 1, "args": {}},
        {"ph": "X", "cat": "Operator", "name": "aten::copy_", "pid": 1, "tid": 5, "ts": 9, "dur": 4,
         "args": {"external id": 3}},
        {"ph": "X", "cat": "Operator", "name": "ProfilerStep#3", "pid": 1, "tid": 5, "ts": 1, "dur": 30},
    ]


def kineto_dict_events() -> dict:
    """Third-party writers: ``traceEvents`` as an object keyed by "pid,tid"."""
    return {"traceEvents": {"0,7": [_x("kernel", "k1", 1, 2, device=0, stream=7),
                                    _x("gpu_memcpy", "Memcpy DtoD", 4, 1, device=0, stream=7, bytes=64)],
                            "1,1": [_x("cuda_runtime", "cudaMemcpyAsync", 0, 1, pid=1, tid=1, correlation=1)]}}


# ------------------------------------------------------------------------ nsys (hand-made)
def _gtid(pid: int, tid: int | None = None) -> int:
    return (1 << 48) | (pid << 24) | (pid if tid is None else tid)


def nsys_small(path: Path) -> Path:
    """Two processes; DtoD, PtoP and HtoD copies, a memset, graph replay, NVTX ranges, a backtrace row."""
    conn = sqlite3.connect(path)
    conn.executescript((DATA / "nsys_schema_subset.sql").read_text())
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)", [
        (1, "void copy_kernel<float>(float *, const float *, int)"), (2, "copy_kernel"), (3, "cudaGraphLaunch_v10000"),
        (4, "cudaMemcpyAsync_v3020"), (5, "decode_step"), (6, "MPI Rank 1")])
    conn.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.13.2')")
    conn.execute("INSERT INTO TARGET_INFO_GPU (vmId, id, name, smCount, computeMajor, computeMinor)"
                 " VALUES (1, 0, 'NVIDIA H100 80GB HBM3', 132, 9, 0)")
    for pid in (4242, 4343):
        g = (1 << 48) | (pid << 24)
        conn.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python3')", (g, pid))
        for i in range(4):
            t = 1000 * i + (pid - 4242) * 10
            conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId,"
                         " nameId, returnValue) VALUES (?, ?, 0, ?, ?, ?, 0)", (t, t + 50, _gtid(pid), i + 1,
                                                                                   3 if i == 0 else 4))
            conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId,"
                         " correlationId, globalPid, demangledName, shortName, registersPerThread, gridX, gridY,"
                         " gridZ, blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory,"
                         " localMemoryPerThread, localMemoryTotal, gridId, graphNodeId) VALUES (?, ?, 0, 1, 7, ?,"
                         " ?, 1, 2, 32, 64, 1, 1, 256, 1, 1, 0, 0, 0, 0, 1, ?)", (t + 100, t + 300, i + 1, g, i or None))
            conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId,"
                         " correlationId, globalPid, bytes, copyKind, srcKind, dstKind, srcDeviceId, dstDeviceId,"
                         " graphNodeId) VALUES (?, ?, 0, 1, 7, ?, ?, ?, ?, 2, 2, 0, 1, NULL)",
                         (t + 400, t + 450, i + 1, g, 1 << (10 + i), (8, 10, 1, 8)[i]))
        conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId,"
                     " nameId, returnValue) VALUES (1, 49, 67, ?, 1, 4, 0)", (_gtid(pid),))
        conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId, correlationId,"
                     " globalPid, value, bytes, graphNodeId, memKind) VALUES (4800, 4900, 0, 1, 7, 9, ?, 0, 4096,"
                     " NULL, 2)", (g,))
        nvtx = "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId) VALUES (?, ?, ?, ?, ?, ?)"
        conn.executemany(nvtx, [(0, 5000, 59, None, _gtid(pid), 5), (10, 4990, 60, "step 7", _gtid(pid), None),
                                (0, None, 39, None, _gtid(pid), 6)])
    conn.commit()
    conn.close()
    return path


def rocprof_v1_gz(src: Path, dest: Path) -> Path:
    dest.write_bytes(gzip.compress(src.read_bytes()))
    return dest


def build_seeds(root: Path) -> dict[str, list[Seed]]:
    """Write the hand-made seeds under ``root`` (must not exist yet); return all seeds (hand-made first, then real) by format."""
    from tests.readers.test_rocprofv3_rocpd import make_rocpd
    from tests.synth.kimi import C16, write_kineto, write_rocprofv3_csv

    root.mkdir(parents=True)  # a new folder: seeds are never written over other files
    seeds: dict[str, list[Seed]] = {f: [] for f in FORMATS}

    def add(fmt: str, path: Path, model: str | None = None) -> None:
        seeds[fmt].append(Seed(fmt, path.name, path, model))

    def write_json(name: str, doc: object, gz: bool = False) -> Path:
        data = json.dumps(doc).encode()
        path = root / name
        path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
        return path

    add("kineto", write_json("cupti.pt.trace.json", kineto_cupti()))
    add("kineto", write_json("roctracer.json.gz", kineto_roctracer(), gz=True))
    add("kineto", write_json("sdk.json", kineto_sdk()))
    add("kineto", write_json("legacy.json", kineto_legacy()))
    add("kineto", write_json("dict_events.json", kineto_dict_events()))
    add("kineto", write_kineto(root / "kimi_sdk.pt.trace.json", C16, steps=2), model="kimi-k3")
    for d in ("gen1", "gen2", "gen3", "rocpd2csv", "rocpd2csv_graph"):
        dest = root / f"csv_{d}"
        shutil.copytree(DATA / "rocprofv3" / d, dest)
        add("rocprofv3-csv", dest)
    add("rocprofv3-csv", write_rocprofv3_csv(root / "csv_kimi", C16, steps=2), model="kimi-k3")
    add("rocprofv3-json", Path(shutil.copy(DATA / "rocprofv3" / "json" / "1001_results.json", root)))
    for schema in (3, 4):
        add("rocpd", make_rocpd(root / f"rocpd_s{schema}_results.db", schema=schema))
    add("nsys-sqlite", nsys_small(root / "nsys_small.sqlite"))
    v1 = DATA / "rocprof_v1_results.csv"
    add("rocprof-v1", Path(shutil.copy(v1, root / "results.csv")))
    add("rocprof-v1", rocprof_v1_gz(v1, root / "results.csv.gz"))
    for name, fmt in REAL_SEEDS.items():
        if (SAMPLES / name).is_file():
            add(fmt, SAMPLES / name)
    return seeds


def missing_samples() -> list[str]:
    """The real samples build_seeds would add but cannot find (no ../shared next to this checkout)."""
    return [name for name in REAL_SEEDS if not (SAMPLES / name).is_file()]
