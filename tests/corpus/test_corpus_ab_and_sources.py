"""The corpus's A/B pairs and graph/eager companions, through `copyprof report` as a user runs it.

Expected values are the truth files' (corpus/truth/): which copies each arm has, and the
eager capture's issuing frame of each copy at the same (role, layer)."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from click.testing import CliRunner

from copyprof.cli.main import cli
from tests.corpus.conftest import CORPUS, model_path, run_named, run_path, truth


def _report(*args: str) -> dict:
    res = CliRunner().invoke(cli, ["report", *args, "--format", "json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


PAIRS = [  # (baseline, candidate): what the truth says the patch removed, per kind
    ("kimi-linear-12l-c16-eager-baseline", "kimi-linear-12l-c16-eager-direct"),
    ("olmo-hybrid-8l-c16-eager-baseline", "olmo-hybrid-8l-c16-eager-direct"),
    ("olmo-hybrid-8l-c16-graph-baseline", "olmo-hybrid-8l-c16-graph-direct"),
    ("olmo-hybrid-8l-c4-eager-baseline", "olmo-hybrid-8l-c4-eager-direct"),
    ("kimi-linear-12l-c16-graph-baseline", "kimi-linear-12l-c16-graph-direct"),
]


@pytest.mark.parametrize("base,cand", PAIRS)
def test_removed_post_projection_copies_are_the_truths(base, cand):
    b, c = run_named(base), run_named(cand)
    tb, tc = truth(b), truth(c)
    gone = Counter(tb["by_role"].get("post-projection", {})) - Counter(tc["by_role"].get("post-projection", {}))
    d = _report(run_path(b), run_path(c), "--model", model_path(b))
    removed = Counter()
    for s in d["comparison"]["removed_sites"]:
        removed[s["layer_kind"]] += s["per_step"]
    assert removed == gone
    if not gone:  # Kimi graph mode: Inductor had removed the copies already; the arms copy the same
        assert d["comparison"]["scope"] is None
        assert "changed no copy" in d["comparison"]["scope_text"]
        assert d["comparison"]["site_changes"] == []


COMPANIONS = [("kimi-linear-12l-c16-graph-baseline", "kimi-linear-12l-c16-eager-baseline"),
              ("olmo-hybrid-8l-c16-graph-baseline", "olmo-hybrid-8l-c16-eager-baseline"),
              ("jamba-8l-c12-graph-baseline", "jamba-8l-c12-eager-baseline"),
              ("deepseek-v3-6l-c8-graph-baseline", "deepseek-v3-6l-c8-eager-baseline")]


@pytest.mark.parametrize("graph,eager", COMPANIONS)
def test_graph_copies_take_the_eager_truths_sources(graph, eager):
    """Each graph copy in a layer takes the eager truth's frame at its (role, layer); copies the
    eager step does not make (OLMo's Inductor copies) stay without one, and the rate says so."""
    g, e = run_named(graph), run_named(eager)
    eager_at = {(c["role"], c["layer"]): c["source"] for c in truth(e)["copies"] if c["layer"]}
    in_layers = [c for c in truth(g)["copies"] if c["layer"]]
    expected = Counter(eager_at.get((c["role"], c["layer"])) for c in in_layers)
    d = _report(run_path(g), "--sources", run_path(e), "--model", model_path(g))
    run = d["runs"][0]
    got = Counter()
    for s in run["sites"]:
        if s["role"] != "metadata":
            got[s["source"]] += round(s["per_step"])
    assert got == expected
    matched = sum(v for k, v in expected.items() if k is not None)
    assert run["source_match"]["rate"] == pytest.approx(matched / len(in_layers))


@pytest.mark.parametrize("part,runner,mode,graphs", [
    ("kimi-linear-12l-c16-graph-baseline", "v1", "VLLM_COMPILE", "FULL_AND_PIECEWISE"),
    ("kimi-linear-12l-c16-eager-baseline", "v1", "NONE", "NONE"),
    ("qwen3-8l-c24-graph-baseline", "v2", "VLLM_COMPILE", "FULL_AND_PIECEWISE"),
    ("qwen3-8l-c24-eager-baseline", "v2", "NONE", "NONE"),
])
def test_the_report_says_what_vllm_chose(part, runner, mode, graphs):
    """Read off each server.log by eye: MoE/hybrid models ran the V1 runner, dense Qwen3 Model
    Runner V2 ("Using V2 Model Runner"); graph runs compiled by Inductor, eager runs not."""
    r = run_named(part)
    log = (CORPUS / "runs" / r["name"] / "server.log").read_text()
    assert ("Using V2 Model Runner" in log) == (runner == "v2")
    assert f"<CompilationMode.{mode}:" in log and f"'cudagraph_mode': <CUDAGraphMode.{graphs}:" in log
    setup = _report(run_path(r), "--model", model_path(r))["runs"][0]["setup"]
    assert (setup["model_runner"], setup["compilation"], setup["cudagraph_mode"]) == (runner, mode, graphs)
    assert setup["compiled_by"] == ("inductor" if mode != "NONE" else None)


def test_a_compiled_capture_without_post_projection_copies_says_so_first():
    r = run_named("kimi-linear-12l-c16-graph-baseline")
    head = _report(run_path(r), "--model", model_path(r))["headline"]
    assert "no post-projection copies in this capture" in head and "nothing for a direct-return patch" in head
    assert "inductor" in head
