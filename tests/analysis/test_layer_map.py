"""The layer map: decode steps split into decoder layers from the kernels themselves.

Evidence from real traces nobody tuned for it: the H200 replica captures (traces/, one TP
rank of Kimi-K3 at real shapes), the MI300X vLLM gpt-oss-20b decode step and the MI300X
SGLang Qwen3-8B decode step (TraceLens samples). Expected layer kinds come from
tests/synth/published.py; expected copy places from how the replica builds a layer
(copyprof/capture/replica/model.py: KDA placement copy before o_proj, post-projection copy
after it) — read from the trace, not from the census.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from copyprof.analysis.census.layer_map import map_layers
from copyprof.analysis.report import analyze_rank
from copyprof.models import PRESETS, layout_from_config
from copyprof.reading import read_runs
from tests.conftest import REPO, cli_json
from tests.synth.kimi import C16, write_kineto
from tests.synth.published import GPT_OSS_20B_KINDS, K3_KINDS

TRACES = REPO / "traces"
K3_BASE = next(TRACES.glob("replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261130T*"))
K3_CAND = next(TRACES.glob("replica-kimi-k3-tp8-c16-cuda-graph-candidate-*"))


def _census(path, layout):
    [trace] = [t for t in read_runs([str(path)]) if t.meta.role == "rank"]
    return analyze_rank(trace, layout).census


def test_h200_k3_every_copy_lands_in_its_published_layer():
    census = _census(K3_BASE, PRESETS["kimi-k3"])
    cp = census.copies.to_pandas()
    steps = cp["step"].nunique()
    assert steps == 32 and census.attribution.method == "structure" and census.attribution.status == "ok"
    post = cp[cp["role"] == "post-projection"]
    # One post-projection copy in every layer of every step, in published-kind order.
    assert len(post) == 93 * steps
    for _, g in post.groupby("step"):
        assert g["layer"].tolist() == list(range(1, 94))
        assert tuple(g["kind"]) == K3_KINDS
    placement = cp[cp["role"] == "placement"]
    kda_layers = [i + 1 for i, k in enumerate(K3_KINDS) if k == "kda"]
    assert sorted(set(placement["layer"])) == kda_layers and len(placement) == 69 * steps
    assert (placement["bytes"] == 16 * 12 * 128 * 2).all() and (post["bytes"] == 16 * 7168 * 2).all()
    # Same slot in every layer of a kind: the placement copy precedes the projection copy.
    assert post.groupby("kind")["slot"].nunique().eq(1).all()
    assert placement["slot"].nunique() == 1 and placement["slot"].iloc[0] < post[post["kind"] == "kda"]["slot"].iloc[0]


def test_h200_k3_candidate_keeps_its_layers_without_the_copies():
    census = _census(K3_CAND, PRESETS["kimi-k3"])
    cp = census.copies.to_pandas()
    assert census.attribution.method == "structure"
    assert set(cp["role"]) == {"placement"} and len(cp) == 69 * 32
    assert (census.per_step["post_total"] == 0).all()


def test_a_layout_with_moved_mla_layers_is_called_out():
    # a layout that names the wrong layers is caught: moving K3's MLA layers to 1-24 must not pass unnoticed.
    k3 = PRESETS["kimi-k3"]
    moved = dataclasses.replace(k3, name="k3-moved", layer_kinds=("mla",) * 24 + ("kda",) * 69)
    census = _census(K3_BASE, moved)
    att = census.attribution
    assert att.status == "partial" and att.kind_disagreements and "DISAGREE" in att.message
    assert "4, 8" not in att.kind_disagreements[0] or "runs in layers" in att.kind_disagreements[0]


def test_synth_rocm_k3_moved_layout_disagrees_and_published_agrees(tmp_path):
    path = write_kineto(tmp_path / "rank0.json.gz", C16, steps=3)
    k3 = PRESETS["kimi-k3"]
    good = _census(path, k3).attribution
    assert good.status == "ok" and good.anchored == 93 and good.anchors_agree == 93
    moved = dataclasses.replace(k3, layer_kinds=("mla",) * 24 + ("kda",) * 69)
    bad = _census(path, moved).attribution
    assert bad.status == "partial" and bad.anchors_agree < bad.anchored


def test_partial_removal_without_sizes_reads_69_kda_and_0_mla(tmp_path):
    # vLLM #50847 on ROCm graph replay: MLA copies gone, KDA copies left, blits carry no sizes.
    base = write_kineto(tmp_path / "base.json.gz", C16, steps=4)
    part = write_kineto(tmp_path / "partial.json.gz", C16, steps=4, removed=("mla",))
    out = cli_json("report", str(base), str(part), "--model", "kimi-k3")
    b, c = out["runs"]
    assert b["per_step"]["post_proj"] == {"mla": 24, "kda": 69, "total": 93}
    assert c["per_step"]["post_proj"] == {"mla": 0, "kda": 69, "total": 69}
    assert {s["site"]: s["bytes_src"] for s in c["sites"] if s["role"] == "post-projection"} == {"kda": "layout"}
    cmp = out["comparison"]
    assert cmp["scope"] == "mla" and cmp["scope_text"] == "24 MLA post-projection copies gone, 69 KDA still there"
    assert cmp["removed_sites"] == [{"bytes": 229376, "layer_kind": "mla", "per_step": 24}]


def _step_codes(path):
    [trace] = [t for t in read_runs([str(path)]) if t.meta.role == "rank"]
    ev = trace.events.sort_values("start_ns")
    gpu = ev[ev["on_gpu"] & ev["kind"].isin(["kernel", "memset", "memcpy"])]
    names = gpu["name"].cat.categories.to_numpy(dtype=object)
    codes = gpu["name"].cat.codes.to_numpy()
    structural = gpu["kind"].isin(["kernel", "memset"]).to_numpy() & ~gpu["name"].astype(str).str.startswith("Memcpy").to_numpy()
    return codes, structural, names


def test_mi300x_gpt_oss_layers_and_kinds(samples):
    codes, structural, names = _step_codes(samples / "kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz")
    lm = map_layers(codes, structural, GPT_OSS_20B_KINDS, names)
    assert lm.status == "ok" and lm.layers == 24
    # The attention kernel alternates with the layer type, as the published layer_types say.
    assert lm.kinds.agree == {"kernel_unified_attention_2d": "sliding_attention",
                              "kernel_unified_attention_3d": "full_attention", "reduce_segments": "full_attention"}
    assert not lm.kinds.disagree
    attn = [i for i, n in enumerate(names) if n == "kernel_unified_attention_3d"]
    layers = lm.op_layer[np.isin(codes, attn)]
    assert layers.tolist() == list(range(1, 24, 2))
    # A layout whose kinds follow another pattern (pairs) contradicts the trace. (Swapping the two
    # names would not: two alternating kinds of softmax attention look alike but for their names.)
    pairs = ("sliding_attention", "sliding_attention", "full_attention", "full_attention") * 6
    disagree = map_layers(codes, structural, pairs, names).kinds.disagree
    assert disagree["kernel_unified_attention_3d"][1] == list(range(2, 25, 2))  # 1-indexed: every 2nd layer


def test_mi300x_sglang_qwen3_8b_uniform_layers(samples):
    codes, structural, names = _step_codes(samples / "kineto_roctracer_mi300x_sglang_qwen3_8b_decode.json.gz")
    qwen3_8b = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 36,
                "hidden_size": 4096, "num_attention_heads": 32}
    lm = map_layers(codes, structural, layout_from_config(qwen3_8b, name="qwen3-8b").layer_kinds, names)
    assert lm.status == "ok"
    attn = [i for i, n in enumerate(names) if str(n).startswith("void paged_attention_ll4mi_QKV")]
    assert lm.op_layer[np.isin(codes, attn)].tolist() == list(range(36))
    lengths = np.diff(np.append(lm.starts, lm.end))
    assert np.median(lengths) == 15  # the step's 540 layer kernels, 15 per layer


def test_too_few_layers_for_the_trace_falls_back_and_says_so(tmp_path):
    path = write_kineto(tmp_path / "rank0.json.gz", C16, steps=2)
    census = _census(path, PRESETS["kimi-linear-48b-a3b"])  # 27 layers on a 93-layer trace
    assert census.attribution.status == "not-attributed" and "layers not found" in census.attribution.message
    assert (census.per_step["post_total"] == 0).all()


@pytest.mark.parametrize("kinds", [("a", "b"), ("a",) * 5])
def test_no_structure_in_a_tiny_step(kinds):
    codes = np.array([0, 1, 2], dtype=np.int32)
    lm = map_layers(codes, np.ones(3, dtype=bool), kinds, np.array(["x", "y", "z"], dtype=object))
    assert lm.status == "no-structure" and lm.message


def test_a_training_step_whose_kernel_counts_happen_to_fit_is_not_cut_into_layers(samples):
    # The A100 sample is a DLRM training step (torchrec): one of its kernels runs exactly 93 times
    # per ProfilerStep, K3's layer count. Cut by that kernel alone, only 30 of the 93 "layers" share
    # a length (they range from 1 to 329 kernels), where every real decoder step we hold has at
    # least 35 of 36 alike (the Qwen3-8B test above). Reading it as K3 must find no layers.
    [run] = cli_json("report", str(samples / "kineto_cupti_a100_cudagraph_rank0.json.gz"), "--model", "kimi-k3")["runs"]
    assert run["attribution"]["status"] == "not-attributed"
    assert "only 30 of 93 with their kind's usual length" in run["attribution"]["message"]
    assert run["per_step"]["post_proj"]["total"] == 0
    # Its one 14,680,064-byte copy has the size of K3's [1024, 7168] bf16 post-projection copy; with
    # no layers it is listed by size but says it is not in the post-projection count above.
    [by_size] = [s for s in run["sites"] if s["site"] == "post-proj"]
    assert by_size["bytes"] == 1024 * 7168 * 2 and "not counted as post-projection" in by_size["where"]


def test_one_coincidental_clock_is_refused_and_a_regular_step_is_kept():
    # Ground truth by construction: 8 layers of 5 kernels (norm, attn, gemm, allreduce, mlp), then
    # the same kernels with a 'filler' kernel padding the layers to unlike lengths, its only clock
    # kernel 'tick' launched once per layer.
    names = np.array(["norm", "attn", "gemm", "ar", "mlp", "tick", "fill"], dtype=object)
    regular = np.array([0, 1, 2, 3, 4] * 8, dtype=np.int32)
    lm = map_layers(regular, np.ones(len(regular), dtype=bool), ("full_attention",) * 8, names)
    assert lm.status == "ok" and np.diff(np.append(lm.starts, lm.end)).tolist() == [5] * 8
    pads = [0, 7, 1, 12, 3, 2, 9, 4]  # eight different lengths: no two layers alike
    irregular = np.array([c for pad in pads for c in [5] + [6] * pad], dtype=np.int32)
    lm = map_layers(irregular, np.ones(len(irregular), dtype=bool), ("full_attention",) * 8, names)
    # Layers 1-7 span 1 + pad kernels; the last layer's tail is taken as the others' most common
    # tail (0 here), so it has length 1 like layer 1: 2 of 8 alike.
    assert lm.status == "no-structure" and "only 2 of 8" in lm.message


def _single_block_step(kinds: tuple[str, ...]):
    """A graph-replay-like decode step of single-block layers, as vLLM's Nemotron-H runs them
    (corpus/ nemotron-h graph capture): each layer is one norm, fused by Inductor under a name of
    its compiled piece (so no name repeats once per layer), then one mixer or one MLP/MoE block.
    Copies: a metadata copy before the first layer, a post-projection copy after each mamba
    out_proj, the fused-MoE output copy after each moe_sum. Returns codes, structural mask,
    names and, per copy, (position, expected role, expected 0-based layer)."""
    body = {"mamba": ["nvjet_in_proj", "_causal_conv1d_update_kernel", "_selective_scan_update_kernel",
                      "nvjet_out_proj", "COPY post-projection"],
            "attention": ["nvjet_qkv_proj", "reshape_and_cache_flash_kernel", "flash_fwd_kernel", "nvjet_o_proj"],
            "moe": ["nvjet_router", "grouped_topk_kernel", "fused_moe_kernel", "fused_moe_kernel",
                    "moe_sum_vec_kernel", "COPY mlp-output"],
            "mlp": ["nvjet_up_proj", "triton_poi_fused_pow_relu_3", "nvjet_down_proj"]}
    ops = ["index_kernel", "COPY metadata", "prepare_varlen_num_blocks_kernel"]
    expect_layer = [-1]
    for i, kind in enumerate(kinds):
        ops.append(f"triton_red_fused_add_rms_norm_{i}")
        ops += body[kind]
        expect_layer += [i] * sum(op.startswith("COPY") for op in body[kind])
    ops += ["triton_red_fused_add_rms_norm_final", "nvjet_lm_head"]
    names = np.array(sorted(set(ops)), dtype=object)
    code = {n: i for i, n in enumerate(names.tolist())}
    codes = np.array([code[o] for o in ops], dtype=np.int64)
    structural = np.array([not o.startswith("COPY") for o in ops])
    copies = [(p, o.split()[1], ell) for (p, o), ell in
              zip([(p, o) for p, o in enumerate(ops) if o.startswith("COPY")], expect_layer)]
    return codes, structural, names, copies


@pytest.mark.parametrize("kinds", [
    ("mamba", "moe", "mamba", "attention", "moe", "mamba", "mlp", "mamba", "attention", "moe"),  # corpus MEM*EM-M*E
    ("moe", "mamba", "mlp", "attention", "moe", "mamba", "moe", "attention"),  # an MLP-only first layer
])
def test_single_block_layers_are_found_from_each_kinds_own_kernels(kinds):
    """No kernel runs once per layer, but each kind's mixer or block runs once in each of its
    layers: the layers are found from those, the MoE output copy stays in its MoE layer (read as
    attention + MLP pairs it went to the mixer layer before), and nothing disagrees with the kinds."""
    from copyprof.analysis.census.copy_sites import NameRoles, place_copies

    codes, structural, names, copies = _single_block_step(kinds)
    lm = map_layers(codes, structural, kinds, names)
    assert lm.status == "ok", lm.message
    assert {lm.kinds.agree.get(n) for n in ("_causal_conv1d_update_kernel", "flash_fwd_kernel", "fused_moe_kernel")} \
        == {"mamba", "attention", "moe"}
    # Only the dense MLP kind, of one layer, has count coincidences: every kernel launched once
    # matches it (the report leaves those out: MLP-only kinds run nothing of their own).
    assert {k for k, _ in lm.kinds.disagree.values()} <= {"mlp"}
    fused = int(np.flatnonzero(names == "fused_moe_kernel")[0])
    assert sorted(set(lm.op_layer[codes == fused].tolist())) == [i for i, k in enumerate(kinds) if k == "moe"]
    code_of = {str(n): i for i, n in enumerate(names.tolist())}
    kind_names = {code_of[n]: k for n, k in lm.kinds.agree.items()}
    at = np.array([p for p, _, _ in copies])
    sites = place_copies(codes, structural, at, lm, kind_names, kinds, NameRoles.of(names))
    assert list(sites.role) == [r for _, r, _ in copies]
    assert sites.layer.tolist() == [ell for _, _, ell in copies]
