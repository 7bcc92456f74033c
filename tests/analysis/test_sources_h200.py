"""Which code issued each copy, on the H200 captures of traces/.

The eager Qwen3-Next capture was made with stacks (traces/capture_h200_layouts.sh: the replica
engine, ``--eager --with-stack --record-shapes``). What the replica's code does, independently
of copyprof's analysis: every layer's output projection result is copied into the caller's
buffer by ``ReplicaModel._attention`` (then capture/replica_model.py, the frame names the capture recorded) — 12 full-attention + 36
linear-attention layers = 48 copies per step — and each gated delta-net layer's ``forward``
(then capture/replica_layers.py) places its core output with one more copy — 36 per step. So the
census by issuing function must be exactly those two functions with those counts; and the
graph-replay baseline of the same step (no stacks, graph launches) gets the same sources from
the eager capture through ``--sources``, all 84 copies per step matched.
"""
from __future__ import annotations

import re

from tests.conftest import REPO, cli_json

T = REPO / "traces"
EAGER = next(T.glob("replica-qwen3-next-80b-a3b-tp4-c16-eager-stacks-baseline-*"))
GRAPH = next(T.glob("replica-qwen3-next-80b-a3b-tp4-c16-cuda-graph-baseline-*"))
FRAME = re.compile(r"^copyprof/capture/(?P<file>[a-z_]+\.py)\((?P<line>\d+)\): (?P<function>\w+)$")


def _function(frame: str | None) -> tuple[str, str]:
    """(file, function) of a frame as torch names it, ``path(first line of the function): name``."""
    m = FRAME.match(frame or "")
    assert m, frame
    return m["file"], m["function"]


def test_eager_capture_names_the_function_behind_every_copy():
    [run] = cli_json("report", str(EAGER), "--by-source")["runs"]
    assert run["steps"]["decode"] == 8
    by_source = {_function(b["source"]): b for b in run["by_source"]}
    assert set(by_source) == {("replica_model.py", "_attention"), ("replica_layers.py", "forward")}
    post, placement = by_source[("replica_model.py", "_attention")], by_source[("replica_layers.py", "forward")]
    assert post["per_step"] == 48 and sorted(post["layer_kinds"]) == ["full_attention", "linear_attention"]
    assert placement["per_step"] == 36 and placement["sites"] == ["placement"]
    assert placement["layer_kinds"] == ["linear_attention"]
    # the callers above the placement copy: the layer's forward is called by the model's _attention
    assert [_function(f)[1] for f in placement["stack"][:2]] == ["forward", "_attention"]
    for site in run["sites"]:
        assert site["source"] is not None and site["source_note"] == "", site
        assert site["stack"][0] == site["source"]
    # the capture recorded shapes: each copy op's destination dims and dtypes name the site —
    # [N, hidden] = [16, 2048] for the output projection's copy, [N, 32/4 value heads, 128] for
    # the GDN placement (Qwen3-Next's config; N = 16 tokens per step)
    shapes = {s["site"]: s["shape"] for s in run["sites"]}
    assert shapes == {"full_attention": "[16,2048] bf16<-bf16", "linear_attention": "[16,2048] bf16<-bf16",
                      "placement": "[16,8,128] bf16<-bf16"}


def test_graph_replay_takes_the_eager_sources():
    plain = cli_json("report", str(GRAPH))["runs"][0]
    # a graph replay has no Python stacks: every site says why it has no source
    assert all(s["source"] is None and s["source_note"] for s in plain["sites"])
    [run] = cli_json("report", str(GRAPH), "--sources", str(EAGER))["runs"]
    match = run["source_match"]
    assert match["copies_per_step"] == 84 and match["matched_per_step"] == 84 and match["rate"] == 1.0
    sources = {s["site"]: _function(s["source"]) for s in run["sites"]}
    assert sources == {"full_attention": ("replica_model.py", "_attention"),
                       "linear_attention": ("replica_model.py", "_attention"),
                       "placement": ("replica_layers.py", "forward")}
