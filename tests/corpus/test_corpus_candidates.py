"""Every removable copy group of the real captures, against a stdlib reading of the traces.

Expected values: corpus/truth/extract.py reads each trace without copyprof and gives every
copy's duration; the truth files give its role and issuing function. A group is the copies of
one role from one function (eager), so its time per step is the sum of those durations in a
step, and copyprof's estimate is the median of that over the steps."""
from __future__ import annotations

import json
import sys
from collections import defaultdict

import numpy as np
import pytest
from click.testing import CliRunner

from copyprof.cli.main import cli
from tests.corpus.conftest import CORPUS, model_path, run_named, run_path, truth

sys.path.insert(0, str(CORPUS / "truth"))
import extract  # noqa: E402  (the corpus's stdlib reader)

EAGER = ["kimi-linear-12l-c16-eager-baseline", "olmo-hybrid-8l-c16-eager-baseline", "jamba-8l-c12-eager-baseline",
         "deepseek-v3-6l-c8-eager-baseline"]


def _report(*args: str) -> dict:
    res = CliRunner().invoke(cli, ["report", *args, "--format", "json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def _function(frame: str) -> str:
    path, _, rest = frame.partition("(")
    return f"{path}: {rest.split('): ', 1)[1]}"


@pytest.mark.parametrize("part", EAGER)
def test_groups_their_estimates_and_ranking_are_the_truths(part):
    r = run_named(part)
    t = truth(r)
    raw = extract.extract(extract.load(run_path(r)))
    role_of = {_function(c["source"]): c["role"] for c in t["copies"]}  # one role per function here
    per_group: dict[str, list[float]] = defaultdict(list)
    for step in raw["copies"]:
        sums: dict[str, float] = defaultdict(float)
        for c in step:
            sums[_function(c["frames"][0])] += c["dur_us"] / 1e3
        for k, v in sums.items():
            per_group[k].append(v)
    want = {(role_of[f], f): float(np.median(v)) for f, v in per_group.items()}
    got = {(c["role"], c["source"] and _function(c["source"])): c for c in
           _report(run_path(r), "--model", model_path(r))["runs"][0]["candidates"] if c["form"] == "copy"}
    assert set(got) == set(want)
    for key, ms in want.items():
        assert got[key]["removable_ms"] == pytest.approx(ms, rel=1e-3, abs=2e-6), key
        assert got[key]["removable_with_gap_ms"] == got[key]["removable_ms"]  # eager: no gap is freed
        n = sum(1 for c in t["copies"] if c["role"] == key[0] and _function(c["source"]) == key[1])
        assert got[key]["per_step"] == n
    order = [k for k, _ in sorted(want.items(), key=lambda kv: -kv[1])]
    ranked = [k for k in got if k in want]
    assert ranked == order


def test_graph_replay_counts_the_dispatch_gap_only_for_replayed_copies():
    r = run_named("kimi-linear-12l-c16-graph-baseline")
    cands = _report(run_path(r), "--model", model_path(r))["runs"][0]["candidates"]
    by_role = defaultdict(list)
    for c in cands:
        by_role[c["role"]].append(c)
    assert [c["per_step"] for c in by_role["mlp-output"]] == [11] and [c["per_step"] for c in by_role["placement"]] == [9]
    for c in by_role["mlp-output"] + by_role["placement"]:  # inside the CUDA graph
        assert c["gap_counts"] and c["removable_with_gap_ms"] > c["removable_ms"]
    for c in by_role["metadata"]:  # copied before the graph launch: the GPU waits for the launch anyway
        assert not c["gap_counts"] and c["removable_with_gap_ms"] == c["removable_ms"]
    assert cands[0]["role"] == "mlp-output", "the MoE output copies save the most in this capture"


def test_an_eager_ab_names_each_group_it_removed():
    for base, cand, gone in (("kimi-linear-12l-c16-eager-baseline", "kimi-linear-12l-c16-eager-direct",
                              {"vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py: forward": 9,
                               "vllm/model_executor/models/kimi_linear.py: forward": 3}),
                             ("olmo-hybrid-8l-c16-eager-baseline", "olmo-hybrid-8l-c16-eager-direct",
                              {"vllm/model_executor/layers/mamba/gdn/olmo_gdn_linear_attn.py: _full_forward": 6})):
        b, c = run_named(base), run_named(cand)
        cmp = _report(run_path(b), run_path(c), "--model", model_path(b))["comparison"]
        changed = {_function(g["source"]): g for g in cmp["group_changes"]}
        assert {k: g["baseline_per_step"] for k, g in changed.items()} == gone
        assert all(g["status"] == "gone" and g["role"] == "post-projection" and g["candidate_per_step"] == 0
                   for g in changed.values())
