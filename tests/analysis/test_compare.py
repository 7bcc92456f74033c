"""`copyprof report BASELINE CANDIDATE` on generated arms with a known effect.

The candidate arms are the same generator with the direct-return patch applied to a scope:
its post-projection copies are gone and the step period is shorter by exactly the removed
copies plus their 0.9 µs dispatch gaps (see tests/synth/kimi.py). So the truth is known:
MLA scope at C16 removes 24 copies, kernel estimate ~0.128 ms, kernel+gap ~0.150 ms.
"""
from __future__ import annotations

import pytest

from tests.conftest import cli_json, run_cli
from tests.synth.kimi import C16, write_kineto, write_rocprofv3_csv

CONTRACT = {"baseline", "candidate", "estimate_ms", "measured_ms", "ci95_ms", "noise_ms", "mde_ms", "steps_needed",
            "removed_sites", "verdict"}


@pytest.fixture(scope="module")
def arms(tmp_path_factory):
    d = tmp_path_factory.mktemp("ab")
    base = write_kineto(d / "base.json.gz", C16, steps=30, seed=1)
    mla = write_kineto(d / "mla.json.gz", C16, steps=30, seed=2, removed=("mla",))
    both = write_kineto(d / "both.json.gz", C16, steps=30, seed=3, removed=("mla", "kda"))
    same = write_kineto(d / "same.json.gz", C16, steps=30, seed=4)
    return {"base": str(base), "mla": str(mla), "both": str(both), "same": str(same), "dir": d}


def test_mla_patch_scope_estimate_and_measurement(arms):
    out = cli_json("report", arms["base"], arms["mla"], "--model", "kimi-k3")
    cmp = out["comparison"]
    assert CONTRACT <= set(cmp)
    assert cmp["baseline"] == 0 and cmp["candidate"] == 1
    assert cmp["scope"] == "mla" and "24 MLA post-projection copies gone, 69 KDA still there" in cmp["scope_text"]
    assert cmp["removed_sites"] == [{"bytes": 229376, "layer_kind": "mla", "per_step": 24}]
    assert cmp["estimate_ms"]["kernel"] == pytest.approx(24 * 5.33e-3, rel=0.02)
    assert cmp["estimate_ms"]["kernel_plus_gap"] == pytest.approx(24 * (5.33 + 0.9) * 1e-3, rel=0.02)
    # The generator removed copy + gap from the period: the interval on these two runs' steps
    # (finite at 30 steps) must cover it ...
    lo, hi = cmp["ci95_ms"]
    assert lo <= 24 * (5.33 + 0.9) * 1e-3 <= hi
    # ... but the traces say vLLM: separate server boots, one per arm, so no boot-dependent
    # measure is resolved and the verdict says what is missing.
    assert cmp["replication"] == "boots" and cmp["runs_per_arm"] == {"baseline": 1, "candidate": 1, "aa": 0}
    assert cmp["verdict"].startswith("not resolvable: the between-run variation is unmeasured")
    assert all(m["key"] in ("unmeasured", "descriptive") and not m["resolved"] for m in cmp["measures"])


def test_a_twenty_step_pair_has_a_finite_interval_that_holds_the_truth(arms):
    base = write_kineto(arms["dir"] / "base20.json.gz", C16, steps=20, seed=11)
    mla = write_kineto(arms["dir"] / "mla20.json.gz", C16, steps=20, seed=12, removed=("mla",))
    cmp = cli_json("report", str(base), str(mla), "--model", "kimi-k3")["comparison"]
    lo, hi = cmp["ci95_ms"]
    assert lo is not None and hi is not None and lo <= 24 * (5.33 + 0.9) * 1e-3 <= hi


def test_both_scopes_removed(arms):
    cmp = cli_json("report", arms["base"], arms["both"], "--model", "kimi-k3")["comparison"]
    assert cmp["scope"] == "all"
    assert sorted((r["layer_kind"], r["per_step"]) for r in cmp["removed_sites"]) == [("kda", 69), ("mla", 24)]
    assert cmp["estimate_ms"]["kernel"] == pytest.approx(0.495, abs=0.003)


def test_same_build_removes_nothing(arms):
    cmp = cli_json("report", arms["base"], arms["same"], "--model", "kimi-k3")["comparison"]
    assert cmp["scope"] is None and cmp["removed_sites"] == [] and cmp["estimate_ms"]["kernel"] == 0.0
    lo, hi = cmp["ci95_ms"]
    assert lo <= 0 <= hi  # same generator, independent noise: no shift
    assert cmp["scope_text"].startswith("all 93 post-projection copies still there")
    assert cmp["verdict"].startswith("not resolvable: the between-run variation is unmeasured")


def test_known_sizes_from_rocprofv3_csv(arms):
    base = write_rocprofv3_csv(arms["dir"] / "csv_base", C16, steps=20, seed=5)
    cand = write_rocprofv3_csv(arms["dir"] / "csv_mla", C16, steps=20, seed=6, removed=("mla",))
    cmp = cli_json("report", str(base), str(cand), "--model", "kimi-k3")["comparison"]
    assert cmp["scope"] == "mla"
    assert cmp["removed_sites"] == [{"bytes": 229376, "layer_kind": "mla", "per_step": 24}]


def test_markdown_and_plot(arms):
    plot = arms["dir"] / "ab.png"
    proc = run_cli("report", arms["base"], arms["mla"], "--model", "kimi-k3", "--format", "markdown",
                   "--labels", "main,direct-return", "--plot", str(plot), check=True)
    md = proc.stdout
    # a self-contained attachment: title, the headline in bold, setup per arm, the command, then tables
    assert md.startswith("## copyprof: direct-return vs main\n\n**direct-return vs main: 24 MLA post-projection")
    assert "### main" in md and "### direct-return" in md and "**Setup.**" in md
    assert "**Command.** `copyprof report " in md and "--labels main,direct-return" in md
    assert "### A/B: main vs direct-return" in md and "**Verdicts**" in md
    assert "| post-projection, MLA layers | 24 |" in md
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"copyprof: plot written to {plot}" in proc.stderr  # the user learns where it went


def test_plot_into_a_missing_folder_is_a_one_line_error(arms):
    plot = arms["dir"] / "no-such-folder" / "ab.png"
    proc = run_cli("report", arms["base"], "--model", "kimi-k3", "--plot", str(plot))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "does not exist" in proc.stderr and str(plot) in proc.stderr
    assert not plot.parent.exists()


def test_three_runs_is_an_error(arms):
    proc = run_cli("report", arms["base"], arms["mla"], arms["same"])
    assert proc.returncode == 2 and "report takes one run, a baseline and a candidate, or --baseline" in proc.stderr
