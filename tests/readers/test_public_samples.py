"""`inspect` and `report` on every public sample in ../shared/sample_traces, against counts taken
without copyprof.

Where the numbers come from: tests/sample_census.py, a stdlib-only reading of each file
(``json``/``gzip``/``sqlite3``; definitions in its docstring, after ../shared/docs/trace-formats.md),
run on the files listed with their sha256 in ../shared/sample_traces/README.md. The literals
below are its output (``python -m tests.sample_census``), and the first test re-counts the files
to keep the literals and the files in step. Nothing here was copied from copyprof's output.

Split by how settled each expectation is:
* reader level (``inspect``): properties of the files — every event by kind, the
  device-to-device copies by name and by size, annotation ranges, graph launches;
* step level on samples with step annotations: decode steps and copies per step, counted from the
  annotation ranges and the correlation ids of the runtime calls inside them;
* step level on GPU-only samples (no markers: the idle-gap fallback): no step structure, said.
"""
from __future__ import annotations

import pytest

from tests.conftest import cli_json
from tests.sample_census import census, kineto_step_copies

A100 = "kineto_cupti_a100_cudagraph_rank0.json.gz"
B200 = "kineto_cupti_b200_eager.json.gz"
MI250 = "kineto_roctracer_mi250_rocm6_2_minitoy.json.gz"
SGLANG = "kineto_roctracer_mi300x_sglang_qwen3_8b_decode.json.gz"
VLLM_GRAPH = "kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz"
MI350X = "rocprofv3_json_gfx950_mi350x_908_results.json.gz"
CLOVERLEAF = "nsys_sqlite_a100_cloverleaf_schema3.13.sqlite"
SAXPY = "nsys_sqlite_a100_saxpy_mpi_schema2.9.sqlite"
DTOD = "Memcpy DtoD (Device -> Device)"


def _kinds(kernel: int, memcpy: int, memset: int, runtime: int, annotation: int, cpu_op: int,
           python: int = 0) -> dict[str, int]:
    return {"kernel": kernel, "memcpy": memcpy, "memset": memset, "runtime": runtime, "annotation": annotation,
            "cpu_op": cpu_op, "python": python}


# Reader level, as tests/sample_census.py counts it. d2d_by_bytes: "<bytes> <source>" -> copies.
CENSUS = {
    A100: {
        "format": ("kineto", "cupti"),
        "counts": _kinds(6080, 1390, 277, 33924, 360, 25185),
        "d2d_by_name": {DTOD: 1280},
        "d2d_by_bytes": {"4 event": 59, "56 event": 6, "512 event": 265, "1024 event": 90, "2048 event": 60,
                         "11192 event": 66, "11448 event": 60, "16384 event": 125, "32768 event": 18,
                         "44768 event": 51, "65536 event": 53, "131072 event": 90, "147456 event": 5,
                         "1048576 event": 5, "1465344 event": 53, "5861376 event": 120, "8388608 event": 11,
                         "12582912 event": 6, "14680064 event": 5, "45842432 event": 28, "46891008 event": 37,
                         "125260864 event": 33, "183369728 event": 22, "366739456 event": 12},
        # 46 names; the five ProfilerStep ranges once each, the rest per training phase (5, 10, 20 or 55).
        "annotations": {**{f"ProfilerStep#{i}": 1 for i in range(550, 555)},
                        "nccl:all_to_all": 55, "## Request wait() ##": 20, "## PooledEmbeddingsAwaitable wait() ##": 20,
                        **{n: 10 for n in ("## KJTAllToAllSplitsAwaitable wait() ##", "## KJTAllToAllTensorsAwaitable wait() ##",
                                           "## all2all_data:kjt splits ##", "## all2all_data:recat_values ##",
                                           "## all2all_data:recat_permute_gen ##", "## all2all_data:kjt values ##",
                                           "## SplitsAllToAllAwaitable wait() ##", "## all2all_data:kjt lengths ##",
                                           "## alltoall_fwd_single ##", "## reduce_scatter_base ##",
                                           "nccl:_all_gather_base", "nccl:all_reduce",
                                           "## reduce_scatter_base_bw (all_gather) ##", "nccl:_reduce_scatter_base",
                                           "## alltoall_bwd_single ##")},
                        **{n: 5 for n in ("## PooledEmbeddingArchAwaitable wait() ##", "## RecMetricModule:update ##",
                                          "## CTRMetric:update ##", "## AUCMetric:update ##",
                                          "## CalibrationMetric:update ##", "## NEMetric:update ##",
                                          "## ModelGenerationCoordinator ##", "## KJTListSplitsAwaitable wait() ##",
                                          "## MAEMetric:update ##", "## KJTListAwaitable wait() ##",
                                          "## all2all_data:kjt weights ##", "## optimizer ##",
                                          "## forward:sparse_arch ##", "## forward ##", "## copy_batch_to_gpu ##",
                                          "## backward ##", "## sparse_data_dist ##", "## wait_for_batch ##",
                                          "## wait_sparse_data_dist ##", "DistributedDataParallel.forward",
                                          "Optimizer.step#FusedAdam.step", "## zero_grad ##")}},
        "graph_launches": 70,
    },
    B200: {
        "format": ("kineto", "cupti"),
        "counts": _kinds(768, 161, 0, 1372, 6, 4809, 15230),  # runtime: 1151 cuda_runtime + 221 cuda_driver
        "d2d_by_name": {DTOD: 146},
        "d2d_by_bytes": {"5114880 event": 74, "5455872 event": 72},
        # 3 CPU ranges, each again as gpu_user_annotation: counted once.
        "annotations": {"execute_context_1(888_788544)_generation_0(0)": 1, "nccl:_all_gather_base": 1,
                        "## Call CompiledFxGraph fud64jsrxcxliekg7lptyw24yz5k3oa65b73wjfbhz6j2fg6ouu7 ##": 1},
        "graph_launches": 0,
    },
    MI250: {
        "format": ("kineto", "roctracer"),
        "counts": _kinds(14, 2, 0, 21, 5, 70),  # the 2 copies are HtoD (no bytes arg): no d2d
        "d2d_by_name": {},
        "d2d_by_bytes": {},
        "annotations": {"ProfilerStep#1": 1, "ProfilerStep#2": 1, "Optimizer.step#SGD.step": 1},
        "graph_launches": 0,
    },
    SGLANG: {
        "format": ("kineto", "roctracer"),
        "counts": _kinds(555, 3, 0, 29, 2, 61, 821),  # 3 copies: 2 DtoD + 1 DtoH; python: stack frames
        "d2d_by_name": {DTOD: 2},
        "d2d_by_bytes": {"256 event": 2},
        "annotations": {"execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk32785sqsq32sqsk32785)": 1,
                        "step[DECODE bs=32]": 1},
        "graph_launches": 1,
    },
    VLLM_GRAPH: {
        "format": ("kineto", "roctracer"),
        "counts": _kinds(425, 9, 0, 20, 1, 100, 984),
        "d2d_by_name": {DTOD: 9},
        "d2d_by_bytes": {"32 event": 1, "128 event": 1, "256 event": 3, "4096 event": 1, "4100 event": 1,
                         "9216 event": 2},
        "annotations": {"execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)": 1},
        "graph_launches": 1,
    },
    MI350X: {
        "format": ("rocprofv3-json", "rocprofiler-sdk"),
        "counts": _kinds(43915, 0, 0, 0, 0, 0),  # kernel trace only: no memory-copy, HIP or marker records
        "d2d_by_name": {"__amd_rocclr_copyBuffer": 3153},
        # grid work-items * 16 (workgroup 512) as an upper bound; 44 saturate the grid (>= 256 CUs * 512).
        "d2d_by_bytes": {"4096 grid-bound": 726, "8192 grid-bound": 1166, "16384 grid-bound": 16,
                         "589824 grid-bound": 1, "786432 grid-bound": 1200, "-1 none": 44},
        "annotations": {},
        "graph_launches": 0,
    },
    CLOVERLEAF: {
        "format": ("nsys-sqlite", "cupti"),
        "counts": _kinds(1312, 279, 0, 3048, 0, 0),  # copies: 254 HtoD + 25 DtoH; no NVTX table
        "d2d_by_name": {},
        "d2d_by_bytes": {},
        "annotations": {},
        "graph_launches": 0,
    },
    SAXPY: {
        "format": ("nsys-sqlite", "cupti"),
        # runtime: 95 rows, 57 correlation ids (38 are CUDA backtrace repeats); NVTX: 22 of 24 rows are ranges.
        "counts": _kinds(5, 15, 0, 57, 22, 0),
        "d2d_by_name": {},
        "d2d_by_bytes": {},
        "annotations": {"MPI_Send": 10, "saxpy": 5, "MPI_Recv": 5, "MPI_Init": 1, "MPI_Finalize": 1},
        "graph_launches": 0,
    },
}


@pytest.mark.parametrize("name", sorted(CENSUS))
def test_the_files_still_hold_the_pinned_census(samples, name):
    # Re-count with the stdlib reading: the literals above are what the files hold.
    expected = {k: v for k, v in CENSUS[name].items() if k != "format"}
    assert census(samples / name) == expected


def test_inspect_reports_what_each_file_holds(samples):
    # One `inspect` of all eight files, as a user runs it.
    out = cli_json("inspect", *(str(samples / n) for n in sorted(CENSUS)))
    got = {f["path"].rsplit("/", 1)[-1]: f for f in out["files"]}
    assert sorted(got) == sorted(CENSUS)
    for name, want in CENSUS.items():
        f = got[name]
        assert (f["format"], f["flavour"]) == want["format"], name
        assert f["counts"] == want["counts"], name
        assert f["d2d_copies"] == sum(want["d2d_by_name"].values()), name
        assert f["d2d_by_name"] == want["d2d_by_name"], name
        assert {f"{r['bytes']} {r['bytes_src']}": r["count"] for r in f["d2d_by_bytes"]} == want["d2d_by_bytes"], name
        assert f["annotations"] == want["annotations"], name
        assert f["graph_launches"] == want["graph_launches"], name
        assert f["ranks"] == [0] and f["partial"] is None and f["warnings"] == [], name


# Step level, samples with step annotations: (step rule, decode steps, excluded steps, tokens per
# step, device-to-device copies per decode step), from tests/sample_census.kineto_step_copies. A step
# holds the GPU work launched inside its range by any thread of the process (the autograd
# thread's and helper threads' launches are the step's work too, and said in a note):
#   A100: 5 ProfilerStep ranges, each launching 1,375 GPU ops with 228 DtoD copies: 820 ops and 61
#         copies from the range's own thread, 555 ops and 167 copies from thread 25556 (autograd).
#         ProfilerStep says nothing about the batch: decode is assumed and tokens are copyprof's
#         inference, so not pinned here.
#   B200: one vLLM range with context_1: a prefill step, excluded; no decode step, no copies counted.
#   MI250: ProfilerStep#1 launches 9 GPU ops from its thread and 16 from the process (no DtoD),
#          ProfilerStep#2 none: one step.
#   SGLang: the vLLM-style range (generation_32, context_0) launches 558 ops with 2 DtoD copies
#           (its step[DECODE bs=32] range is the same step by the SGLang grammar).
#   vLLM full graph: one decode range (generation_32) launching 434 ops, 9 DtoD copies.
ANNOTATED_STEPS = {
    A100: ("annotation (profiler-step)", 5, 0, None, 228),
    B200: ("annotation (vllm)", 0, 1, None, 0),
    MI250: ("annotation (profiler-step)", 1, 0, None, 0),
    SGLANG: ("annotation (vllm-detailed)", 1, 0, 32, 2),
    VLLM_GRAPH: ("annotation (vllm-detailed)", 1, 0, 32, 9),
}
STEP_RANGES = {  # what kineto_step_copies gives: (name prefix, [(GPU ops, DtoD) per range] own thread, any thread)
    A100: ("ProfilerStep#", [(820, 61)] * 5, [(1375, 228)] * 5),
    B200: ("execute_", [(929, 146)], [(929, 146)]),
    MI250: ("ProfilerStep#", [(9, 0), (0, 0)], [(16, 0), (0, 0)]),
    SGLANG: ("execute_", [(558, 2)], [(558, 2)]),
    VLLM_GRAPH: ("execute_", [(434, 9)], [(434, 9)]),
}


@pytest.mark.parametrize("name", sorted(STEP_RANGES))
def test_step_ranges_hold_what_is_pinned(samples, name):
    prefix, own, process = STEP_RANGES[name]
    assert [(ops, d2d) for _, ops, d2d in kineto_step_copies(samples / name, (prefix,))] == own
    assert [(ops, d2d) for _, ops, d2d in kineto_step_copies(samples / name, (prefix,), any_thread=True)] == process


@pytest.mark.parametrize("name", sorted(ANNOTATED_STEPS))
def test_report_counts_the_annotated_steps(samples, name):
    rule, decode, excluded, tokens, copies = ANNOTATED_STEPS[name]
    # None of these is a Kimi trace: with --model kimi-k3 nothing may be attributed.
    [run] = cli_json("report", str(samples / name), "--model", "kimi-k3")["runs"]
    assert run["steps"] == {"decode": decode, "excluded": excluded, "rule": rule}
    if tokens is not None:
        assert run["per_step"]["tokens"] == tokens
    assert run["per_step"]["copies"] == copies and run["per_step"]["other"] == copies
    assert run["per_step"]["post_proj"] == {"mla": 0, "kda": 0, "total": 0}
    assert run["attribution"]["status"] == "not-attributed"


# Step level, GPU-only samples (no step markers, no launch correlations): the idle-gap fallback
# keeps a cut only when one segment size repeats, alone the most common, and holds
# >= 10 kernels (a serving step launches tens at least). Independently: saxpy runs 5 iterations of
# (HtoD, HtoD, kernel, DtoH) separated by >= 172 ms idle gaps (kernel and memcpy rows by start;
# NVTX 'saxpy' x5 agrees): 1 kernel per segment. The report's own reasons for the other two
# (its warning): cloverleaf's segments of 36 and 114 events are equally common; the MI350X's 7
# segments have 7 sizes. None has steps, and the report says why instead of counting segments.
GPU_ONLY = (SAXPY, CLOVERLEAF, MI350X)


@pytest.mark.parametrize("name", GPU_ONLY)
def test_gpu_only_samples_without_step_structure_have_no_steps(samples, name):
    [run] = cli_json("report", str(samples / name), "--model", "kimi-k3")["runs"]
    assert run["steps"] == {"decode": 0, "excluded": 0, "rule": "none"}
    assert any(w.startswith("no steps were found: the trace has no step annotations and no graph launches")
               for w in run["warnings"])
    assert run["per_step"]["copies"] == 0
    assert run["attribution"]["status"] == "not-attributed"
