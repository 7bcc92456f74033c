"""Graph launches whose GPU work the trace lost, and launch calls that hold up the GPU.

Generated traces (tests/synth/graph_replay.py) in the shapes the reports describe, with the
ground truth known: all kernels under ``hipGraphLaunch`` lost (AMD-AGI/Hyperloom#747), some
lost (sgl-project/sglang#35390: 448 of 512 per replay; ROCm/rocm-systems#4361: a race, so the
loss varies), none lost; ``hipGraphLaunch`` inflated by the profiler (ROCm/ATOM#432: ~270 µs
more per launch). Every output format must say "lower bound" where work is missing and no
format may present the count as the count.
"""
from __future__ import annotations

import csv
import gzip
import io
import json

import pytest

from tests.synth.graph_replay import COPY, GraphTrace, drop_all, drop_graph_kernels, drop_one_in_eight
from tests.synth.kimi import C16, write_kineto

WORDING = ("GPU work under graph launches is missing from this trace (known ROCTracer defect, ROCm < 7.2.2 or a "
           "torch wheel vendoring it): copy counts are a lower bound")


def report(*paths_and_args, fmt: str = "json") -> str:
    """``copyprof report ... --format FMT --no-cache`` through the CLI, in this process (click's
    runner: the command a user types, without an interpreter start per call)."""
    from click.testing import CliRunner

    from copyprof.cli.main import cli

    res = CliRunner().invoke(cli, ["report", *map(str, paths_and_args), "--format", fmt, "--no-cache"])
    assert res.exit_code == 0, res.output
    return res.stdout


def run_json(path, *args: str) -> dict:
    return json.loads(report(path, *args))


def test_a_trace_with_every_graph_kernel_reports_complete(tmp_path):
    g = GraphTrace()
    out = run_json(g.write(tmp_path / "t.json.gz"))
    run = out["runs"][0]
    c = run["completeness"]
    assert c["status"] == "complete" and c["graph_launches"] == 8 and c["gpu_ops_per_launch"] == 40
    assert c["launches_without_gpu_work"] == c["launches_short"] == c["missing_gpu_ops"] == 0
    assert run["per_step"]["copies"] == g.copies_per_step == 8 and run["per_step"]["lower_bound"] is False
    assert not run["warnings"] and "LOWER BOUND" not in out["headline"] and "at least" not in out["headline"]


def test_all_graph_kernels_lost_is_a_lower_bound_in_every_format(tmp_path):
    """Hyperloom#747's shape: hipGraphLaunch on the CPU, no kernel on the GPU."""
    path = GraphTrace(drop=drop_all).write(tmp_path / "t.json.gz")
    run = run_json(path)["runs"][0]
    c = run["completeness"]
    assert c["status"] == "lower-bound" and c["launches_without_gpu_work"] == 8
    assert run["per_step"]["lower_bound"] is True
    assert any(w.startswith(WORDING) for w in run["warnings"])
    table = report(path, fmt="table")
    assert WORDING in table and "LOWER BOUND" in table.splitlines()[0]
    assert "no device-to-device copy seen" in table.splitlines()[0]  # not "at least 0 copies"
    markdown = report(path, fmt="markdown")
    assert f"- warning: {WORDING}" in markdown and "LOWER BOUND" in markdown
    rows = list(csv.DictReader(io.StringIO(report(path, fmt="csv"))))
    got = {(r["section"], r["name"]): r["value"] for r in rows}
    assert got[("completeness", "status")] == "lower-bound" and got[("completeness", "counts_are_lower_bound")] == "true"
    assert any(r["section"] == "warning" and r["value"].startswith(WORDING) for r in rows)
    assert "LOWER BOUND" in got[("headline", "headline")]


def test_loss_that_varies_between_replays_is_found_and_counted(tmp_path):
    """A race (rocm-systems#4361) loses a different number of kernels per replay: replay r
    loses its first r kernels, so 7 of 8 replays are short by 1 + 2 + ... + 7 = 28 ops."""
    g = GraphTrace(drop=lambda replay, index: index < replay)
    path = g.write(tmp_path / "t.json.gz")
    out = run_json(path)
    c = out["runs"][0]["completeness"]
    assert c["status"] == "lower-bound" and c["launches_short"] == 7 and c["missing_gpu_ops"] == 28
    assert c["steps_flagged"] == 7
    assert out["headline"].startswith(f"{path.name}: at least ") and "LOWER BOUND" in out["headline"]
    table = report(path, fmt="table")
    assert "Copies per decode step (median over steps) — LOWER BOUND" in table and "≥ " in table


def test_the_same_loss_in_every_replay_needs_a_reference(tmp_path):
    """sglang#35390's 448 of 512 per replay: every replay runs 35 of its 40 ops here. The
    replays agree, so only a reference tells: the graph's capture, an eager step of the same
    run, or graph node ids (kineto#1567). Without one the trace reads complete, and the checks
    say what could be compared."""
    plain = run_json(GraphTrace(drop=drop_one_in_eight).write(tmp_path / "plain.json.gz"))["runs"][0]
    assert plain["completeness"]["status"] == "complete"
    assert any("0 ran fewer GPU ops" in c for c in plain["completeness"]["checks"])
    for name, g in {"capture": GraphTrace(drop=drop_one_in_eight, capture=True),
                    "eager": GraphTrace(drop=drop_one_in_eight, eager_steps=3),
                    "nodes": GraphTrace(drop=drop_one_in_eight, node_ids=True)}.items():
        c = run_json(g.write(tmp_path / f"{name}.json.gz"))["runs"][0]["completeness"]
        assert c["status"] == "lower-bound", name
        assert c["missing_gpu_ops"] == 8 * 5, name  # 5 of 40 ops lost in each of the 8 replays


def test_graph_node_ids_give_each_copy_an_identity_across_replays(tmp_path):
    """kineto#1567's args: graph id 7, node id = the dispatch's ordinal. Copies are nodes 4, 9,
    ..., 39 in every replay; one replay that lost node 9 makes the site unstable and is short."""
    whole = run_json(GraphTrace(node_ids=True).write(tmp_path / "a.json.gz"))["runs"][0]
    assert whole["graph_nodes"]["stable_sites"] == whole["graph_nodes"]["sites"] == 1
    assert whole["sites"][0]["graph_nodes"] == [4, 9, 14, 19, 24, 29, 34, 39]
    assert whole["sites"][0]["graph_node_stable"] is True
    lost = run_json(GraphTrace(node_ids=True, drop=lambda r, i: r == 2 and i == 9).write(tmp_path / "b.json.gz"))
    run = lost["runs"][0]
    assert run["sites"][0]["graph_node_stable"] is False
    assert run["completeness"]["launches_short"] == 1 and run["completeness"]["missing_gpu_ops"] == 1


def test_the_lower_bound_reaches_the_layer_census_and_the_estimate(tmp_path):
    """The Kimi-K3 decode trace (93 post-projection copies per step in graph replay) with one
    replay in three losing every eighth graph kernel."""
    path = drop_graph_kernels(write_kineto(tmp_path / "k3.json.gz", C16, steps=12),
                              lambda replay, index: replay % 3 == 1 and index % 8 == 0)
    out = run_json(path, "--model", "kimi-k3")
    run = out["runs"][0]
    assert run["completeness"]["status"] == "lower-bound" and run["completeness"]["launches_short"] == 4
    assert out["headline"].startswith(f"{path.name}: at least 93 post-projection copies")
    table = report(path, "--model", "kimi-k3", fmt="table")
    assert "≥ 93" in table and "removable cost per step — LOWER BOUND" in table


def test_inflated_graph_launches_make_step_periods_measure_the_profiler(tmp_path):
    """A 300 µs hipGraphLaunch (ATOM#432's regression) while the GPU waits: per step the GPU
    idles 300 − 6 µs inside the call (the input-preparation kernel runs for 6 µs of it) of a
    732 µs period (launch at +10, 40 graph kernels of 9 µs from +312, 60 µs of host after)."""
    path = GraphTrace(launch_us=300.0).write(tmp_path / "slow.json.gz")
    out = run_json(path)["runs"][0]["launch_overhead"]
    assert out["launch_bound"] is True and out["call_median_ms"] == pytest.approx(0.300)
    assert out["gpu_idle_in_launch_ms"] == pytest.approx(0.294) and out["share_of_step"] == pytest.approx(294 / 732)
    said = "graph-launch calls hold up the GPU: it idles 0.294 ms of a 0.732 ms step (40%"
    # how to read the step periods, not a defect of the trace: a note (the A/B's caveat says it too)
    assert f"note: {said}" in report(path, fmt="table") and f"- {said}" in report(path, fmt="markdown")
    rows = {(r["section"], r["name"]): r["value"] for r in csv.DictReader(io.StringIO(report(path, fmt="csv")))}
    assert rows[("launch_overhead", "launch_bound")] == "true"
    assert float(rows[("launch_overhead", "share_of_step")]) == pytest.approx(100 * 294 / 732)
    healthy = run_json(GraphTrace(launch_us=20.0).write(tmp_path / "ok.json.gz"))["runs"][0]
    assert healthy["launch_overhead"]["launch_bound"] is False  # 14 of 452 µs: 3 %
    assert healthy["launch_overhead"]["share_of_step"] == pytest.approx(14 / 452)
    assert not healthy["warnings"]


def test_an_ab_of_launch_bound_arms_does_not_rest_on_the_step_period(tmp_path):
    base = GraphTrace(launch_us=300.0).write(tmp_path / "base.json.gz")
    cand = GraphTrace(launch_us=300.0, copies=False).write(tmp_path / "cand.json.gz")
    out = json.loads(report(base, cand))
    cmp = out["comparison"]
    assert cmp["best_measure"] != "step period"
    period = next(m for m in cmp["measures"] if m["name"] == "step period")
    assert "Caveat: step periods measure the profiler here" in period["verdict"]
    assert all(r["launch_overhead"]["launch_bound"] for r in out["runs"])


def test_best_passes_over_a_step_period_that_measures_the_profiler():
    from copyprof.analysis.ab.measures import best
    from copyprof.analysis.ab.results import Measure

    def m(name: str, mde: float) -> Measure:
        return Measure(name=name, unit="steps", measured_ms=0.1, ci95_ms=[0.0, 0.2], mde_ms=mde, n_baseline=9,
                       n_candidate=9, key="consistent", resolved=True, verdict="")

    measures = [m("GPU span", 0.05), m("step period", 0.01)]
    assert best(measures).name == "step period"  # the finest resolution wins when nothing is launch-bound
    assert best(measures, frozenset({"step period"})).name == "GPU span"
    assert best([m("step period", 0.01)], frozenset({"step period"})).name == "step period"  # nothing else measured


@pytest.mark.parametrize("name, cls", [
    ("__amd_rocclr_copyBufferBatch.kd", "d2d"),  # rocm-systems blitcl.cpp (hipMemcpyBatchAsync D2D)
    ("__amd_rocclr_copyBufferBatch", "d2d"),  # rocprofv3 CSV formats names without .kd
    ("__amd_rocclr_copyBufferBatchIndirect.kd", "d2d"),  # rocm-systems#10118 (unverified in source)
    ("__amd_copyBufferBatch", "d2d"),  # llvm-project#2556 (device-library name)
    ("__amd_rocclr_copyBufferAligned.kd", "d2d"),
    ("__amd_rocclr_copyBufferBatchX", ""),  # no prefix matches: nothing counted by accident
    ("__amd_rocclr_fillBufferAligned.kd", "memset"),
])
def test_rocm_copy_kernels_are_classified(name, cls):
    from copyprof.taxonomy.copies import kernel_copy_class
    assert kernel_copy_class(name) == cls


@pytest.mark.parametrize("copy_name, memcpy_form", [("__amd_rocclr_copyBufferBatch.kd", False),
                                                    ("__amd_rocclr_copyBufferBatchIndirect.kd", False),
                                                    ("__amd_copyBufferBatch", False),
                                                    (COPY, True)])
def test_new_copy_kernels_and_the_gpu_memcpy_form_are_counted(tmp_path, copy_name, memcpy_form):
    """Each of the 8 copies per replay as a batch blit kernel, or as rocprofiler-sdk kineto's
    ``cat: gpu_memcpy`` ``Memcpy DtoD (Device -> Device)`` record; graph replays that lost
    every fifth op stay a lower bound whatever the copy's form."""
    g = GraphTrace(copy_name=copy_name, memcpy_form=memcpy_form)
    run = run_json(g.write(tmp_path / "t.json.gz"))["runs"][0]
    assert run["per_step"]["copies"] == 8 and run["completeness"]["status"] == "complete"
    assert run["sites"][0]["bytes_src"] in ("event", "none")  # a batch blit's grid says nothing of its size
    lost = GraphTrace(copy_name=copy_name, memcpy_form=memcpy_form, drop=lambda r, i: r % 2 and i % 5 == 4)
    out = run_json(lost.write(tmp_path / "lost.json.gz"))
    assert out["runs"][0]["completeness"]["status"] == "lower-bound" and "LOWER BOUND" in out["headline"]


def test_a_window_that_closes_inside_the_last_replay_is_not_lost_work(tmp_path):
    """The profiler stops while the last replay runs: its later kernels and everything after are
    not in the file. That replay is short for a reason the trace shows (nothing follows it), so
    it is not counted as lost; the same cut at an earlier replay would be."""
    doc = GraphTrace().build()
    last_launch = max(e["ts"] for e in doc["traceEvents"] if e["name"] == "hipGraphLaunch")
    cut = last_launch + 20 + 2 + 9 * 25  # 25 of the last replay's 40 kernels started before the window closed
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["ts"] < cut]
    path = tmp_path / "cut.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    c = run_json(path)["runs"][0]["completeness"]
    assert c["status"] == "complete" and c["launches_short"] == 0
    assert "the last launch is not counted as short: the trace ends inside its replay" in c["checks"]


def test_a_rank_that_lost_graph_work_makes_the_run_a_lower_bound(tmp_path):
    """Rank 0 (the headline rank) kept its graph kernels, rank 1 lost all of them: the run is
    a lower bound, the warning names rank 1, and its per-rank counts read as floors."""
    run_dir = tmp_path / "tp2"
    run_dir.mkdir()
    for rank, drop in ((0, None), (1, drop_all)):
        doc = (GraphTrace(drop=drop) if drop else GraphTrace()).build()
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
        (run_dir / f"rank{rank}.123.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    out = run_json(run_dir)
    run = out["runs"][0]
    assert run["ranks"] == [0, 1] and run["completeness"]["status"] == "lower-bound"
    assert run["per_step"]["lower_bound"] is False and run["by_rank"]["1"]["lower_bound"] is True
    assert any(w.startswith(f"rank 1: {WORDING}") for w in run["warnings"])
    assert "LOWER BOUND" in out["headline"]
    assert "≥ 0" in report(run_dir, "--by-rank", fmt="table")


def test_an_ab_names_the_arm_whose_counts_are_floors(tmp_path):
    """A candidate whose trace lost graph kernels may seem to have removed copies it only lost."""
    base = GraphTrace().write(tmp_path / "base.json.gz")
    cand = GraphTrace(drop=lambda replay, index: index < replay).write(tmp_path / "cand.json.gz")
    out = json.loads(report(base, cand, "--labels", "main,pr"))
    assert out["comparison"]["lower_bound_runs"] == [1]
    assert "LOWER BOUND: GPU work under graph launches is missing from pr's trace" in out["headline"]
    table = report(base, cand, "--labels", "main,pr", fmt="table")
    assert "pr: LOWER BOUND: GPU work under graph launches is missing from its trace" in table
