"""vLLM profile directories with several ranks, and model layouts from config.json.

A vLLM profile directory holds one `{worker}.{ns}.pt.trace.json.gz` per rank plus the API
process trace (`{host}_{pid}.async_llm.{ns}.pt.trace.json.gz`) and `*.profiler_out.txt`
(vllm-and-kimi.md §8.3). Rank comes from distributedInfo, else from the name.
"""
from __future__ import annotations

import gzip
import json

from copyprof.models import load_layout
from tests.conftest import cli_json
from tests.synth.kimi import C16, write_kineto


def _vllm_dir(tmp_path, ranks=(0, 1, 2, 3), removed_on=None):
    d = tmp_path / "profile"
    d.mkdir()
    for r in ranks:
        removed = ("mla",) if r == removed_on else ()
        write_kineto(d / f"dp0_pp0_tp{r}_dcp0_ep0_rank{r}.17000000000{r}.pt.trace.json.gz", C16, steps=4,
                     seed=r, removed=removed, rank=r)
    frontend = {"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "generate", "pid": 1, "tid": 1,
                                 "ts": 0, "dur": 5, "args": {}}]}
    (d / "host_99.async_llm.1700000000.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(frontend).encode()))
    (d / "dp0_pp0_tp0_dcp0_ep0_rank0.profiler_out.txt").write_text("Name  Self CPU %\n")
    return d


def test_ranks_agree_and_frontend_is_set_aside(tmp_path):
    d = _vllm_dir(tmp_path)
    inspect = cli_json("inspect", str(d))["files"]
    roles = sorted((f["role"], f["ranks"][0]) for f in inspect)
    assert roles == [("frontend", 0), ("rank", 0), ("rank", 1), ("rank", 2), ("rank", 3)]
    [run] = cli_json("report", str(d), "--model", "kimi-k3", "--by-rank")["runs"]
    assert run["ranks"] == [0, 1, 2, 3] and run["headline_rank"] == 0
    assert run["rank_agreement"]["agree"] is True
    assert {r: v["post_proj"]["total"] for r, v in run["by_rank"].items()} == {"0": 93, "1": 93, "2": 93, "3": 93}


def test_rank_disagreement_is_said_and_rank_option_picks_headline(tmp_path):
    d = _vllm_dir(tmp_path, removed_on=2)
    [run] = cli_json("report", str(d), "--model", "kimi-k3")["runs"]
    assert run["rank_agreement"]["agree"] is False
    assert "rank 2" in run["rank_agreement"]["message"]
    [run2] = cli_json("report", str(d), "--model", "kimi-k3", "--rank", "2")["runs"]
    assert run2["headline_rank"] == 2
    # rank 2 returned MLA outputs directly: its 69 KDA copies are still found, layer by layer
    assert run2["per_step"]["post_proj"] == {"mla": 0, "kda": 69, "total": 69}


def test_layout_from_kimi_k3_config_nested_text_config(tmp_path):
    # Kimi-K3 nests the language model config under text_config; kda_layers is 1-indexed.
    kda = [i for i in range(1, 94) if not (i % 4 == 0 or i == 93)]
    cfg = {"model_type": "kimi_k3", "text_config": {"model_type": "kimi_linear", "num_hidden_layers": 93,
           "hidden_size": 7168, "num_attention_heads": 96, "torch_dtype": "bfloat16",
           "linear_attn_config": {"kda_layers": kda, "full_attn_layers": [i for i in range(1, 94) if i not in kda],
                                  "num_heads": 96, "head_dim": 128}}}
    model_dir = tmp_path / "Kimi-K3"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(cfg))
    layout = load_layout(str(model_dir))
    assert layout.layers == 93 and len(layout.mla_layers) == 24 and len(layout.kda_layers) == 69
    assert layout.mla_layers[-2:] == [92, 93] and layout.post_proj_bytes(16) == 229376
    assert layout == load_layout(str(model_dir / "config.json"))


def test_layout_errors_are_one_line(tmp_path):
    from tests.conftest import run_cli

    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"num_hidden_layers": 4, "hidden_size": 64}))
    proc = run_cli("report", str(bad), "--model", str(bad))
    assert proc.returncode == 2 and "linear_attn_config.kda_layers" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("report", str(bad), "--model", "no-such-model")
    assert proc.returncode == 2 and "unknown model" in proc.stderr
