"""Round trip through the report on generated Kimi-K3 traces: a regression test of summing and
step splitting, NOT evidence that copyprof agrees with a real MI355X trace.

How it is built: tests/synth/kimi.py back-solves each copy's duration from the figures published
for the TP8 MI355X profile (vLLM #50847 review: 93 post-projection copies per step = 69 KDA + 24
MLA, 0.495 ms/step at C16 and 0.563 ms at C24, MLA 0.13 ms = 0.39 % of a 32.82 ms step at C16
and 0.15 ms = 0.40 % of 35.98 ms at C24), writes them into Kineto and rocprofv3 CSV files, and
this test checks that the report sums them back to the same figures. What can fail here: step
splitting (annotation projection, idle-gap segmentation, the eager prefill step excluded), the
per-step census and its site classification (69 KDA placement copies, metadata copies and
same-size all-reduce staging copies that must NOT be counted), and the summing of the estimate.
No public Kimi-K3 MI355X trace exists to check the figures against; the evidence from real
traces is the H200 captures (tests/analysis/test_h200_traces.py) and the public samples
(tests/readers/test_public_samples.py).
"""
from __future__ import annotations

import pytest

from tests.conftest import cli_json
from tests.synth.kimi import C16, C24, write_kineto, write_rocprofv3_csv

CONTRACT_RUN = {"path", "format", "flavour", "ranks", "layout", "steps", "per_step", "estimate"}
CONTRACT_PER_STEP = {"tokens", "period_ms", "gpu_span_ms", "copies", "other", "post_proj", "post_proj_ms", "other_ms"}
CONTRACT_ESTIMATE = {"patch", "scope", "removed_per_step", "removable_ms", "removable_pct", "period_with_patch_ms"}


def _check(run, profile, mla_ms_built_from, pct_built_from):
    assert CONTRACT_RUN <= set(run) and CONTRACT_PER_STEP <= set(run["per_step"])
    ps = run["per_step"]
    assert ps["post_proj"] == {"mla": 24, "kda": 69, "total": 93}
    assert ps["tokens"] == profile.tokens
    assert run["steps"]["decode"] == 12 and run["steps"]["excluded"] == 1  # the eager prefill step
    # 69 placement copies + 3 metadata copies per step are other sites, never removable.
    assert ps["other"] == 72 and ps["copies"] == 165
    est = {e["scope"]: e for e in run["estimate"]}
    assert all(CONTRACT_ESTIMATE <= set(e) for e in est.values())
    assert est["mla"]["removed_per_step"] == 24 and est["kda"]["removed_per_step"] == 69
    assert est["all"]["removed_per_step"] == 93
    # Summed back: the figures the durations were solved from, at the precision they were published with.
    assert round(est["mla"]["removable_ms"], 2) == mla_ms_built_from
    assert round(est["mla"]["removable_pct"], 2) == pct_built_from
    assert est["all"]["removable_ms"] == pytest.approx(0.495 if profile is C16 else 0.563, abs=0.003)
    assert ps["period_ms"] == pytest.approx(profile.period_ms, rel=0.002)
    assert run["attribution"]["status"] == "ok"
    assert "93/93" in run["attribution"]["message"]


@pytest.mark.parametrize("profile,mla_ms,pct", [(C16, 0.13, 0.39), (C24, 0.15, 0.40)])
def test_round_trip_kineto_rocprofiler_sdk(tmp_path, profile, mla_ms, pct):
    path = write_kineto(tmp_path / "rank0.json.gz", profile)
    out = cli_json("report", str(path), "--model", "kimi-k3")
    assert out["comparison"] is None
    [run] = out["runs"]
    assert run["flavour"] == "rocprofiler-sdk" and run["steps"]["rule"] == "annotation (vllm)"
    _check(run, profile, mla_ms, pct)


@pytest.mark.parametrize("profile,mla_ms,pct", [(C16, 0.13, 0.39), (C24, 0.15, 0.40)])
def test_round_trip_rocprofv3_csv_without_markers(tmp_path, profile, mla_ms, pct):
    # No markers, no API rows: steps from idle gaps, N from the blit grid (work-items).
    directory = write_rocprofv3_csv(tmp_path / "rocprof", profile)
    [run] = cli_json("report", str(directory), "--model", "kimi-k3")["runs"]
    assert run["format"] == "rocprofv3-csv" and run["steps"]["rule"] == "idle-gap"
    _check(run, profile, mla_ms, pct)


def test_all_steps_labels_staging_copies(tmp_path):
    # With --all-steps the eager prefill step is counted too; its same-size copies that sit
    # right before an all-reduce are staging copies, not projections.
    path = write_kineto(tmp_path / "rank0.json.gz", C16, steps=3)
    [run] = cli_json("report", str(path), "--model", "kimi-k3", "--all-steps")["runs"]
    sites = {s["site"] for s in run["sites"]}
    assert "allreduce-staging" in sites
    assert run["steps"]["decode"] == 4 and run["steps"]["excluded"] == 0


def test_without_layout_the_census_runs_and_says_why(tmp_path):
    path = write_kineto(tmp_path / "rank0.json.gz", C16, steps=3)
    [run] = cli_json("report", str(path))["runs"]
    assert run["layout"] is None and run["estimate"] == []
    assert run["per_step"]["copies"] == 165
    assert any("needs a model layout" in n for n in run["notes"])


def test_wrong_layout_is_not_forced(tmp_path):
    # Kimi-Linear has 27 layers; the trace has 93 per step: say so, attribute nothing.
    path = write_kineto(tmp_path / "rank0.json.gz", C16, steps=3)
    [run] = cli_json("report", str(path), "--model", "kimi-linear-48b-a3b")["runs"]
    assert run["per_step"]["post_proj"]["total"] == 0
    assert run["attribution"]["status"] == "not-attributed"
