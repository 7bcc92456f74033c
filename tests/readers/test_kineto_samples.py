"""The Kineto reader on every public Kineto sample in ../shared/sample_traces.

Expected numbers were counted independently with the stdlib json module (one pass over
traceEvents, ph == "X", grouped by `cat`), not with copyprof:

file                            kernel memcpy(DtoD) memset runtime annot cpu_op python graphLaunch
A100 cudagraph (HTA)              6080   1390(1280)    277   33924   360  25185      0     70
B200 eager (TraceLens)             768    161(146)       0    1372     6   4809  15230      0   runtime = 1151 cuda_runtime + 221 cuda_driver; annot = 3 cpu + 3 gpu
MI250 ROCm 6.2 (HTA)                14      2(0)         0      21     5     70      0      0   annot = 3 cpu + 2 gpu
MI300X SGLang decode (TraceLens)   555      3(2)         0      29     2     61    821      1
MI300X vLLM decode graph (TL)      425      9(9)         0      20     1    100    984      1

python = cat "python_function" (Python frames of a trace with stacks, kept: they name the code
behind each copy).
"""
from __future__ import annotations

import pytest

from copyprof.readers.kineto import read_kineto
import numpy as np

from copyprof.taxonomy.copies import copy_class, d2d_at, d2d_mask

EXPECTED = {
    "kineto_cupti_a100_cudagraph_rank0.json.gz": (
        "cupti", {"kernel": 6080, "memcpy": 1390, "memset": 277, "runtime": 33924, "annotation": 360, "cpu_op": 25185, "python": 0}, 1280, 70),
    "kineto_cupti_b200_eager.json.gz": (
        "cupti", {"kernel": 768, "memcpy": 161, "memset": 0, "runtime": 1372, "annotation": 6, "cpu_op": 4809, "python": 15230}, 146, 0),
    "kineto_roctracer_mi250_rocm6_2_minitoy.json.gz": (
        "roctracer", {"kernel": 14, "memcpy": 2, "memset": 0, "runtime": 21, "annotation": 5, "cpu_op": 70, "python": 0}, 0, 0),
    "kineto_roctracer_mi300x_sglang_qwen3_8b_decode.json.gz": (
        "roctracer", {"kernel": 555, "memcpy": 3, "memset": 0, "runtime": 29, "annotation": 2, "cpu_op": 61, "python": 821}, 2, 1),
    "kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz": (
        "roctracer", {"kernel": 425, "memcpy": 9, "memset": 0, "runtime": 20, "annotation": 1, "cpu_op": 100, "python": 984}, 9, 1),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_d2d_at_rows_is_the_table_mask_at_those_rows(samples, name):
    """The census' per-row test (codes gathered by the caller, the direction read at memcpy rows
    only) gives the table-wide mask at every row and on a shuffled subset, and over every row the
    independently counted DtoD copies above."""
    [trace] = read_kineto(str(samples / name))
    table = trace.table
    kind, names = table["kind"].codes, table["name"].codes
    whole = d2d_mask(table)
    every = np.arange(len(table))
    assert (d2d_at(table, every, kind, names) == whole).all()
    assert int(d2d_at(table, every, kind, names).sum()) == EXPECTED[name][2]
    some = np.random.default_rng(0).permutation(len(table))[: len(table) // 3]
    assert (d2d_at(table, some, kind[some], names[some]) == whole[some]).all()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_counts_flavour_and_d2d(samples, name):
    flavour, counts, d2d, graphs = EXPECTED[name]
    [trace] = read_kineto(str(samples / name))
    assert trace.meta.flavour == flavour
    assert trace.meta.kind_counts == counts
    assert int((copy_class(trace.events) == "d2d").sum()) == d2d
    assert trace.meta.graph_launches == graphs
    assert trace.meta.partial is None
    # Every kept row has a non-negative duration and ns timestamps.
    assert (trace.events["dur_ns"] >= 0).all()


def test_cuda_graph_kernels_share_the_launch_correlation(samples):
    # HTA A100 sample: 70 cudaGraphLaunch rows; trace-formats.md §1.7 counted 345 GPU ops
    # (135 kernels + 210 memsets) sharing their correlation ids.
    [trace] = read_kineto(str(samples / "kineto_cupti_a100_cudagraph_rank0.json.gz"))
    ev = trace.events
    launches = ev[(ev["kind"] == "runtime") & ev["name"].astype(str).str.startswith("cudaGraphLaunch")]
    gpu = ev[ev["on_gpu"] & ev["correlation"].isin(set(launches["correlation"]))]
    assert len(launches) == 70
    assert gpu["kind"].value_counts().to_dict() == {"memset": 210, "kernel": 135, "memcpy": 0, "runtime": 0, "annotation": 0, "cpu_op": 0,
                                                  "python": 0}


def test_roctracer_runtime_copy_rows_carry_string_bytes(samples):
    # MI250 ROCm 6.2: GPU memcpy ops have no `bytes`; the hipMemcpy runtime rows carry
    # `size` as a string. Both reads must keep the value (as int) on the runtime rows.
    [trace] = read_kineto(str(samples / "kineto_roctracer_mi250_rocm6_2_minitoy.json.gz"))
    ev = trace.events
    memcpy = ev[ev["kind"] == "memcpy"]
    assert (memcpy["bytes"] == -1).all()
    copies_rt = ev[(ev["kind"] == "runtime") & ev["name"].astype(str).str.contains("Memcpy") & (ev["bytes"] > 0)]
    assert set(memcpy["correlation"]) <= set(copies_rt["correlation"])


def test_vllm_annotation_and_devices(samples):
    [trace] = read_kineto(str(samples / "kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz"))
    ann = trace.events[trace.events["kind"] == "annotation"]["name"].astype(str).tolist()
    assert ann == ["execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)"]
    assert trace.meta.devices[0]["cus"] == 304  # MI300X: 304 CUs (numSms in deviceProperties)
    assert trace.meta.metadata["roctracer_version"] == 4.1
