"""Nemotron-H (corpus/models/nemotron-h-10l, ``hybrid_override_pattern`` "MEM*EM-M*E"): layers
of one norm and one mixer — mamba, attention — or one norm and one MLP/MoE block, read in
graph replay (Inductor fuses each layer's norm into a differently named kernel, so no kernel
runs once per layer) and eagerly.

Expectations come from the model's config and the stdlib truth (corpus/truth/label.py), never
from copyprof's output: the kinds are the config's letters in the model's own words
(vLLM's ``NemotronHConfig.layers_block_type``), and the fused-MoE output copy
(``topk_weight_and_reduce.py`` L76) sits in each ``E`` layer.
"""
from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.corpus.conftest import CORPUS, RUNS, truth

NEMOTRON = [r["name"] for r in RUNS if r["model"].startswith("nemotron-h")]
WORDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


def _pattern(run) -> str:
    return json.loads((CORPUS / "models" / run["model"] / "config.json").read_text())["hybrid_override_pattern"]


def test_both_modes_are_in_the_corpus():
    assert sorted(r["mode"] for r in RUNS if r["name"] in NEMOTRON) == ["eager", "graph"]


@pytest.mark.parametrize("name", NEMOTRON)
def test_the_layout_names_each_layer_in_the_models_own_words(name, analysed):
    a = analysed(name)
    want = tuple(WORDS[c] for c in _pattern(a.run))
    assert a.layout.layer_kinds == want
    assert list(want) == truth(a.run)["layer_kinds"], "the truth reads the same pattern"


@pytest.mark.parametrize("name", NEMOTRON)
def test_every_copy_has_the_truths_role_layer_and_kind(name, analysed):
    """A copy handed to the mixer layer before its MoE layer (the attention + MLP reading of a
    single-block layer) or a layer map off by one fails here, in every step."""
    a = analysed(name)
    t = truth(a.run)
    want = Counter((c["bytes"], c["role"], c["layer"], c["kind"]) for c in t["copies"])
    cp = a.rank.census.copies.to_pandas()
    assert cp["step"].nunique() == t["steps"]
    for step, g in cp.groupby("step"):
        got = Counter((int(b), str(r), int(ell), str(k)) for b, r, ell, k in
                      zip(g["bytes"], g["role"], g["layer"], g["kind"]))
        assert got == want, f"step {step}: {sorted((got - want).items())} for {sorted((want - got).items())}"


@pytest.mark.parametrize("name", NEMOTRON)
def test_the_moe_output_copies_are_in_the_moe_layers_of_the_pattern(name, analysed):
    a = analysed(name)
    moe_layers = [i + 1 for i, c in enumerate(_pattern(a.run)) if c == "E"]
    cp = a.rank.census.copies.to_pandas()
    out = cp[cp["role"] == "mlp-output"]
    for _, g in out.groupby("step"):
        assert g["layer"].tolist() == moe_layers and set(g["kind"]) == {"moe"}
    assert (out["bytes"] == 16 * 2688 * 2).all(), "[N, hidden] bf16 at N = 16"


@pytest.mark.parametrize("name", NEMOTRON)
def test_layers_are_found_from_the_kernels_and_no_kind_disagrees(name, analysed):
    att = analysed(name).rank.census.attribution
    assert att.method == "structure" and att.layers_found == 10
    assert att.kind_disagreements == [], att.kind_disagreements
    # every mixer kind is confirmed by kernels of its own (mamba's scan, attention's core, the
    # MoE routing); the dense MLP layer may have none (its GEMMs and relu^2 are the shared
    # experts' too)
    assert {"mamba", "attention", "moe"} <= set(att.kind_kernels)
