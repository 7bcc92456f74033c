"""Replica engine on the CPU, end to end (`copyprof run --engine replica` -> `report`), plus the
run-directory rules it relies on.

The CPU run uses Kimi-Linear-48B-A3B at TP8 (27 layers: 20 KDA + 7 MLA, hidden 2304) with a
tiny window so the whole module stays well under a minute on two cores.
"""
from __future__ import annotations

import gzip
import json
import os
import re
from collections import Counter
from pathlib import Path

import pytest

from copyprof.rundir import layout as rundir
from copyprof.rundir.layout import (
    new_run_dir,
    update_run_json,
    write_run_json,
)
from copyprof.rundir.record import RunRecord, load_run_record
from copyprof.errors import CopyprofError
from tests.capture.on_disk import read_run_json
from tests.conftest import cli_json, run_cli

N = 4  # tokens per decode step
STEPS = 3
HIDDEN = 2304
KDA_WIDTH = 512  # 32 KDA heads / TP8 * 128
TS_RE = r"\d{8}T\d{6}Z(-\d+)?"


# ----------------------------------------------------------------------------- run directories

def test_new_run_dir_never_overwrites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rundir, "_utc_stamp", lambda: "20260101T000000Z")
    first = new_run_dir(tmp_path, "lbl")
    assert first.name == "lbl-20260101T000000Z" and first.is_dir() and not any(first.iterdir())
    (first / "keep.txt").write_text("precious")
    # Someone else holds "-2" already (non-empty): it must be skipped, not reused.
    taken = tmp_path / "lbl-20260101T000000Z-2"
    taken.mkdir()
    (taken / "other.txt").write_text("theirs")
    third = new_run_dir(tmp_path, "lbl")
    assert third.name == "lbl-20260101T000000Z-3"
    assert (first / "keep.txt").read_text() == "precious"
    assert (taken / "other.txt").read_text() == "theirs"
    assert sorted(p.name for p in taken.iterdir()) == ["other.txt"]
    # An existing EMPTY folder of the next name is not reused either (mkdir is the claim).
    (tmp_path / "lbl-20260101T000000Z-4").mkdir()
    assert new_run_dir(tmp_path, "lbl").name == "lbl-20260101T000000Z-5"


def test_new_run_dir_refuses_bad_labels_and_file_out(tmp_path: Path) -> None:
    for bad in ("../x", "a/b", "", ".hidden"):
        with pytest.raises(CopyprofError):
            new_run_dir(tmp_path, bad)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(CopyprofError):
        new_run_dir(f, "ok")
    made = new_run_dir(tmp_path / "new" / "deep", "ok")
    assert made.parent == tmp_path / "new" / "deep"


def test_run_json_atomic_update(tmp_path: Path) -> None:
    d = new_run_dir(tmp_path, "r")
    write_run_json(d, RunRecord(status="starting", label="a", finished=None))
    update_run_json(d, status="capturing", files=["x", "y"])
    assert read_run_json(d) == {"status": "capturing", "label": "a", "finished": None, "files": ["x", "y"]}
    assert load_run_record(d) == RunRecord(status="capturing", label="a", finished=None, files=["x", "y"])
    assert sorted(p.name for p in d.iterdir()) == ["run.json"]  # no temporary file left behind
    with pytest.raises(TypeError):  # a field run.json does not have is a writer's mistake
        update_run_json(d, no_such_field=1)
    assert rundir.failed_status("boom\n  at line 3") == "failed: boom at line 3"


# ----------------------------------------------------------------------------- replica on the CPU

@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """One baseline/candidate pair, captured by ``copyprof run --engine replica`` in a process
    of its own, as a user runs it; the tests below read what it wrote, the last one reports it.

    One warm-up step: the CPU's bf16 GEMMs (no native bf16 units here) take seconds a step, and
    nothing below reads the warm-up. The smallest window and timing that still exercise
    everything below (several steps, >= 2 timing blocks, the pair's timing.json), over a
    32-token context: what is counted (copies per layer) does not depend on the context's
    length, and a CPU step over the default 4,096 tokens of MLA context costs seconds."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("traces")
    proc = run_cli("run", "--engine", "replica", "--model", "kimi-linear-48b-a3b", "--tp", "8",
                   "--concurrency", str(N), "--device", "cpu", "--arm", "both", "--steps", str(STEPS),
                   "--timing-blocks", "2", "--timing-replays", "1", "--warmup", "1", "--context", "32",
                   "--record-shapes", "--label", "t", "--out", str(out), check=True)
    dirs = [Path(line) for line in proc.stdout.splitlines() if line.strip()]
    return [next(d for d in dirs if "-baseline-" in d.name), next(d for d in dirs if "-candidate-" in d.name)]


def _trace(run_dir: Path) -> dict:
    (path,) = list(run_dir.glob("rank0.*.pt.trace.json.gz"))
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def _copies_per_step(trace: dict) -> list[Counter]:
    """Per step annotation: aten::copy_ CPU ops keyed by (dst dims, dst dtype, src dtype)."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in events if e.get("cat") == "user_annotation"), key=lambda e: e["ts"])
    out = [Counter() for _ in steps]
    for e in events:
        if e.get("cat") != "cpu_op" or e["name"] != "aten::copy_":
            continue
        for i, s in enumerate(steps):
            if s["ts"] <= e["ts"] <= s["ts"] + s["dur"]:
                args = e["args"]
                out[i][(tuple(args["Input Dims"][0]), args["Input type"][0], args["Input type"][1])] += 1
                out[i]["total"] += 1
    return out


def test_run_dir_layout_and_run_json(cpu_runs: list[Path]) -> None:
    base, cand = cpu_runs
    assert re.fullmatch(rf"t-baseline-{TS_RE}", base.name) and re.fullmatch(rf"t-candidate-{TS_RE}", cand.name)
    for arm, d in (("baseline", base), ("candidate", cand)):
        names = sorted(p.name for p in d.iterdir())
        assert len(names) == 3, names
        assert re.fullmatch(r"rank0\.\d+\.pt\.trace\.json\.gz", names[0]) and names[1:] == ["run.json", "timing.json"]
        run = json.loads((d / "run.json").read_text())
        assert run["status"] == "complete" and run["engine"] == "replica" and run["arm"] == arm
        assert run["graph_mode"] == "eager" and run["tp"] == 8 and run["concurrency"] == N and run["steps"] == STEPS
        assert run["model"] == {"name": "kimi-linear-48b-a3b", "hf_id": "moonshotai/Kimi-Linear-48B-A3B-Instruct",
                                "layers": 27, "hidden": HIDDEN, "kinds": {"mla": 7, "kda": 20},
                                "layer_kinds": "KKKM" * 6 + "KKM", "source": "preset", "mla_layers": 7, "kda_layers": 20}
        assert run["removed_kinds"] == ([] if arm == "baseline" else ["kda", "mla"])
        for key in ("copyprof_version", "command", "device", "torch_version", "cuda_version", "host", "started",
                    "finished", "files"):
            assert key in run, key
        assert run["device"]["type"] == "cpu" and run["finished"] >= run["started"]
        assert sorted(run["files"]) == names[:1] + ["timing.json"]
        assert run["pair"] == (cand if arm == "baseline" else base).name
        assert "tests only" in run["note"]
        assert run["torch"] == {"version": run["torch_version"], "hip": None, "cuda": run["cuda_version"]}
        assert load_run_record(d).status == "complete"  # what the capture wrote reads as the typed record


def test_timing_json_is_interleaved(cpu_runs: list[Path]) -> None:
    a = json.loads((cpu_runs[0] / "timing.json").read_text())
    assert a == json.loads((cpu_runs[1] / "timing.json").read_text())  # same content in both run dirs
    assert a["blocks"] == 2 and a["replays_per_block"] == 1
    assert a["arm_order"] == ["baseline", "candidate", "candidate", "baseline"]
    assert all(len(a["per_block_ms"][arm]) == 2 and min(a["per_block_ms"][arm]) > 0 for arm in ("baseline", "candidate"))
    assert a["device"]["type"] == "cpu" and "torch_version" in a


def test_step_annotations(cpu_runs: list[Path]) -> None:
    for d in cpu_runs:
        names = [e["name"] for e in _trace(d)["traceEvents"] if e.get("cat") == "user_annotation"]
        assert names == [f"execute_context_0(0)_generation_{N}({N})"] * STEPS


def test_baseline_has_27_more_post_projection_copies_per_step(cpu_runs: list[Path]) -> None:
    # Kimi-Linear-48B has 27 decoder layers (20 KDA + 7 MLA). In the baseline every layer's
    # attention writes o_proj's [N, hidden=2304] bf16 output into a caller-owned buffer
    # (output[:] = o_proj(x)): one same-dtype aten::copy_ per layer. The candidate returns
    # the projection, so it has none; every other copy (KDA placement copies [N, 512], the
    # CPU kernels' fp32<->bf16 conversions) is the same in both arms.
    post = ((N, HIDDEN), "c10::BFloat16", "c10::BFloat16")
    placement = ((N, KDA_WIDTH), "c10::BFloat16", "c10::BFloat16")
    base, cand = (_copies_per_step(_trace(d)) for d in cpu_runs)
    assert len(base) == len(cand) == STEPS
    for b, c in zip(base, cand):
        assert b[post] == 27 and c[post] == 0
        assert b["total"] - c["total"] == 27
        assert b[placement] == c[placement] == 20  # KDA recurrent-output placement copy: both arms
        assert b - Counter({post: 27, "total": 27}) == c


def test_the_pair_reports_27_fewer_host_copies_per_step(cpu_runs: list[Path]) -> None:
    # A CPU trace has no device timeline, so the report counts host copy ops and says so; the
    # baseline's 27 post-projection copies per step (one per layer) are the difference.
    base, cand = cpu_runs
    out = json.loads(run_cli("report", str(base), str(cand), "--model", "kimi-linear-48b-a3b", "--format", "json",
                             check=True).stdout)
    b, c = out["runs"]
    assert b["steps"]["decode"] == STEPS and c["steps"]["decode"] == STEPS
    assert b["steps"]["rule"].startswith("cpu-annotation")
    assert b["per_step"]["host_copies"] - c["per_step"]["host_copies"] == 27
    assert any("no device copies can exist" in n for n in b["notes"])
    assert "27 fewer in the candidate" in out["comparison"]["scope_text"]
    assert out["comparison"]["timing"]["blocks"] == 2  # the interleaved timing travelled with the pair


def test_failed_run_is_marked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from copyprof.capture.replica import model as replica_model
    from copyprof.capture.replica import run_replica

    def boom(*_a: object, **_k: object) -> None:
        raise RuntimeError("out of memory (simulated)")

    monkeypatch.setattr(replica_model, "ReplicaModel", boom)
    with pytest.raises(RuntimeError):
        run_replica("kimi-linear-48b-a3b", tp=8, concurrency=2, device="cpu", out=str(tmp_path), log=lambda _m: None)
    dirs = sorted(tmp_path.iterdir())
    assert len(dirs) == 2
    for d in dirs:
        run = read_run_json(d)
        assert run["status"] == "failed: RuntimeError: out of memory (simulated)" and run["finished"]


def test_tp_must_divide_heads(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from copyprof.capture.replica import run_replica

    with pytest.raises(CopyprofError, match="does not divide"):
        run_replica("kimi-linear-48b-a3b", tp=3, concurrency=2, device="cpu", out=str(tmp_path))
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # refused before any run dir is made


def test_copies_micro_capture_cpu(tmp_path: Path) -> None:
    # `copyprof run --engine copies` on the CPU: eager only, each variant replayed --steps times;
    # `inspect --steps` counts each `copies_<variant>` range's copies: 2 sizes -> 2 aten::copy_ each
    pytest.importorskip("torch")
    proc = run_cli("run", "--engine", "copies", "--device", "cpu", "--sizes", "4608,73728", "--steps", "2",
                   "--out", str(tmp_path), check=True)
    (d,) = list(tmp_path.iterdir())
    assert proc.stdout.strip() == str(d)
    assert d.name.startswith("copies-eager-") and read_run_json(d)["status"] == "complete"
    [f] = cli_json("inspect", str(d), "--steps")["files"]
    assert f["steps"]["pattern"] == "^copies_"
    assert f["steps"]["annotations"]["copies_static"] == {"steps": 2, "copies_per_step": {"cpu aten::copy_": 2}}
    assert os.path.exists(d / read_run_json(d)["files"][0])


# ----------------------------------------------------------------------------- any layout: Qwen3-Next

def test_qwen3_next_three_arms_on_the_cpu(tmp_path: Path) -> None:
    # Qwen3-Next-80B-A3B: 48 layers, full attention every 4th (12), gated delta-net on the other 36.
    # In vLLM both attentions write into a caller-owned buffer (`output[:], _ = self.o_proj(...)`,
    # `output[:num_tokens], _ = self.out_proj(...)`); the GDN also places its core output
    # (`core_attn_out[:num_actual_tokens] = ...`). Arms: baseline copies in all 48 layers, the
    # partial arm (--remove full_attention) in the 36 GDN layers, the candidate in none; the
    # GDN placement copies [N, 32/4 heads, 128] stay in every arm.
    # The first 12 of the 48 layers (3 full attention, 9 GDN; the same per-layer shapes and the
    # same pattern) keep the CPU run short: the random weights of 48 layers took 7 s to draw.
    pytest.importorskip("torch")
    import dataclasses

    from copyprof.capture.replica import run_replica
    from copyprof.models.presets import load_layout

    full = load_layout("qwen3-next-80b-a3b")
    assert full.layer_kinds.count("full_attention") == 12 and len(full.layer_kinds) == 48
    layout = dataclasses.replace(full, layer_kinds=full.layer_kinds[:12])
    n = 2
    dirs = run_replica(layout, tp=4, concurrency=n, device="cpu", steps=2, context=16, warmup=1,
                       remove=("full_attention",), timing_blocks=2, timing_replays=1, out=str(tmp_path), label="q",
                       record_shapes=True, log=lambda _m: None)
    arms = {read_run_json(d)["arm"]: d for d in dirs}
    assert set(arms) == {"baseline", "candidate", "partial"}
    post = ((n, 2048), "c10::BFloat16", "c10::BFloat16")
    placement = ((n, 8, 128), "c10::BFloat16", "c10::BFloat16")
    want = {"baseline": 12, "partial": 9, "candidate": 0}
    for arm, d in arms.items():
        for step in _copies_per_step(_trace(d)):
            assert step[post] == want[arm], arm
            assert step[placement] == 9, arm
    run = read_run_json(arms["partial"])
    assert run["removed_kinds"] == ["full_attention"]
    assert run["expected_copies_per_step"]["post_proj"]["partial"] == {"linear_attention": 9}
    timing = json.loads((arms["partial"] / "timing.json").read_text())
    assert set(timing["per_block_ms"]) == {"baseline", "candidate", "partial"}
    assert timing["arm_order"] == ["baseline", "candidate", "partial", "candidate", "partial", "baseline"]


def test_remove_must_name_attention_kinds(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from copyprof.capture.replica import run_replica

    with pytest.raises(CopyprofError, match="no attention layers of"):
        run_replica("qwen3-next-80b-a3b", tp=4, concurrency=2, device="cpu", remove=("mamba",), out=str(tmp_path))
