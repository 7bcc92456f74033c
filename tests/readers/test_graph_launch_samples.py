"""Graph launches on real traces: no false alarm of lost graph work, and the launch overhead as it is.

The expected figures are counted here from the raw JSON (gzip + json, no copyprof code): the
GPU ops carrying each graph launch's correlation id, the launch calls' durations.
"""
from __future__ import annotations

import gzip
import json
import statistics
from collections import Counter
from pathlib import Path

import pytest

from copyprof.analysis.report import analyze_run
from copyprof.analysis.results import RunReport
from copyprof.reading import read_runs
from tests.conftest import REPO, cli_json

TRACES = REPO / "traces"
# One capture of each engine and model family (all 11 replica graph captures were checked the
# same way when this was written; the others differ only in arm and cohort).
H200_GRAPH_RUNS = [TRACES / name for name in (
    "replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261130T042336Z",
    "replica-kimi-linear-48b-a3b-tp8-c16-cuda-graph-candidate-20261130T042708Z",
    "replica-qwen3-next-80b-a3b-tp4-c16-cuda-graph-partial-20261201T083031Z",
    "copies-cuda-graph-20261130T042751Z")]


def analysed(path: Path) -> RunReport:
    """The run's report, in this process (no CLI start-up per run: these tests read 15 runs)."""
    return analyze_run(read_runs([str(path)]), str(path), None)


def raw_launches(path: Path) -> tuple[list[int], list[float]]:
    """GPU ops per graph launch (in time order) and each launch call's duration in µs."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    per_corr = Counter(e["args"].get("correlation") for e in events
                       if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("args"))
    launches = sorted((e for e in events if "GraphLaunch" in str(e.get("name", ""))), key=lambda e: e["ts"])
    return [per_corr[e["args"]["correlation"]] for e in launches], [float(e["dur"]) for e in launches]


@pytest.mark.parametrize("name, ops", [("kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz", 421),
                                       ("kineto_roctracer_mi300x_sglang_qwen3_8b_decode.json.gz", 544)])
def test_mi300x_graph_samples_report_complete(samples, name, ops):
    """Real ROCm graph replays (roctracer 4.1; HIP 7.0 and 7.2): one hipGraphLaunch each, with
    421 and 544 "Dispatch Task" kernels under it. Nothing to compare them with, nothing empty:
    complete, and no warning."""
    counted, _ = raw_launches(samples / name)
    assert counted == [ops]
    run = cli_json("report", str(samples / name))["runs"][0]
    assert run["completeness"]["status"] == "complete" and run["completeness"]["gpu_ops_per_launch"] == ops
    assert run["per_step"]["lower_bound"] is False
    assert run["launch_overhead"]["launch_bound"] is False
    assert not any("graph" in w for w in run["warnings"])


def test_mi300x_sglang_launch_costs_the_gpu_three_percent(samples):
    """SGLang's 1.57 ms hipGraphLaunch: the GPU starts the graph 14 µs into the call and then
    idles 274 µs inside it (gaps between the graph's kernels while the host still dispatches)."""
    _, durations = raw_launches(samples / "kineto_roctracer_mi300x_sglang_qwen3_8b_decode.json.gz")
    o = cli_json("report", str(samples / "kineto_roctracer_mi300x_sglang_qwen3_8b_decode.json.gz"))["runs"][0][
        "launch_overhead"]
    assert o["call_median_ms"] == pytest.approx(durations[0] / 1e3)
    assert o["gpu_idle_in_launch_ms"] == pytest.approx(0.288, abs=0.002)


def test_a100_piecewise_graphs_are_compared_replay_by_replay(samples):
    """HTA's A100 trace replays 14 different graphs per ProfilerStep (1 to 20 ops each), five
    steps: each graph against its own replays, never against the others — no false alarm."""
    counted, _ = raw_launches(samples / "kineto_cupti_a100_cudagraph_rank0.json.gz")
    assert len(counted) == 70 and len(set(counted)) == 5 and counted[:14] * 5 == counted
    c = cli_json("report", str(samples / "kineto_cupti_a100_cudagraph_rank0.json.gz"))["runs"][0]["completeness"]
    assert c["status"] == "complete" and c["graph_launches"] == 70
    assert any("70 launches in 14 group(s)" in x for x in c["checks"])


@pytest.mark.parametrize("run_dir", H200_GRAPH_RUNS, ids=lambda p: p.name)
def test_h200_captures_hold_all_their_graph_work(run_dir):
    """Every replica capture replays one graph 32 times with the same ops each time; the copies
    capture replays three graphs (12, 24 and 12 ops) four times each."""
    trace = next(run_dir.glob("*.pt.trace.json.gz"))
    counted, _ = raw_launches(trace)
    if run_dir.name.startswith("copies-"):
        assert counted == [12] * 4 + [24] * 4 + [12] * 4
    else:
        assert len(counted) == 32 and len(set(counted)) == 1
    c = analysed(run_dir).completeness
    assert c.status == "complete" and c.graph_launches == len(counted)
    assert c.gpu_ops_per_launch == statistics.median(counted)


def test_h200_profiled_periods_carry_the_launch_calls():
    """Qwen3-Next TP4 baseline: under CUPTI each cudaGraphLaunch takes ~1.7 ms and the GPU waits
    for it; the profiled step period (7.59 ms) exceeds the same step timed without the profiler
    (timing.json, 5.47 ms) by about that. The report says step periods measure the profiler."""
    run_dir = TRACES / "replica-qwen3-next-80b-a3b-tp4-c16-cuda-graph-baseline-20261201T083031Z"
    _, durations = raw_launches(next(run_dir.glob("*.pt.trace.json.gz")))
    run = analysed(run_dir)
    o = run.launch_overhead
    durations.sort()
    assert o.call_median_ms == pytest.approx((durations[15] + durations[16]) / 2 / 1e3)
    assert o.launch_bound is True and 0.2 < o.share_of_step < 0.25
    gap = run.per_step.period_ms - run.timing.median_ms["baseline"]
    assert 0.7 * gap < o.gpu_idle_in_launch_ms < gap
    assert any(n.startswith("graph-launch calls hold up the GPU") for n in run.notes)
