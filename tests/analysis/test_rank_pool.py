"""The ranks of a run analysed in forked processes (copyprof/analysis/rank_pool.py).

What must hold: the report is the serial report, byte for byte; the fork happens only where it
is safe (no other thread running); a child that fails costs nothing but time, and a rank that
cannot be analysed fails as it fails serially. The ranks are three real H200 captures of the
replica (traces/), each given a rank of its own: different traces, so a rank analysed in the
wrong place or returned out of order would change the report.
"""
from __future__ import annotations

import gzip
import json
import os
import threading
from pathlib import Path

import pytest

from copyprof.analysis import rank_pool
from copyprof.analysis.report import analyze_run
from copyprof.analysis.results import encode
from copyprof.cache import tables
from copyprof.errors import CopyprofError
from copyprof.models import load_layout
from copyprof.readers.discover import discover, read_source
from copyprof.reading import read_runs

REPO = Path(__file__).resolve().parents[2]
CAPTURES = ["replica-kimi-linear-48b-a3b-tp8-c16-cuda-graph-baseline-20261130T042708Z",
            "replica-kimi-linear-48b-a3b-tp8-c16-cuda-graph-candidate-20261130T042708Z",
            "replica-kimi-linear-48b-a3b-tp8-c16-eager-baseline-20261130T042732Z"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three real captures as ranks 0-2 of one run (distributedInfo.rank set in each)."""
    d = tmp_path_factory.mktemp("ranks")
    for rank, name in enumerate(CAPTURES):
        [trace] = sorted((REPO / "traces" / name).glob("*.pt.trace.json.gz"))
        doc = json.loads(gzip.decompress(trace.read_bytes()))
        doc["distributedInfo"] = {"rank": rank, "world_size": len(CAPTURES)}
        (d / f"rank{rank}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    return d


@pytest.fixture(scope="module")
def traces(run_dir: Path) -> list:
    return read_runs([str(run_dir)])


LAYOUT = load_layout("kimi-linear-48b-a3b")


def _calls_by_process(monkeypatch: pytest.MonkeyPatch, log: Path, fail_in_children: bool = False) -> None:
    """Record the process of every rank analysis (a file per call: children cannot append to
    the parent's lists); optionally fail every analysis outside this process."""
    real, parent = rank_pool.analyze_rank, os.getpid()

    def spy(trace, layout, all_steps=False, **kw):  # noqa: ANN001, ANN202, ANN003 - analyze_rank's own signature
        (log / f"{os.getpid()}-{trace.meta.ranks[0]}").touch()
        if fail_in_children and os.getpid() != parent:
            raise RuntimeError("a child that fails")
        return real(trace, layout, all_steps, **kw)

    monkeypatch.setattr(rank_pool, "analyze_rank", spy)


def _figures(analysis: rank_pool.RankAnalysis) -> tuple[str, str]:
    return analysis.census.per_step.to_pandas().to_json(), analysis.census.copies.to_pandas().to_json()


def _processes(log: Path) -> set[int]:
    return {int(p.name.split("-")[0]) for p in log.iterdir()}


def test_ranks_analysed_in_children_give_the_serial_report(traces, run_dir, tmp_path, monkeypatch):
    # The serial report is the reference; with 2 and 3 jobs the ranks are analysed in forked
    # children (seen by the process ids of the calls), and the JSON must be the same bytes.
    serial = encode(analyze_run(traces, str(run_dir), LAYOUT, jobs=1))
    assert json.loads(serial)["ranks"] == [0, 1, 2]
    for jobs in (2, 3):
        log = tmp_path / f"jobs{jobs}"
        log.mkdir()
        _calls_by_process(monkeypatch, log)
        assert encode(analyze_run(traces, str(run_dir), LAYOUT, jobs=jobs)) == serial
        assert os.getpid() not in _processes(log) and len(_processes(log)) == jobs


def test_no_fork_while_another_thread_runs(traces, tmp_path, monkeypatch):
    # A cache writer or any other thread running: the ranks are analysed here, one after another.
    _calls_by_process(monkeypatch, tmp_path)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        analyses = rank_pool.analyze_ranks(traces, LAYOUT, jobs=3)
    finally:
        stop.set()
        other.join()
    assert _processes(tmp_path) == {os.getpid()} and [a.rank for a in analyses] == [0, 1, 2]


def test_a_failing_child_leaves_its_ranks_to_the_parent(traces, tmp_path, monkeypatch):
    # Every child fails: the parent analyses all three ranks itself; the same analyses.
    want = [_figures(a) for a in rank_pool.analyze_ranks(traces, LAYOUT, jobs=1)]
    _calls_by_process(monkeypatch, tmp_path, fail_in_children=True)
    got = rank_pool.analyze_ranks(traces, LAYOUT, jobs=2)
    assert os.getpid() in _processes(tmp_path) and len(_processes(tmp_path)) == 3
    assert [_figures(a) for a in got] == want and [a.rank for a in got] == [0, 1, 2]


def test_a_rank_that_cannot_be_analysed_fails_as_it_does_serially(traces, monkeypatch):
    real = rank_pool.analyze_rank

    def broken(trace, layout, all_steps=False, **kw):  # noqa: ANN001, ANN202, ANN003
        if trace.meta.ranks[0] == 1:
            raise CopyprofError("cannot be analysed", path=trace.meta.path)
        return real(trace, layout, all_steps, **kw)

    monkeypatch.setattr(rank_pool, "analyze_rank", broken)
    for jobs in (1, 2):
        with pytest.raises(CopyprofError, match="cannot be analysed") as err:
            rank_pool.analyze_ranks(traces, LAYOUT, jobs=jobs)
        assert err.value.path == traces[1].meta.path


def test_meanwhile_runs_once_and_may_start_threads(traces):
    # The CLI starts its cache writers there: after the fork, or at once when nothing forks.
    for jobs in (1, 3):
        started: list[threading.Thread] = []

        def start_a_thread() -> None:
            t = threading.Thread(target=lambda: None)
            t.start()
            started.append(t)

        analyses = rank_pool.analyze_ranks(traces, LAYOUT, jobs=jobs, meanwhile=start_a_thread)
        assert len(started) == 1 and [a.rank for a in analyses] == [0, 1, 2]
        started[0].join()


def test_cache_writes_wait_while_held(tmp_path, monkeypatch):
    # Writes asked for inside writes_held() are threads not yet started; start_writes (or the
    # end of the block) starts them, and wait_for_writes finds the entry written.
    monkeypatch.setenv("COPYPROF_CACHE_DIR", str(tmp_path / "cache"))
    trace = REPO / "traces" / CAPTURES[0]
    cache = tables.TableCache()
    [source] = discover([str(trace)])
    with tables.writes_held() as start:
        tables.cached_read(cache, source.fmt, source.paths, lambda: read_source(source), background=True)
        assert threading.active_count() == 1 and not cache.fresh(source.fmt, source.paths)
        start()
    tables.wait_for_writes()
    assert cache.fresh(source.fmt, source.paths)
