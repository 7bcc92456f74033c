"""copyprof's census of every real vLLM capture against its ground truth (corpus/truth/).

Each decode step's copies — bytes, role, 1-indexed decoder layer — must be exactly the truth's
(which is one step, and every step of a capture has the same copies: label.py checks that), and
every eager copy must name the vLLM function the truth names. A wrong role fails here: the
fused-MoE output copy called post-projection, an MLA projection copy missed, a KDA placement copy
taken for the projection's.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tests.corpus.conftest import CORPUS, RUNS, run_named, truth

NAMES = [r["name"] for r in RUNS]


def _step_copies(a, step: int) -> list[tuple[int, str, int]]:
    cp = a.rank.census.copies
    mine = cp[cp["step"] == step]
    return [(int(b), str(r), int(ell)) for b, r, ell in zip(mine["bytes"], mine["role"], mine["layer"])]


@pytest.mark.parametrize("name", NAMES)
def test_every_step_has_the_truths_copies_roles_and_layers(name, analysed):
    a = analysed(name)
    t = truth(a.run)
    want = Counter((c["bytes"], c["role"], c["layer"]) for c in t["copies"])
    assert len(a.rank.steps.decode) == t["steps"], "every annotated decode step is counted"
    steps = sorted(a.rank.census.copies.to_pandas()["step"].unique()) if len(a.rank.census.copies) else []
    if t["copies_per_step"]:
        assert len(steps) == t["steps"]
    for s in steps:
        got = Counter(_step_copies(a, int(s)))
        assert got == want, (f"step {s}: copyprof has {sorted((got - want).items())} where the truth has "
                             f"{sorted((want - got).items())}")


@pytest.mark.parametrize("name", [n for n in NAMES if "-eager-" in n])
def test_eager_copies_name_the_truths_vllm_function(name, analysed):
    a = analysed(name)
    t = truth(a.run)
    cp = a.rank.census.copies
    first = cp[cp["step"] == cp["step"].min()] if len(cp) else cp
    got = Counter((int(b), str(r), int(ell), s) for b, r, ell, s in
                  zip(first["bytes"], first["role"], first["layer"], first["source"]))
    want = Counter((c["bytes"], c["role"], c["layer"], c["source"]) for c in t["copies"])
    assert got == want


@pytest.mark.parametrize("name", NAMES)
def test_post_projection_counts_per_kind_are_the_truths(name, analysed):
    """The headline figure: post-projection copies per step, by layer kind."""
    from copyprof.analysis.rank_figures import per_step_medians

    a = analysed(name)
    t = truth(a.run)
    want = {k: n for k, n in t["by_role"].get("post-projection", {}).items()}
    got = {k: v for k, v in per_step_medians(a.rank).post_proj.items() if k != "total" and v}
    assert got == want


def test_the_truth_files_are_what_the_labeller_reads_from_the_traces():
    """corpus/truth/*.json are re-derived from the traces by the stdlib labeller (no copyprof code):
    here the first run of each model shape and mode, every rule the labeller has (all 25 runs:
    ``python3 corpus/truth/label.py --check``, on demand; a re-derivation of all took 25 s of CI)."""
    import subprocess
    import sys

    from tests.corpus.conftest import CORPUS

    first: dict[tuple[str, str], str] = {}
    for r in RUNS:
        first.setdefault((r["model"], r["mode"]), r["name"])
    assert len(first) == 12  # 6 shapes x graph/eager
    res = subprocess.run([sys.executable, str(CORPUS / "truth" / "label.py"), "--check", "--runs",
                          ",".join(first.values())], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


def test_kimi_graph_mode_has_moe_output_copies_and_no_post_projection(analysed):
    """Inductor removed Kimi's output[:] copies in the compiled graph: the [16, 2304] copies after
    moe_sum_vec_kernel are the fused-MoE output (topk_weight_and_reduce.py), not MLA post-projection."""
    a = analysed(run_named("kimi-linear-12l-c16-graph-baseline")["name"])
    cp = a.rank.census.copies
    step = cp[cp["step"] == cp["step"].min()]
    assert (step["role"] == "post-projection").sum() == 0
    moe = step[step["role"] == "mlp-output"]
    assert len(moe) == 11 and set(moe["bytes"]) == {16 * 2304 * 2}
    assert set(moe["layer"]) == set(range(2, 13)), "one per MoE layer (layer 1 is dense)"


@pytest.mark.parametrize("name", NAMES)
def test_a_gpu_only_timeline_gets_the_truths_steps_or_none(name):
    """The real timelines with their host side removed (what a rocprofv3 CSV without markers
    holds): the idle-gap rule either finds steps whose copies are the truth's per step, or says
    it found none; never steps of another size. Where vLLM's graph launch leaves the GPU idle
    inside each step as long as between steps, it finds none (most graph captures here)."""
    from copyprof.analysis.census.count import take_census
    from copyprof.analysis.steps.segment import segment
    from copyprof.reading import read_runs

    r = run_named(name)
    ev = next(t for t in read_runs([str(CORPUS / "runs" / name)]) if t.meta.role == "rank").table
    gpu = ev[ev["on_gpu"] & ev["kind"].isin(["kernel", "memcpy", "memset"])]
    gpu["correlation"] = np.full(len(gpu), -1, dtype=np.int64)
    steps = segment(gpu)
    assert steps.rule in ("idle-gap", "none")
    if steps.rule == "none":
        assert steps.warnings[0].startswith("no steps were found")
        return
    assert len(steps.decode) >= truth(r)["steps"] // 2
    per_step = take_census(gpu, steps, None).per_step["copies"]
    assert set(per_step) == {truth(r)["copies_per_step"]}
