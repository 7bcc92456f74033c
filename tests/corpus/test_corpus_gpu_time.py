"""The GPU's own time per step on the real corpus, and the A/Bs decided on it.

Expectations come from outside copyprof: each run's GPU busy time and graph-replay span from
corpus/truth/gpu_time.py (a standard-library reading of the trace), which copies each patch
removed from the truth files (corpus/truth/label.py), and what the runs are (run.json's A/B
group and arm: boots of identical code are an A/A). The estimate-vs-measured bands are the
issue's bars (within 35 %; the goal within 10 %), not copyprof's own figures.
"""
from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from copyprof.cli.main import cli
from tests.corpus.conftest import CORPUS, RUNS, model_path, run_path, truth

GPU_TRUTH = json.loads((CORPUS / "truth" / "gpu_time.json").read_text())
ABC = [r for r in RUNS if "jamba-8l-c16-graph-abc" in r["name"]]
ABBA = [r for r in RUNS if "olmo-hybrid-8l-c16-graph-abba" in r["name"]]
AA_QWEN = [r for r in RUNS if "qwen3-8l-c24-graph-aa" in r["name"]]
EAGER_AB = [r for r in RUNS if "jamba-8l-c16-eager-ab" in r["name"]]
OLMO_ROUND3 = [r for r in RUNS if "olmo-hybrid-8l-c16-graph-round3" in r["name"]]


def _report(*args: str) -> dict:
    res = CliRunner().invoke(cli, ["report", "--no-cache", *args, "--format", "json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def _arm(runs: list[dict], arm: str) -> list[str]:
    return [run_path(r) for r in runs if r["arm"] == arm]


def _measure(cmp: dict, name: str) -> dict:
    return next(m for m in cmp["measures"] if m["name"] == name)


@pytest.mark.parametrize("name", sorted(r["name"] for r in RUNS if r["mode"] == "graph"))
def test_gpu_busy_and_replay_span_equal_the_stdlib_reading(name, analysed):
    """Same ops per step (the step's correlated GPU work), same union: equal to float rounding
    (the stdlib reading sums microsecond floats, copyprof integer nanoseconds)."""
    from copyprof.analysis.rank_figures import per_step_medians

    ps = per_step_medians(analysed(name).rank)
    want = GPU_TRUTH[name]
    assert ps.gpu_busy_ms == pytest.approx(want["busy_ms"], abs=2e-5)
    assert ps.gpu_replay_span_ms == pytest.approx(want["replay_ms"], abs=2e-5)
    # busy is GPU time inside the step period: a fraction, and on these host-bound captures a small one
    assert ps.gpu_busy_fraction is not None and 0 < ps.gpu_busy_fraction < 0.5


def test_eager_runs_have_busy_time_and_no_replay_span(analysed):
    from copyprof.analysis.rank_figures import per_step_medians

    name = next(r["name"] for r in RUNS if r["name"].startswith("qwen3-8l-c24-eager"))
    ps = per_step_medians(analysed(name).rank)
    assert ps.gpu_busy_ms == pytest.approx(GPU_TRUTH[name]["busy_ms"], abs=2e-5)
    assert ps.gpu_replay_span_ms is None  # no graph was launched: there is no replay to span


def _removed(base: dict, cand: dict) -> dict[str, int]:
    """Copies per step by role that the candidate's truth lacks (what the patch removed)."""
    def roles(t: dict) -> dict[str, int]:
        return {role: sum(per_kind.values()) for role, per_kind in t["by_role"].items()}
    b, c = roles(base), roles(cand)
    return {role: n - c.get(role, 0) for role, n in b.items() if n - c.get(role, 0)}


@pytest.mark.parametrize("arm,removed", [("mamba-direct", {"post-projection": 6}), ("moe-alias", {"mlp-output": 4})])
def test_three_boots_per_arm_resolve_each_patch_on_gpu_time(arm, removed):
    """Jamba in graph mode, ABC CBA ABC: each patch removes copies that survive graph capture
    (truth), and the GPU-time measures resolve the saving with runs as the unit; the busy time
    lands within 10 % of the kernel estimate, the replay span of the kernel + dispatch-gap one."""
    base, cand = [r for r in ABC if r["arm"] == "baseline"], [r for r in ABC if r["arm"] == arm]
    assert len(base) == len(cand) == 3
    assert all(_removed(truth(b), truth(c)) == removed for b, c in zip(base, cand))
    d = _report("--baseline", *_arm(ABC, "baseline"), "--candidate", *_arm(ABC, arm), "--model", model_path(ABC[0]))
    cmp = d["comparison"]
    assert cmp["replication"] == "boots" and cmp["best_measure"] in ("GPU busy", "graph-replay span")
    busy, replay = _measure(cmp, "GPU busy"), _measure(cmp, "graph-replay span")
    assert busy["resolved"] and busy["ci95_ms"][0] > 0 and busy["n_baseline"] == 3
    assert busy["measured_ms"] == pytest.approx(cmp["estimate_ms"]["kernel"], rel=0.10)
    assert replay["resolved"] and replay["measured_ms"] == pytest.approx(cmp["estimate_ms"]["kernel_plus_gap"], rel=0.10)
    # the host-timed measures cannot see a few microseconds between boots
    assert not _measure(cmp, "step period")["resolved"] and not _measure(cmp, "GPU span")["resolved"]
    # the step is host-bound: the headline says the wall clock need not see it
    assert cmp["gpu_bound"]["gpu_bound"] is False and cmp["gpu_bound"]["busy_fraction"]["baseline"] < 0.5
    assert "host sets the step's pace" in d["headline"]


def test_the_abba_pair_lands_near_its_estimate_and_says_what_two_boots_cannot():
    """OLMo-hybrid's two boots per arm: the busy-time saving is within 35 % of the kernel
    estimate, but a t interval on 2 vs 2 run values has 2 degrees of freedom (t = 4.30), so it
    is not resolved alone; the report says how many runs would."""
    d = _report("--baseline", *_arm(ABBA, "baseline"), "--candidate", *_arm(ABBA, "direct"),
                "--model", model_path(ABBA[0]))
    cmp = d["comparison"]
    busy = _measure(cmp, "GPU busy")
    assert cmp["best_measure"] == "GPU busy"
    assert busy["measured_ms"] == pytest.approx(cmp["estimate_ms"]["kernel"], rel=0.35)
    assert busy["run_values_ms"]["baseline"] == pytest.approx(
        [GPU_TRUTH[r["name"]]["busy_ms"] for r in ABBA if r["arm"] == "baseline"], abs=2e-5)
    assert not busy["resolved"] and busy["runs_needed"] is not None and 2 < busy["runs_needed"] <= 5


def test_eager_three_boots_per_arm_resolve_the_mamba_patch_on_busy_time():
    """Jamba in eager mode, ABBAAB: the patch removes the six post-projection copies in every
    pair (truth); with no graph there is no replay span and no dispatch gap to win back, and the
    GPU busy time resolves the saving within 35 % of the kernel estimate (the issue's bar)."""
    base, cand = [r for r in EAGER_AB if r["arm"] == "baseline"], [r for r in EAGER_AB if r["arm"] == "mamba-direct"]
    assert len(base) == len(cand) == 3 and len({r["ab_group"] for r in EAGER_AB}) == 1
    assert all(_removed(truth(b), truth(c)) == {"post-projection": 6} for b, c in zip(base, cand))
    d = _report("--baseline", *_arm(EAGER_AB, "baseline"), "--candidate", *_arm(EAGER_AB, "mamba-direct"),
                "--model", model_path(EAGER_AB[0]))
    cmp = d["comparison"]
    busy = _measure(cmp, "GPU busy")
    assert cmp["best_measure"] == "GPU busy" and busy["resolved"] and busy["ci95_ms"][0] > 0
    assert busy["measured_ms"] == pytest.approx(cmp["estimate_ms"]["kernel"], rel=0.35)
    assert not any(m["name"] == "graph-replay span" for m in cmp["measures"])
    assert not any(m["resolved"] for m in cmp["measures"] if m["name"] != "GPU busy")
    assert busy["sessions"] == 0  # one `copyprof run`: nothing to block on


def test_olmo_boots_of_two_sessions_are_read_within_sessions():
    """The OLMo ABBA's four boots plus one AB round captured later on another machine, whose GPU
    ran both arms 0.4 % faster (stdlib truth). Pooled, that offset widens the interval past
    zero; read within sessions (arm + session) it cancels: 3 vs 3 runs resolve the saving, the
    busy time within 10 % of the kernel estimate, the replay span of the kernel + gap one."""
    assert len(OLMO_ROUND3) == 2 and len({r["ab_group"] for r in ABBA + OLMO_ROUND3}) == 2
    offset = [GPU_TRUTH[r["name"]]["busy_ms"] for r in OLMO_ROUND3 if r["arm"] == "baseline"][0] - \
        max(GPU_TRUTH[r["name"]]["busy_ms"] for r in ABBA if r["arm"] == "baseline")
    assert offset < -0.003  # the second machine: every baseline boot of the first was slower
    runs = ABBA + OLMO_ROUND3
    d = _report("--baseline", *_arm(runs, "baseline"), "--candidate", *_arm(runs, "direct"), "--model", model_path(ABBA[0]))
    cmp = d["comparison"]
    busy, replay = _measure(cmp, "GPU busy"), _measure(cmp, "graph-replay span")
    assert busy["sessions"] == 2 and "within 2 capture sessions" in busy["assumes"]
    assert busy["n_baseline"] == busy["n_candidate"] == 3
    assert busy["resolved"] and busy["measured_ms"] == pytest.approx(cmp["estimate_ms"]["kernel"], rel=0.10)
    assert replay["resolved"] and replay["measured_ms"] == pytest.approx(cmp["estimate_ms"]["kernel_plus_gap"], rel=0.10)
    assert not _measure(cmp, "step period")["resolved"]


@pytest.mark.parametrize("group", ["qwen3 A/A", "jamba baselines"])
def test_boots_of_identical_code_are_never_a_change_on_any_measure(group):
    """Boots of one arm (same code, same A/B group) compared as an A/B: no measure, GPU time
    included, may resolve a difference, and the GPU-time ones sit within a microsecond."""
    runs = AA_QWEN if group == "qwen3 A/A" else [r for r in ABC if r["arm"] == "baseline"]
    paths = [run_path(r) for r in runs]
    d = _report("--baseline", *paths[:1], "--candidate", *paths[1:], "--model", model_path(runs[0]))
    cmp = d["comparison"]
    assert not any(m["resolved"] for m in cmp["measures"]), [(m["name"], m["verdict"]) for m in cmp["measures"]]
    assert abs(_measure(cmp, "GPU busy")["measured_ms"]) < 1e-3
    aa = _report("--aa", *paths, "--model", model_path(runs[0]))
    assert aa["comparison"]["is_aa"] and not any(m["resolved"] for m in aa["comparison"]["measures"])


def test_gpu_time_rows_in_csv_and_json_of_every_run():
    name = ABC[0]["name"]
    res = CliRunner().invoke(cli, ["report", "--no-cache", run_path(ABC[0]), "--format", "csv"], catch_exceptions=False)
    rows = {(r.split(",")[1]) for r in res.output.splitlines() if r.startswith("per_step,")}
    assert {"gpu_busy", "gpu_replay_span", "gpu_busy_fraction"} <= rows
    ps = _report(run_path(ABC[0]))["runs"][0]["per_step"]
    assert ps["gpu_busy_ms"] == pytest.approx(GPU_TRUTH[name]["busy_ms"], abs=2e-5)
    assert math.isclose(ps["gpu_busy_fraction"], ps["gpu_busy_ms"] / ps["period_ms"], rel_tol=0.5)
