"""The result cache: a repeated report on an unchanged run is served from one JSON entry —
byte-identical output in every format, without numpy or pandas — and anything that could
change the analysis (a trace, run.json, the model, --rank, --all-steps, copyprof's code) is a
miss. A damaged entry is a miss, never an error."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from copyprof.cache import results as result_cache
from tests.conftest import REPO, run_cli

PAIR = ("replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261130T042336Z",
        "replica-kimi-k3-tp8-c16-cuda-graph-candidate-20261130T042336Z")


@pytest.fixture
def run_dir(tmp_path, monkeypatch) -> Path:
    """A copy of a shipped H200 replica run (trace, run.json, timing.json) and a private cache."""
    dst = tmp_path / "base"
    shutil.copytree(REPO / "traces" / PAIR[0], dst)
    monkeypatch.setenv("COPYPROF_CACHE_DIR", str(tmp_path / "cache"))
    return dst


def _entries(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "results").glob("*.json"))


@pytest.mark.parametrize("fmt", ["json", "markdown", "csv", "table"])
def test_cached_report_is_identical_in_every_format(tmp_path, run_dir, fmt):
    args = ("report", str(run_dir), "--model", "kimi-k3", "--format", fmt)
    fresh = run_cli(*args, "--no-cache", check=True).stdout
    cold = run_cli(*args, check=True).stdout
    assert len(_entries(tmp_path)) == 1
    warm = run_cli(*args, check=True).stdout
    assert fresh == cold == warm
    if fmt == "json":  # the report is not empty: 93 copies attributed per step
        assert json.loads(warm)["runs"][0]["per_step"]["post_proj"]["total"] == 93


def test_warm_report_imports_neither_numpy_nor_pandas(tmp_path, run_dir):
    args = ["report", str(run_dir), "--model", "kimi-k3", "--format", "json"]
    run_cli(*args, check=True)
    probe = ("import sys; sys.argv = ['copyprof', *sys.argv[1:]]\n"
             "from copyprof.cli.main import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in ('numpy', 'pandas', 'scipy') if m in sys.modules), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=REPO,
                          env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "[]"
    assert json.loads(proc.stdout)["runs"][0]["per_step"]["post_proj"]["total"] == 93


@pytest.mark.parametrize("change", ["run.json", "trace", "model", "rank", "all-steps"])
def test_what_changes_the_analysis_is_a_miss(tmp_path, run_dir, change):
    args = ["report", str(run_dir), "--model", "kimi-k3", "--format", "json"]
    first = json.loads(run_cli(*args, check=True).stdout)
    if change == "run.json":
        doc = json.loads((run_dir / "run.json").read_text())
        doc["status"] = "failed: edited by the test"
        (run_dir / "run.json").write_text(json.dumps(doc))
    elif change == "trace":  # same size and mtime, other content: only the hash tells
        trace = next(run_dir.glob("*.pt.trace.json.gz"))
        st = trace.stat()
        other = next((REPO / "traces" / PAIR[1]).glob("*.pt.trace.json.gz")).read_bytes()
        data = (other + b"\0" * st.st_size)[: st.st_size] if len(other) <= st.st_size else other[: st.st_size]
        trace.write_bytes(data)
        os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif change == "model":
        args[args.index("kimi-k3")] = "kimi-linear-48b-a3b"
    elif change == "rank":
        args += ["--rank", "0"]
    else:
        args += ["--all-steps"]
    proc = run_cli(*args)
    assert len(_entries(tmp_path)) == (1 if change in ("run.json", "trace") and proc.returncode else 2)
    if change == "run.json":
        assert "did not complete" in json.loads(proc.stdout)["runs"][0]["warnings"][0]
    elif change == "model":
        assert json.loads(proc.stdout)["runs"][0]["layout"]["name"] == "kimi-linear-48b-a3b"
    elif change == "trace":  # a cut candidate trace: read partly, or refused; never the old figures
        assert proc.returncode != 0 or json.loads(proc.stdout)["runs"][0] != first["runs"][0]


@pytest.mark.parametrize("damage", [b"", b"{", b'{"key": "other", "result": {}}', b"\xff\xfe not json"])
def test_damaged_entry_is_a_miss_and_rewritten(tmp_path, run_dir, damage):
    args = ("report", str(run_dir), "--model", "kimi-k3", "--format", "json")
    first = run_cli(*args, check=True).stdout
    [entry] = _entries(tmp_path)
    entry.write_bytes(damage)
    again = run_cli(*args, check=True)
    assert again.stdout == first and again.stderr == ""
    assert json.loads(entry.read_text())["result"]["path"] == str(run_dir)


def test_plot_from_a_cached_result(tmp_path, run_dir):
    args = ("report", str(run_dir), "--model", "kimi-k3", "--format", "json")
    run_cli(*args, check=True)
    run_cli(*args, "--plot", str(tmp_path / "a.png"), check=True)  # served from the entry
    assert (tmp_path / "a.png").stat().st_size > 10_000


def test_result_json_cannot_hold_is_not_cached(tmp_path, run_dir, monkeypatch):
    from copyprof.cli import report_cmd

    monkeypatch.setenv("COPYPROF_CACHE_DIR", str(tmp_path / "cache"))
    report = report_cmd._load_run(str(run_dir), None, None, False, 1, False)
    # A typed report reads back exactly (same types, same values) ...
    assert result_cache.store_result("k" * 40, report)
    assert result_cache.load_result("k" * 40) == report
    # ... and one that would not (a tuple comes back a list, NaN comes back null) is not stored.
    for odd in ({"metadata": {**report.metadata, "x": (1, 2)}}, {"step_series": {"period_ms": [1.5, float("nan")]}}):
        assert not result_cache.store_result("j" * 40, msgspec.structs.replace(report, **odd))
    assert result_cache.load_result("j" * 40) is None
    assert result_cache.load_result(None) is None and result_cache.load_result("0" * 40) is None


def test_entry_from_other_code_is_a_miss(tmp_path, run_dir, monkeypatch):
    """The key holds the hash of every copyprof source file: other code, other entry."""
    from copyprof.readers.discover import discover

    [src] = discover([str(run_dir)])
    key = result_cache.result_key(str(run_dir), [src.paths], {"layout": None})
    assert key == result_cache.result_key(str(run_dir), [src.paths], {"layout": None})
    monkeypatch.setattr(result_cache, "package_hash", lambda: "0" * 32)
    assert result_cache.result_key(str(run_dir), [src.paths], {"layout": None}) != key


def test_file_changed_while_read_is_not_cached(tmp_path, run_dir, monkeypatch):
    """A trace still being written (a live capture) changes between the key and the end of the
    analysis: the result must not be stored under the old content's key."""
    from copyprof.cli import report_cmd

    trace = next(run_dir.glob("*.pt.trace.json.gz"))
    real = report_cmd._analyze

    def analyze_then_touch(*args, **kw):
        out = real(*args, **kw)
        trace.write_bytes(trace.read_bytes())  # same bytes, new mtime/ctime: another file now
        return out

    monkeypatch.setattr(report_cmd, "_analyze", analyze_then_touch)
    first = report_cmd._load_run(str(run_dir), None, None, False, 1, True)
    assert first.steps.decode > 0 and _entries(tmp_path) == []
    monkeypatch.setattr(report_cmd, "_analyze", real)
    report_cmd._load_run(str(run_dir), None, None, False, 1, True)
    assert len(_entries(tmp_path)) == 1  # unchanged since: cached
