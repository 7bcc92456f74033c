"""`copyprof inspect`: the JSON contract and the one-line error behaviour, as a user runs it."""
from __future__ import annotations

import gzip

from tests.conftest import cli_json, run_cli

CONTRACT = {"path", "format", "flavour", "ranks", "counts", "d2d_copies", "d2d_by_name", "annotations", "graph_launches"}


def test_json_contract_on_vllm_decode_sample(samples):
    out = cli_json("inspect", str(samples / "kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz"))
    [f] = out["files"]
    assert CONTRACT <= set(f)
    # the contract's six kinds, and "python" (python_function frames of a trace with stacks): 984 in this
    # file (counted with stdlib json)
    assert set(f["counts"]) == {"kernel", "memcpy", "memset", "runtime", "annotation", "cpu_op", "python"}
    assert f["counts"]["python"] == 984
    assert all(isinstance(v, int) for v in f["counts"].values())
    # 9 `Memcpy DtoD` ops precede the graph; one hipGraphLaunch (counted with stdlib json).
    assert f["d2d_copies"] == 9 and f["d2d_by_name"] == {"Memcpy DtoD (Device -> Device)": 9}
    assert f["graph_launches"] == 1 and f["format"] == "kineto" and f["flavour"] == "roctracer"
    assert f["ranks"] == [0]
    assert list(f["annotations"].values()) == [1]


def test_inspect_directory_reads_every_trace(samples):
    out = cli_json("inspect", str(samples))
    formats = sorted(f["format"] for f in out["files"])
    # 5 Kineto files, 1 rocprofv3 JSON, 2 nsys SQLite exports.
    assert formats.count("kineto") == 5
    assert formats.count("rocprofv3-json") == 1
    assert formats.count("nsys-sqlite") == 2


def _one_line_error(proc, fragment: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("copyprof: error:"), proc.stderr
    assert fragment in lines[0]


def test_bad_inputs_give_one_line_errors(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    _one_line_error(run_cli("inspect", str(empty)), "empty.json: empty file")

    bad = tmp_path / "bad.json"
    bad.write_text("{\"traceEvents\": [{\"ph\": ")
    _one_line_error(run_cli("inspect", str(bad)), "bad.json")

    unknown = tmp_path / "notes.txt"
    unknown.write_text("hello, world\n")
    _one_line_error(run_cli("inspect", str(unknown)), "unknown trace format")

    broken_gz = tmp_path / "t.json.gz"
    broken_gz.write_bytes(gzip.compress(b"{\"traceEvents\": []}")[:10])
    _one_line_error(run_cli("inspect", str(broken_gz)), "t.json.gz")

    nodir = tmp_path / "empty_dir"
    nodir.mkdir()
    (nodir / "run.json").write_text("{}")
    # the error names the folder and how many files were looked at, as which formats
    _one_line_error(run_cli("inspect", str(nodir)), f"no trace found in {nodir} (looked at 1 file(s) for Kineto JSON")

    _one_line_error(run_cli("inspect", str(tmp_path / "missing.json")), "no such file")

    rep = tmp_path / "capture.nsys-rep"
    rep.write_bytes(b"\x00\x01binary")
    _one_line_error(run_cli("inspect", str(rep)), "nsys export --type sqlite")


def test_debug_shows_the_traceback(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    proc = run_cli("--debug", "inspect", str(empty))
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_partial_file_is_reported_not_fatal(samples, tmp_path):
    data = (samples / "kineto_cupti_a100_cudagraph_rank0.json.gz").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    [f] = cli_json("inspect", str(cut))["files"]
    assert f["partial"] and "gzip stream ends" in f["partial"]
    assert 0 < f["counts"]["kernel"] < 6080


def test_inspect_is_the_same_cached_parallel_or_serial_and_fills_the_report_cache(tmp_path, monkeypatch):
    # inspect reads through the same table cache and decode pool as report (cli/read_progress.py):
    # its JSON must not depend on either, and a report after it must find the table cached.
    # The replica capture's rank file is 78 MB of JSON: big enough for the decode pool.
    import os
    from pathlib import Path

    from tests.conftest import REPO

    monkeypatch.setenv("COPYPROF_CACHE_DIR", str(tmp_path / "cache"))
    run = sorted((REPO / "traces").glob("replica-kimi-k3-tp8-c24-cuda-graph-baseline-2*"))[0]
    trace = str(sorted(run.glob("rank0.*"))[0])
    serial = cli_json("inspect", "--no-cache", "--jobs", "1", trace)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.npz"))  # --no-cache stores nothing
    cold = cli_json("inspect", "--jobs", "2", trace)
    entries = sorted(Path(tmp_path / "cache").rglob("*.npz"))
    assert len(entries) == 1  # one table, for the one file
    warm = cli_json("inspect", "--jobs", "2", trace)
    assert serial == cold == warm
    inode = os.stat(entries[0]).st_ino  # a rewrite replaces the file (temp file + rename): a new inode
    report = run_cli("report", "--format", "json", "--model", "kimi-k3", trace, check=True)
    assert report.returncode == 0 and os.stat(entries[0]).st_ino == inode  # served, not rewritten
    assert serial["files"][0]["d2d_copies"] > 0
