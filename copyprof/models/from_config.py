"""A layout from a Hugging Face ``config.json``: which kind each decoder layer is.

Rules, in order (each checked against the source named; what could not be checked is said):

1. ``layer_types`` (or Nemotron-H's ``layers_block_type``) when the config lists them — the
   names are kept as written, except Hugging Face's own legacy names ``attention`` ->
   ``full_attention`` and ``mamba`` -> ``linear_attention`` (transformers
   ``configuration_utils._LEGACY_LAYER_TYPE_REMAP``) in lists of attention + MLP layers; a
   list with MLP-only layers (``mlp``, ``moe``) is one of single-block layers and keeps the
   model's own words, as rule 6.
2. Kimi ``linear_attn_config.kda_layers`` (1-indexed; every other layer is MLA: vLLM
   ``KimiLinearConfig.is_kda_layer``; vllm-and-kimi.md §2.1) -> ``kda`` / ``mla``.
3. Qwen3-Next / Qwen3.5 ``full_attention_interval``: layer i is ``linear_attention`` unless
   (i + 1) % interval == 0 (transformers ``Qwen3NextConfig.__post_init__`` @ 008e574).
4. MiniMax ``attn_type_list``: 1 = ``full_attention`` (softmax), 0 = ``linear_attention``
   (lightning) (vLLM ``ModelConfig`` counts ``t == 1`` as attention layers).
5. Jamba ``attn_layer_period`` / ``attn_layer_offset``: attention where i % period == offset,
   mamba elsewhere (transformers ``JambaConfig.layers_block_type``, defaults 8 / 4).
6. Nemotron-H ``hybrid_override_pattern``: ``M`` ``mamba``, ``*`` ``attention``, ``E``
   ``moe``, ``-`` ``mlp``, the model's own words (vLLM 0.26.0
   ``NemotronHConfig.layers_block_type``; ``nemotron_h.py`` builds one decoder layer of one
   norm and one mixer per letter: ``ALL_DECODER_LAYER_TYPES``).
7. gpt-oss without ``layer_types``: sliding on even layers, full on odd ones (transformers
   ``GptOssConfig.__post_init__``); Qwen2-style ``use_sliding_window`` with
   ``max_window_layers``: sliding from that layer on.
8. MLA models (``kv_lora_rank`` set: DeepSeek-V2/V3, Kimi-K2): every layer ``mla``.
9. Plain dense decoders (a ``model_type`` or ``architectures`` and ``num_attention_heads``,
   none of the hybrid fields above): every layer ``full_attention``.
Anything else is refused with one line naming the fields looked for.
"""
from __future__ import annotations

from typing import Any

from copyprof.errors import CopyprofError
from copyprof.models.layout import DTYPE_BYTES, MLP_ONLY_KINDS, ModelLayout

LOOKED_FOR = ("layer_types", "layers_block_type", "linear_attn_config.kda_layers", "full_attention_interval",
              "attn_type_list", "attn_layer_period/attn_layer_offset", "hybrid_override_pattern",
              "kv_lora_rank (MLA)", "model_type + num_attention_heads (dense)")
_LEGACY_NAMES = {"attention": "full_attention", "mamba": "linear_attention"}
_NEMOTRON_PATTERN = {"M": "mamba", "*": "attention", "E": "moe", "-": "mlp"}
# Keys that mean "this model mixes layer kinds": with none of the rules matching, reading such
# a config as dense would invent a layout, so it is refused instead.
_HYBRID_HINTS = ("mamba", "ssm", "linear_", "hybrid", "attn_type", "block_type", "layer_types", "interval",
                 "lightning", "deltanet", "kda")


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config (``text_config`` / ``llm_config`` nesting)."""
    for key in ("text_config", "llm_config", "language_config"):
        if isinstance(config.get(key), dict):
            return config[key]
    return config


def layout_from_config(config: dict[str, Any], *, name: str, source: str = "config", hf_id: str | None = None) -> ModelLayout:
    if not isinstance(config, dict):
        raise CopyprofError("model config is not a JSON object", path=source)
    text = text_config(config)
    kinds, mechanism = _kinds(text, config, source)
    try:
        hidden = int(text["hidden_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CopyprofError(f"model config lacks hidden_size ({exc})", path=source) from exc
    n = len(kinds)
    dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    lac_raw = text.get("linear_attn_config")
    lac: dict[str, Any] = lac_raw if isinstance(lac_raw, dict) else {}
    heads = _int(text, "num_attention_heads")
    return ModelLayout(
        name=name, hidden=hidden, layer_kinds=tuple(kinds), mechanism=mechanism, source=source, hf_id=hf_id,
        dtype_bytes=DTYPE_BYTES.get(dtype.lower(), 2),
        model_type=str(text.get("model_type") or config.get("model_type") or ""),
        num_heads=heads, num_kv_heads=_int(text, "num_key_value_heads", default=heads),
        head_dim=_int(text, "head_dim", default=hidden // heads if heads else 0),
        kda_heads=int(lac.get("num_heads") or 0), kda_head_dim=int(lac.get("head_dim") or 128),
        q_lora_rank=text.get("q_lora_rank"), kv_lora_rank=_int(text, "kv_lora_rank", default=512),
        qk_nope_head_dim=_int(text, "qk_nope_head_dim", default=128),
        qk_rope_head_dim=_int(text, "qk_rope_head_dim", default=64), v_head_dim=_int(text, "v_head_dim", default=128),
        linear_num_key_heads=_int(text, "linear_num_key_heads", "mamba_n_groups", "n_groups"),
        linear_num_value_heads=_int(text, "linear_num_value_heads", "mamba_num_heads"),
        linear_key_head_dim=_int(text, "linear_key_head_dim", "ssm_state_size", "mamba_d_state", default=128),
        linear_value_head_dim=_int(text, "linear_value_head_dim", "mamba_head_dim", default=128),
        linear_conv_kernel=_int(text, "linear_conv_kernel_dim", "conv_kernel", "mamba_d_conv", default=4),
        moe_intermediate=_int(text, "moe_intermediate_size"),
        experts_per_token=_int(text, "num_experts_per_token", "num_experts_per_tok"),
        shared_expert_intermediate=_int(text, "shared_expert_intermediate_size",
                                        "moe_shared_expert_intermediate_size"),
        dense_intermediate=_int(text, "intermediate_size"),
        dense_layers=_dense_layers(text, n),
        vocab=_int(text, "vocab_size") or _int(config, "vocab_size"),
        sliding_window=_int(text, "sliding_window"),
    )


def _int(d: dict[str, Any], *keys: str, default: int = 0) -> int:
    for k in keys:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return int(v)
    return default


def _layer_count(text: dict[str, Any], source: str) -> int:
    n = text.get("num_hidden_layers")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n
    raise CopyprofError("model config lacks num_hidden_layers", path=source)


def _kinds(text: dict[str, Any], config: dict[str, Any], source: str) -> tuple[list[str], dict[str, str]]:
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    listed = text.get("layer_types") or text.get("layers_block_type")
    if isinstance(listed, list) and listed and all(isinstance(k, str) for k in listed):
        names: list[str] = listed  # every item was checked to be a str just above
        single_block = any(k in MLP_ONLY_KINDS for k in names)
        kinds = list(names) if single_block else [_LEGACY_NAMES.get(k, k) for k in names]
        return kinds, _mechanisms(kinds, model_type)
    lac = text.get("linear_attn_config")
    if isinstance(lac, dict) and isinstance(lac.get("kda_layers"), list):
        n = _layer_count(text, source)
        kda = {int(x) for x in lac["kda_layers"]}
        return ["kda" if i + 1 in kda else "mla" for i in range(n)], {"kda": "kda", "mla": "mla"}
    if isinstance(text.get("full_attention_interval"), int) and text["full_attention_interval"] > 0:
        n, every = _layer_count(text, source), text["full_attention_interval"]
        kinds = ["linear_attention" if (i + 1) % every else "full_attention" for i in range(n)]
        return kinds, _mechanisms(kinds, model_type or "qwen3_next")
    if isinstance(text.get("attn_type_list"), list):
        kinds = ["full_attention" if int(t) == 1 else "linear_attention" for t in text["attn_type_list"]]
        return kinds, {"full_attention": "attention", "linear_attention": "gdn"}
    if isinstance(text.get("attn_layer_period"), int) or model_type == "jamba":
        n = _layer_count(text, source)
        period, offset = int(text.get("attn_layer_period", 8)), int(text.get("attn_layer_offset", 4))
        kinds = ["full_attention" if i % period == offset else "linear_attention" for i in range(n)]
        return kinds, {"full_attention": "attention", "linear_attention": "mamba"}
    if isinstance(text.get("hybrid_override_pattern"), str) and text["hybrid_override_pattern"]:
        pattern = text["hybrid_override_pattern"]
        bad = sorted(set(pattern) - set(_NEMOTRON_PATTERN))
        if bad:
            raise CopyprofError(f"hybrid_override_pattern has unknown layer letters {bad} (known: M * E -)", path=source)
        kinds = [_NEMOTRON_PATTERN[c] for c in pattern]
        return kinds, _mechanisms(kinds, "nemotron_h")
    if model_type == "gpt_oss":
        n = _layer_count(text, source)
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)], {}
    if text.get("use_sliding_window") and isinstance(text.get("max_window_layers"), int):
        n, first = _layer_count(text, source), text["max_window_layers"]
        return ["sliding_attention" if i >= first else "full_attention" for i in range(n)], {}
    if isinstance(text.get("kv_lora_rank"), int):
        return ["mla"] * _layer_count(text, source), {"mla": "mla"}
    hints = sorted(k for k in text if any(h in k.lower() for h in _HYBRID_HINTS))
    dense = (model_type or config.get("architectures")) and _int(text, "num_attention_heads") > 0
    if dense and not hints:
        return ["full_attention"] * _layer_count(text, source), {"full_attention": "attention"}
    why = f"it has {', '.join(hints)} but no rule reads them" if hints else "none of them is there"
    raise CopyprofError(f"cannot tell each decoder layer's kind from this model config: looked for "
                        f"{', '.join(LOOKED_FOR)}; {why}", path=source)


def _mechanisms(kinds: list[str], model_type: str) -> dict[str, str]:
    """How each kind computes: linear attention is a gated delta-net in Qwen3-Next / Qwen3.5 /
    MiniMax-style configs and mamba in Jamba / Nemotron-H / Falcon-H1 / Zamba."""
    linear = "mamba" if any(t in model_type for t in ("nemotron", "jamba", "falcon", "zamba", "mamba", "granite")) else "gdn"
    table = {"full_attention": "attention", "sliding_attention": "attention", "chunked_attention": "attention",
             "attention": "attention", "linear_attention": linear, "mamba": "mamba", "mla": "mla", "kda": "kda"}
    table.update(dict.fromkeys(MLP_ONLY_KINDS, "mlp-only"))
    return {k: table.get(k, "attention") for k in dict.fromkeys(kinds)}


def _dense_layers(text: dict[str, Any], n: int) -> tuple[int, ...]:
    """0-based layers whose MLP is dense (no experts): DeepSeek/Kimi ``first_k_dense_replace``,
    Qwen ``mlp_only_layers`` / ``decoder_sparse_step``; all layers when the model has no experts."""
    experts = _int(text, "num_experts", "n_routed_experts", "num_local_experts")
    if experts <= 0 and _int(text, "moe_intermediate_size") <= 0:
        return tuple(range(n))
    dense = set(range(min(_int(text, "first_k_dense_replace"), n)))
    only = text.get("mlp_only_layers")
    if isinstance(only, list):
        dense |= {int(i) for i in only if isinstance(i, int) and 0 <= i < n}
    step = _int(text, "decoder_sparse_step", default=1)
    if step > 1:
        dense |= {i for i in range(n) if (i + 1) % step}
    return tuple(sorted(dense))
