"""Ground truth for every capture in corpus/runs: each copy of a decode step with its role,
decoder layer and issuing code, written without copyprof's code (extract.py reads the trace).

Roles (the vocabulary copyprof's report uses):
  post-projection  an attention block's output projection written into a caller-owned buffer
                   (``output[:] = o_proj(x)``): what a direct-return change removes
  mlp-output       the MLP/MoE block's result copied into the caller's buffer (the fused-MoE
                   output copy)
  placement        inside the attention block, before its output projection (the core's
                   result placed into a preallocated buffer)
  metadata         outside every decoder layer: input ids, positions, slot mappings,
                   attention metadata, the graph's output
  other            inside a layer, none of the above

How each rule was decided (the vLLM 0.26.0 source of the issuing line, read in the wheel):
eager captures name the issuing function in the Python stack around each copy's
``cudaMemcpyAsync``, and the decoder layer from the ``nn.Module: *DecoderLayer_i`` frame the
step entered; graph captures have no stacks, so a copy is known by what precedes it on the
GPU (a ``memcpy32_post`` node right after the KDA recurrence is the placement copy, one
right after ``moe_sum_vec_kernel`` the MoE output copy) and its layer by order: the j-th such
copy of a step is in the j-th layer of the kind the rule names, read from the config.

    python3 corpus/truth/label.py            # (re)write corpus/truth/<run>.json for every run
    python3 corpus/truth/label.py --check    # fail if a written file differs from a fresh reading
    python3 corpus/truth/label.py --check --runs NAME,NAME   # only those runs
"""
from __future__ import annotations

import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import extract  # noqa: E402  (the stdlib reader beside this file)

# Eager: (file, function) of the innermost vLLM frame -> role, the statement that copies (read in
# the 0.26.0 wheel; line numbers as in that file), and what change removes the copy.
FRAMES = {
    ("vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py", "forward"):
        ("post-projection", "L268 output[:] = self.o_proj(core_attn_out)[0]", "return the projection directly"),
    ("vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py", "_forward"):
        ("placement", "L442 core_attn_out[0, :num_actual_tokens] = core_attn_out_non_spec[...]",
         "let the recurrence write into core_attn_out"),
    ("vllm/model_executor/models/kimi_linear.py", "forward"):
        ("post-projection", "L285 output[:] = self.mla_attn(positions, hidden_states)  (KimiMLAAttention)",
         "return the projection directly"),
    ("vllm/model_executor/layers/mamba/gdn/olmo_gdn_linear_attn.py", "_full_forward"):
        ("post-projection", "L288 output[:num_tokens], _ = self.o_proj(core_attn_out)", "return the projection directly"),
    ("vllm/model_executor/layers/mamba/gdn/olmo_gdn_linear_attn.py", "_forward_core"):
        ("placement", "L503 core_attn_out[:num_actual_tokens] = core_attn_out_non_spec.squeeze(0)",
         "let the recurrence write into core_attn_out"),
    ("vllm/model_executor/layers/mamba/mamba_mixer.py", "forward_impl"):
        ("post-projection", "L461 output[:num_actual_tokens] = out", "return the projection directly"),
    ("vllm/model_executor/layers/fused_moe/topk_weight_and_reduce.py", "apply"):
        ("mlp-output", "L76 output.copy_(fused_expert_output, non_blocking=True)  (TopKWeightAndReduceNoOP)",
         "let the expert reduction write into output"),
    ("vllm/v1/worker/gpu_model_runner.py", "_prepare_inputs"): ("metadata", "input preparation", ""),
    ("vllm/v1/worker/gpu_model_runner.py", "_prepare_input_ids"): ("metadata", "input ids", ""),
}
# The module that must enclose a frame for the rule to hold (the same file serves two classes).
FRAME_MODULE = {("vllm/model_executor/models/kimi_linear.py", "forward"): "KimiMLAAttention"}

# Graph captures: (rule name, predicate on a copy, role, layers the j-th match is in).
# Predicates see the copy's bytes per token, how it was issued and the GPU kernels around it.
def _graph_rules(model: str):
    inside = lambda c: c["via"] == "cudaGraphLaunch"  # noqa: E731
    moe = lambda c: inside(c) and "moe_sum" in c["prev_kernel"]  # noqa: E731
    after_recurrence = lambda c: inside(c) and c["prev_kernel"].startswith("fused_recurrent_gated_delta_rule")  # noqa: E731
    outside = lambda c: c["via"].startswith("cudaMemcpy")  # noqa: E731
    rules = [("issued by cudaMemcpyAsync outside the graph (input and attention-metadata buffers)", outside,
              "metadata", None)]
    if model.startswith("kimi-linear"):
        rules += [("memcpy32_post after fused_recurrent_gated_delta_rule_fwd_kernel (KDA placement, L442)",
                   after_recurrence, "placement", "kda"),
                  ("memcpy32_post after moe_sum_vec_kernel (fused-MoE output, topk_weight_and_reduce.py L75)",
                   moe, "mlp-output", "moe")]
    elif model.startswith("olmo-hybrid"):
        rules += [("memcpy32_post after fused_recurrent_gated_delta_rule_fwd_kernel (GDN placement, L503)",
                   after_recurrence, "placement", "linear_attention"),
                  ("memcpy32_post after the o_proj GEMM's split-K reduction, before the add+rms_norm "
                   "(GDN post-projection inside the opaque custom op, L288)",
                   lambda c: inside(c) and "splitKreduce" in c["prev_kernel"] and "rms_norm" in c["next_kernel"],
                   "post-projection", "linear_attention"),
                  ("memcpy32_post between the MLP's silu*mul and its down projection in GDN layers "
                   "(Inductor's, in the compiled piece between two opaque GDN ops; no source line; "
                   "absent in eager mode)",
                   lambda c: inside(c) and "mul_silu" in c["prev_kernel"], "other", "linear_attention")]
    elif model.startswith("jamba"):
        rules += [("memcpy32_post after out_proj's split-K reduction, before the fused add+rms_norm "
                   "(mamba_mixer.py L461 inside the opaque mamba_mixer op)",
                   lambda c: inside(c) and "splitKreduce" in c["prev_kernel"], "post-projection", "linear_attention"),
                  ("memcpy32_post after moe_sum_vec_kernel (fused-MoE output)", moe, "mlp-output", "moe")]
    elif model.startswith("deepseek"):
        rules += [("memcpy32_post after moe_sum_vec_kernel (fused-MoE output)", moe, "mlp-output", "moe")]
    elif model.startswith("nemotron-h"):
        # NemotronHMoE.forward -> FusedMoE -> TopKWeightAndReduceNoOP.apply L76
        # output.copy_(fused_expert_output) inside the opaque MoE op, which the graph keeps;
        # NemotronHMamba/Attention/MLP decoder layers issue no copy of their own (eager stacks: none).
        rules += [("memcpy32_post after moe_sum_vec_kernel (fused-MoE output, topk_weight_and_reduce.py L76)",
                   moe, "mlp-output", "moe")]
    elif model.startswith("qwen3"):
        rules += [("memcpy32_post after the final norm, the last op of the graph (its output buffer)",
                   lambda c: inside(c) and c["next_kernel"] == "", "metadata", None)]
    return rules


def layer_sets(config: dict) -> tuple[list[str], dict[str, list[int]]]:
    """Each layer's kind (as the config says) and the 1-indexed layers of each family."""
    n = config["num_hidden_layers"]
    mt = config["model_type"]
    if mt == "kimi_linear":
        kda = set(config["linear_attn_config"]["kda_layers"])
        kinds = ["kda" if i + 1 in kda else "mla" for i in range(n)]
        moe = [i + 1 for i in range(n) if i >= config["first_k_dense_replace"]]
    elif mt == "olmo_hybrid":
        kinds = list(config["layer_types"])
        moe = []
    elif mt == "jamba":
        kinds = ["full_attention" if i % config["attn_layer_period"] == config["attn_layer_offset"]
                 else "linear_attention" for i in range(n)]
        moe = [i + 1 for i in range(n) if i % config["expert_layer_period"] == config["expert_layer_offset"]]
    elif mt == "nemotron_h":
        # One mixer per layer, by hybrid_override_pattern (nemotron_h.py ALL_DECODER_LAYER_TYPES:
        # M NemotronHMambaDecoderLayer, * ...AttentionDecoderLayer, - ...MLPDecoderLayer,
        # E ...MoEDecoderLayer), named as NemotronHConfig.layers_block_type names them
        # (transformers_utils/configs/nemotron_h.py L277: mamba / attention / mlp / moe).
        letters = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
        kinds = [letters[c] for c in config["hybrid_override_pattern"]]
        moe = [i + 1 for i in range(n) if kinds[i] == "moe"]
    elif mt == "deepseek_v3":
        kinds = ["mla"] * n
        moe = [i + 1 for i in range(n) if i >= config["first_k_dense_replace"]]
    else:
        kinds = ["full_attention"] * n
        moe = []
    sets = {k: [i + 1 for i, x in enumerate(kinds) if x == k] for k in set(kinds)}
    sets["moe"] = moe
    return kinds, sets


def label_eager(run: dict, copies: list[dict], kinds: list[str]) -> list[dict]:
    out = []
    for c in copies:
        frame = (c.get("frames") or [""])[0]
        m = re.match(r"(.*)\((\d+)\): (.*)$", frame)
        key = (m.group(1), m.group(3)) if m else ("", "")
        if key not in FRAMES:
            raise SystemExit(f"{run['name']}: copy #{c['index']} issued by {frame!r}: no rule (read the source, add one)")
        need = FRAME_MODULE.get(key)
        if need and not any(x.startswith(need + "_") for x in c.get("modules", [])):
            raise SystemExit(f"{run['name']}: copy #{c['index']} in {frame} outside {need}")
        role, statement, change = FRAMES[key]
        layer = c.get("layer", 0)
        if role == "metadata" and layer:
            raise SystemExit(f"{run['name']}: metadata copy #{c['index']} inside layer {layer}")
        out.append({"index": c["index"], "bytes": c["bytes"], "role": role, "layer": layer,
                    "kind": kinds[layer - 1] if layer else "", "source": frame, "statement": statement,
                    "removed_by": change, "evidence": "stack"})
    return out


def label_graph(run: dict, copies: list[dict], kinds: list[str], sets: dict[str, list[int]]) -> list[dict]:
    rules = _graph_rules(run["model"])
    seen: dict[str, int] = {}
    out = []
    for c in copies:
        hits = [r for r in rules if r[1](c)]
        if len(hits) != 1:
            raise SystemExit(f"{run['name']}: copy #{c['index']} ({c['bytes']} B after {c['prev_kernel'][:60]!r}) "
                             f"matches {len(hits)} rules")
        why, _, role, family = hits[0]
        layer = 0
        if family is not None:
            j = seen.get(why, 0)
            seen[why] = j + 1
            if j >= len(sets[family]):
                raise SystemExit(f"{run['name']}: more '{why}' copies than {family} layers")
            layer = sets[family][j]
        out.append({"index": c["index"], "bytes": c["bytes"], "role": role, "layer": layer,
                    "kind": kinds[layer - 1] if layer else "", "source": None, "statement": why,
                    "removed_by": "", "evidence": "gpu order"})
    for why, _, _, family in rules:
        if family is not None and seen.get(why, 0) not in (0, len(sets[family])):
            raise SystemExit(f"{run['name']}: {seen[why]} '{why}' copies for {len(sets[family])} {family} layers")
    return out


def runs() -> list[dict]:
    with open(os.path.join(CORPUS, "runs.json"), encoding="utf-8") as fh:
        return json.load(fh)["runs"]


def truth_of(run: dict) -> dict:
    with open(os.path.join(CORPUS, "models", run["model"], "config.json"), encoding="utf-8") as fh:
        config = json.load(fh)
    kinds, sets = layer_sets(config)
    x = extract.extract(extract.load(os.path.join(CORPUS, "runs", run["name"])))
    # Eager steps are compared by what issued each copy (another stream's kernels may run
    # between a copy and its producer in one step and not the next); graph replays by GPU order.
    shapes = {json.dumps([(c["bytes"], (c.get("frames") or [""])[0], c.get("layer")) if run["mode"] == "eager"
                          else (c["bytes"], c["prev_kernel"], c["via"]) for c in step]) for step in x["copies"]}
    if len(shapes) != 1:
        raise SystemExit(f"{run['name']}: the decode steps differ in their copies ({len(shapes)} forms)")
    first = x["copies"][0]
    labelled = label_eager(run, first, kinds) if run["mode"] == "eager" else label_graph(run, first, kinds, sets)
    by_role: dict[str, dict[str, int]] = {}
    for c in labelled:
        by_role.setdefault(c["role"], {}).setdefault(c["kind"] or "-", 0)
        by_role[c["role"]][c["kind"] or "-"] += 1
    return {"run": run["name"], "model": run["model"], "mode": run["mode"], "arm": run["arm"],
            "steps": x["steps"], "tokens": sorted(set(x["tokens"])), "layer_kinds": kinds,
            "copies_per_step": len(first), "by_role": by_role, "copies": labelled}


def main() -> None:
    check = "--check" in sys.argv
    only = set(sys.argv[sys.argv.index("--runs") + 1].split(",")) if "--runs" in sys.argv else None
    chosen = [run for run in runs() if only is None or run["name"] in only]
    if only is not None and len(chosen) != len(only):
        sys.exit(f"--runs: no such run(s): {sorted(only - {run['name'] for run in chosen})}")
    bad = 0
    for run in chosen:
        t = truth_of(run)
        path = os.path.join(HERE, run["name"] + ".json")
        text = json.dumps(t, indent=1) + "\n"
        if check:
            with open(path, encoding="utf-8") as fh:
                if fh.read() != text:
                    print(f"{path}: differs from a fresh reading")
                    bad += 1
        else:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        print(f"{run['name']}: {t['copies_per_step']} copies/step {t['by_role']}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
