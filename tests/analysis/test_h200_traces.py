"""The shipped H200 replica captures (traces/README.md says how they were made).

Their copies are known by construction and were counted independently by reading the files
(the census of that time, tables in traces/README.md; now `copyprof inspect --steps`): per step, Kimi-K3 TP8 has 93
post-projection copies (24 MLA + 69 KDA) of [N, 7168] bf16 plus 69 KDA placement copies of
[N, 12*128] bf16; Kimi-Linear TP8 has 27 (7 MLA + 20 KDA) of [N, 2304] plus 20 placement
copies of [N, 4*128]; candidates have no post-projection copy. In graph replay every copy is a
`memcpy32_post` kernel (bytes from the grid), in the eager capture a `Memcpy DtoD` record.
"""
from __future__ import annotations

import pytest

from tests.conftest import REPO, cli_json

TRACES = REPO / "traces"


def _run(prefix: str) -> str:
    found = sorted(TRACES.glob(prefix + "*" if prefix.endswith(tuple("0123456789")) else prefix + "-2*"))
    if not found:
        pytest.fail(f"shipped trace {prefix} is missing from traces/")
    return str(found[0])


@pytest.mark.parametrize("conc,bytes_per_copy", [(16, 229376), (24, 344064)])
def test_kimi_k3_pair(conc, bytes_per_copy):
    base = _run(f"replica-kimi-k3-tp8-c{conc}-cuda-graph-baseline")
    cand = _run(f"replica-kimi-k3-tp8-c{conc}-cuda-graph-candidate")
    out = cli_json("report", base, cand, "--model", "kimi-k3")
    b, c = out["runs"]
    assert b["per_step"]["post_proj"] == {"mla": 24, "kda": 69, "total": 93}
    assert b["per_step"]["tokens"] == conc and b["steps"]["decode"] == 32
    assert b["per_step"]["other"] == 69  # KDA placement copies stay
    assert "93/93" not in b["attribution"]["message"]  # replica kernels carry no anchor names
    assert b["attribution"]["status"] == "ok"
    assert c["per_step"]["post_proj"]["total"] == 0 and c["per_step"]["copies"] == 69
    cmp = out["comparison"]
    assert cmp["scope"] == "all"
    assert sorted((s["layer_kind"], s["per_step"], s["bytes"]) for s in cmp["removed_sites"]) == [
        ("kda", 69, bytes_per_copy), ("mla", 24, bytes_per_copy)]
    # Calibration: the interleaved timing resolves the saving; the kernel + gap
    # estimate is the closer one in every shipped pair (measured: -2 % to +10.6 %), kernel time
    # alone underestimates by ~20-30 %.
    timing = cmp["timing"]
    assert timing["ci95_ms"][0] > 0
    est = timing["estimator"]
    assert est["supported"] == "kernel_plus_gap"
    assert abs(est["estimates"]["kernel_plus_gap"]["rel_error"]) < abs(est["estimates"]["kernel"]["rel_error"])


def test_kimi_linear_graph_and_eager():
    graph = cli_json("report", _run("replica-kimi-linear-48b-a3b-tp8-c16-cuda-graph-baseline"),
                     "--model", "kimi-linear-48b-a3b")["runs"][0]
    assert graph["per_step"]["post_proj"] == {"mla": 7, "kda": 20, "total": 27}
    assert graph["per_step"]["other"] == 20
    sites = {s["site"]: s for s in graph["sites"]}
    assert sites["mla"]["bytes"] == 16 * 2304 * 2 and sites["mla"]["bytes_src"] == "grid"
    eager = cli_json("report", _run("replica-kimi-linear-48b-a3b-tp8-c16-eager-baseline"),
                     "--model", "kimi-linear-48b-a3b")["runs"][0]
    assert eager["per_step"]["post_proj"] == {"mla": 7, "kda": 20, "total": 27}
    assert eager["steps"]["decode"] == 8
    sites = {s["site"]: s for s in eager["sites"]}
    assert sites["kda"]["bytes_src"] == "event"  # eager: `Memcpy DtoD` records carry bytes


def test_inspect_shows_both_copy_forms():
    graph = cli_json("inspect", _run("replica-kimi-k3-tp8-c16-cuda-graph-baseline"))["files"][0]
    assert graph["d2d_by_name"] == {"memcpy32_post": 32 * (93 + 69)}
    assert graph["graph_launches"] >= 32
    eager = cli_json("inspect", _run("replica-kimi-linear-48b-a3b-tp8-c16-eager-baseline"))["files"][0]
    assert eager["d2d_by_name"].get("Memcpy DtoD (Device -> Device)") == 8 * (27 + 20)


QWEN3_NEXT = "replica-qwen3-next-80b-a3b-tp4-c16-cuda-graph"


def test_qwen3_next_three_arms_by_kind():
    # traces/README.md (counted by replica_census): 48 [16, 2048] bf16 post-projection copies per
    # step in the baseline = 12 full-attention + 36 gated delta-net layers; the partial arm
    # removed the 12; the candidate all 48; 36 delta-net placement copies [16, 8, 128] in every arm.
    arms = {a: cli_json("report", _run(f"{QWEN3_NEXT}-{a}"), "--model", "qwen3-next-80b-a3b")["runs"][0]
            for a in ("baseline", "partial", "candidate")}
    want = {"baseline": {"full_attention": 12, "linear_attention": 36, "total": 48},
            "partial": {"full_attention": 0, "linear_attention": 36, "total": 36},
            "candidate": {"full_attention": 0, "linear_attention": 0, "total": 0}}
    for arm, run in arms.items():
        assert run["per_step"]["post_proj"] == want[arm], arm
        assert run["layout"]["kinds"] == {"full_attention": 12, "linear_attention": 36}
        assert run["attribution"]["status"] == "ok" and run["attribution"]["method"] == "structure"
        placement = [s for s in run["sites"] if s["role"] == "placement"]
        assert [(s["layer_kind"], s["bytes"], s["per_step"]) for s in placement] == [("linear_attention", 32768, 36.0)]
        assert run["per_step"]["other"] == 36  # the placement copies, unchanged across arms
    assert {e["scope"] for e in arms["baseline"]["estimate"]} == {"full_attention", "linear_attention", "all"}


@pytest.mark.parametrize("arm,scope,text,removed", [
    ("partial", "full_attention", "12 full-attention post-projection copies gone, 36 linear-attention still there",
     [("full_attention", 12)]),
    ("candidate", "all", "all 48 post-projection copies gone (12 full-attention + 36 linear-attention)",
     [("full_attention", 12), ("linear_attention", 36)]),
])
def test_qwen3_next_ab_names_the_removed_kinds(arm, scope, text, removed):
    out = cli_json("report", _run(f"{QWEN3_NEXT}-baseline"), _run(f"{QWEN3_NEXT}-{arm}"), "--model",
                   "qwen3-next-80b-a3b")
    cmp = out["comparison"]
    assert cmp["scope"] == scope and cmp["scope_text"] == text
    assert [(s["layer_kind"], s["per_step"]) for s in cmp["removed_sites"]] == removed
    # The timing of this very pair (baseline vs this arm), measured in interleaved rounds.
    assert cmp["timing"]["arms"] == ["baseline", arm] and cmp["timing"]["ci95_ms"][0] > 0
    est = cmp["timing"]["estimator"]
    assert est["supported"] == "kernel_plus_gap"


def test_kimi_k3_h200_partial_removal_keeps_the_kda_copies():
    base = _run("replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261201")
    part = _run("replica-kimi-k3-tp8-c16-cuda-graph-partial")
    out = cli_json("report", base, part, "--model", "kimi-k3")
    assert [r["per_step"]["post_proj"] for r in out["runs"]] == [
        {"mla": 24, "kda": 69, "total": 93}, {"mla": 0, "kda": 69, "total": 69}]
    assert out["comparison"]["scope"] == "mla"
    assert out["comparison"]["timing"]["arms"] == ["baseline", "partial"]
