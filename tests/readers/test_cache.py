"""The on-disk table cache: hits give the table and report of a fresh read; anything stale,
corrupt or foreign is a miss that gets rewritten, never an error; --no-cache bypasses it."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from copyprof.cache import tables as cache_mod
from copyprof.cache.tables import TableCache, cache_dir, cached_read
from copyprof.readers.discover import discover, read_source
from tests.conftest import run_cli

SAMPLE = "kineto_cupti_b200_eager.json.gz"
STEPPED = "kineto_cupti_a100_cudagraph_rank0.json.gz"  # has ProfilerStep steps: a non-empty report


def _copy(tmp_path: Path, src: Path) -> Path:
    p = tmp_path / "traces" / "rank0.pt.trace.json.gz"
    p.parent.mkdir()
    shutil.copy(src, p)
    return p


@pytest.fixture
def trace(tmp_path, samples) -> Path:
    return _copy(tmp_path, samples / SAMPLE)


def _read(c: TableCache, path: Path) -> list:
    [src] = discover([str(path)])
    return cached_read(c, src.fmt, src.paths, lambda: read_source(src))


def _same(a, b) -> None:
    assert len(a) == len(b)
    for ta, tb in zip(a, b):
        pd.testing.assert_frame_equal(ta.events, tb.events)
        assert ta.meta == tb.meta


def _entries(root: Path) -> list[Path]:
    return sorted(root.glob("*.npz"))


def test_miss_then_hit_gives_the_same_table(tmp_path, trace):
    c = TableCache(tmp_path / "c")
    first = _read(c, trace)
    assert (c.hits, c.misses) == (0, 1) and len(_entries(c.root)) == 1
    second = _read(c, trace)
    assert (c.hits, c.misses) == (1, 1)
    _same(first, second)
    assert not list(trace.parent.glob("*.npz")) and len(list(trace.parent.iterdir())) == 1  # nothing beside the trace


def test_all_sample_formats_round_trip(tmp_path, samples):
    c = TableCache(tmp_path / "c")
    for f in sorted(samples.iterdir()):
        if f.suffix == ".md":
            continue
        for src in discover([str(f)]):
            fresh = cached_read(c, src.fmt, src.paths, lambda src=src: read_source(src))
            _same(fresh, cached_read(c, src.fmt, src.paths, lambda: pytest.fail("should be a hit")))


def test_touch_changes_mtime_and_misses(tmp_path, trace):
    c = TableCache(tmp_path / "c")
    _read(c, trace)
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    _read(c, trace)
    assert (c.hits, c.misses) == (0, 2)
    _read(c, trace)  # rewritten: a hit now
    assert c.hits == 1 and len(_entries(c.root)) == 1


def test_same_size_and_mtime_but_new_content_misses(tmp_path, trace, samples):
    c = TableCache(tmp_path / "c")
    _read(c, trace)
    st = trace.stat()
    data = bytearray(trace.read_bytes())
    other = (samples / "kineto_roctracer_mi300x_sglang_qwen3_8b_decode.json.gz").read_bytes()
    data[: len(other)] = other  # a different (valid) gzip member at the front, same file size
    trace.write_bytes(bytes(data))
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    got = _read(c, trace)
    assert c.misses == 2 and got[0].meta.kind_counts["kernel"] == 555  # the SGLang sample's table, not the B200's


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "pickle", "bad-codes"])
def test_corrupt_entry_is_ignored_and_rewritten(tmp_path, trace, damage):
    c = TableCache(tmp_path / "c")
    good = _read(c, trace)
    [entry] = _entries(c.root)
    if damage == "garbage":
        entry.write_bytes(os.urandom(4096))
    elif damage == "truncated":
        entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    elif damage == "empty":
        entry.write_bytes(b"")
    else:
        with np.load(entry, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        if damage == "pickle":  # an object array can only be loaded by unpickling: must be refused
            arrays["t0c1"] = np.array([object()] * len(arrays["t0c1"]), dtype=object)
        else:
            arrays["t0c1"] = np.full_like(arrays["t0c1"], np.iinfo(arrays["t0c1"].dtype).max)
        with open(entry, "wb") as fh:
            np.savez(fh, **arrays)
    again = _read(c, trace)
    assert c.misses == 2 and c.hits == 0
    _same(good, again)
    _read(c, trace)
    assert c.hits == 1  # the damaged entry was replaced


def test_entry_from_other_code_is_a_miss(tmp_path, trace, monkeypatch):
    c = TableCache(tmp_path / "c")
    _read(c, trace)
    monkeypatch.setattr(cache_mod, "code_hash", lambda: "0" * 32)  # as if the reader code had changed
    _read(c, trace)
    assert c.misses == 2


def test_path_spelled_differently_reports_the_given_path(tmp_path, trace, monkeypatch):
    c = TableCache(tmp_path / "c")
    _read(c, trace)
    monkeypatch.chdir(trace.parent)
    [t] = _read(c, Path(trace.name))
    assert t.meta.path == trace.name and c.hits == 1


def test_unwritable_cache_dir_is_not_an_error(tmp_path, trace):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    c = TableCache(blocker / "c")
    _same(_read(c, trace), _read(c, trace))
    assert c.hits == 0


def test_eviction_keeps_the_cache_under_its_limit(tmp_path, samples, monkeypatch):
    monkeypatch.setenv("COPYPROF_CACHE_MAX_MB", "0.5")
    c = TableCache(tmp_path / "c")
    for name in (STEPPED, SAMPLE, "kineto_roctracer_mi300x_sglang_qwen3_8b_decode.json.gz"):
        _read(c, samples / name)
    assert len(_entries(c.root)) < 3


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("COPYPROF_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("COPYPROF_CACHE_DIR")
    assert cache_dir() == tmp_path / "x" / "copyprof"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "copyprof"


def test_report_json_identical_cold_warm_and_no_cache(tmp_path, samples, monkeypatch):
    trace = _copy(tmp_path, samples / STEPPED)
    root = tmp_path / "cache"
    monkeypatch.setenv("COPYPROF_CACHE_DIR", str(root))
    args = ("report", str(trace.parent), "--format", "json")
    nocache = run_cli(*args, "--no-cache", check=True).stdout
    assert not root.exists() or not _entries(root)  # --no-cache writes nothing
    cold = run_cli(*args, check=True).stdout
    assert len(_entries(root)) == 1
    inode = _entries(root)[0].stat().st_ino
    shutil.rmtree(root / "results")  # the analysis again, from the cached table (not the result cache)
    warm = run_cli(*args, check=True).stdout
    assert cold == warm == nocache
    assert json.loads(warm)["runs"][0]["steps"]["decode"] > 0
    assert _entries(root)[0].stat().st_ino == inode  # served, not re-read and rewritten


def test_no_decode_workers_when_the_cache_serves_every_source(tmp_path, trace, monkeypatch):
    from copyprof.readers.kineto import pool as parallel
    from copyprof.reading import decode_pool

    monkeypatch.setenv("COPYPROF_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 1)
    sources = discover([str(trace)])
    pool = decode_pool(sources, 2, cache=True)
    assert pool is not None
    pool.close()
    _read(TableCache(), trace)
    assert TableCache().fresh(sources[0].fmt, sources[0].paths)
    assert decode_pool(sources, 2, cache=True) is None


def test_report_with_an_unusable_cache_dir_says_nothing(tmp_path, trace, monkeypatch):
    """Tables are written by a background thread during the analysis: a cache that cannot be
    written (here the cache 'directory' is a file) must cost nothing — same report, exit 0,
    empty stderr (no thread traceback), and nothing left behind."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("COPYPROF_CACHE_DIR", str(blocker))
    args = ("report", str(trace.parent), "--format", "json")
    proc = run_cli(*args)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == run_cli(*args, "--no-cache", check=True).stdout
    assert blocker.read_text() == "x"
