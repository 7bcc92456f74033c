"""Work in a forked child while the process goes on (copyprof/analysis/aside.py), and the report
that uses it: a rank's health worked out aside while its census goes on, the headline rank's
copy figures while the report takes the kernel candidates and the copy speeds.

What must hold: the report is the one-process report, byte for byte; the child runs only where
forking is safe (no other thread) and asked for (``--jobs`` over 1); what the child drops stays
in the parent; a child that fails, dies or returns what does not pickle costs nothing but time.
The reports are of real captures: vLLM on an H200 (the corpus, with its model layouts), the
replica's capture with Python stacks (sources by function), a public MI300X vLLM trace.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from copyprof.analysis import rank_figures
from copyprof.analysis import report as report_module
from copyprof.analysis.aside import Aside
from copyprof.analysis.report import analyze_run
from copyprof.analysis.results import encode
from copyprof.reading import read_runs
from copyprof.rundir.model import resolve_layout
from tests.conftest import REPO

SHARED = REPO.parent / "shared" / "sample_traces"


def _corpus(prefix: str) -> tuple[str, str]:
    runs = json.loads((REPO / "corpus" / "runs.json").read_text())["runs"]
    r = next(r for r in runs if r["name"].startswith(prefix))
    return str(REPO / "corpus" / "runs" / r["name"]), str(REPO / "corpus" / "models" / r["model"])


RUNS = {
    "vllm-graph": _corpus("kimi-linear-12l-c16-graph-baseline"),
    "vllm-eager": _corpus("deepseek-v3-6l-c8-eager-baseline"),
    "replica-stacks": (str(REPO / "traces" / "replica-qwen3-next-80b-a3b-tp4-c16-eager-stacks-baseline-20261201T083126Z"),
                       "qwen3-next-80b-a3b"),
    "public-mi300x": (str(SHARED / "kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz"), None),
}


def _pids_of(monkeypatch: pytest.MonkeyPatch, module: object, name: str, log: Path) -> None:
    """Record the process that runs ``module.name`` (a file: a child cannot append to our lists)."""
    real = getattr(module, name)
    log.mkdir()

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the spied function's own signature
        (log / str(os.getpid())).touch()
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)


@pytest.mark.parametrize("name", list(RUNS))
def test_work_done_aside_gives_the_one_process_report(name, tmp_path, monkeypatch):
    # The rank's health (from the moment the census knows its ops) and the copies' figures
    # (once the census is taken) each in a child of their own with two jobs: the same bytes.
    path, model = RUNS[name]
    if not os.path.exists(path):
        pytest.skip(f"{path} is not here")
    layout, _ = resolve_layout(model, [path])
    traces = read_runs([path])
    serial = encode(analyze_run(traces, path, layout, jobs=1))
    _pids_of(monkeypatch, report_module, "_copy_figures", tmp_path / "figures")
    _pids_of(monkeypatch, rank_figures, "rank_health", tmp_path / "health")
    traces = read_runs([path])  # a fresh read: the first analysis may not leave the tables as they came
    assert encode(analyze_run(traces, path, layout, jobs=2)) == serial
    figures, health = ({p.name for p in (tmp_path / d).iterdir()} for d in ("figures", "health"))
    assert len(figures) == len(health) == 1 and str(os.getpid()) not in figures | health  # once each, in children
    assert figures != health


def test_one_job_works_in_this_process_when_the_result_is_asked_for():
    order: list[str] = []
    aside = Aside(lambda: order.append("work") or os.getpid(), fork=False)
    order.append("meanwhile")
    assert not aside.forked and aside.result() == os.getpid() and order == ["meanwhile", "work"]


def test_the_child_works_and_what_it_drops_stays_here():
    kept = {"arrays": [1, 2, 3]}
    aside = Aside(lambda: (os.getpid(), kept["arrays"]), fork=True, in_child=lambda: kept.update(arrays=None))
    assert aside.forked
    pid, seen = aside.result()
    assert pid != os.getpid() and seen is None and kept["arrays"] == [1, 2, 3]


def test_no_fork_while_another_thread_runs():
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        aside = Aside(os.getpid, fork=True)
        assert not aside.forked
    finally:
        stop.set()
        other.join()
    assert aside.result() == os.getpid()


def _fails_in_a_child(parent: int):  # noqa: ANN202
    if os.getpid() != parent:
        raise RuntimeError("a child that fails")
    return "done here"


def _dies_in_a_child(parent: int):  # noqa: ANN202
    if os.getpid() != parent:
        os._exit(3)
    return "done here"


def _unpicklable_in_a_child(parent: int):  # noqa: ANN202
    return (lambda: None) if os.getpid() != parent else "done here"


@pytest.mark.parametrize("work", [_fails_in_a_child, _dies_in_a_child, _unpicklable_in_a_child])
def test_a_child_that_fails_leaves_the_work_to_this_process(work):
    parent = os.getpid()
    aside = Aside(lambda: work(parent), fork=True)
    assert aside.forked
    assert aside.result() == "done here"
