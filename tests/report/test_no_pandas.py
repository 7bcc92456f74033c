"""`copyprof report` reads and analyses a Kineto trace without importing pandas.

Why: importing pandas costs a report ~40 MB of RSS and 0.15-0.25 s on this project's VM —
more than the event table of a 1 GB trace — and the memory goal of the read path
(docs/performance.md) cannot be met with it loaded. The readers build the event table as
numpy columns (copyprof/columns.py) and the analysis, `inspect`, `annotate` and the plots read
those; pandas stays a dependency for library users (``trace.events``).

Each case runs the real command in a fresh interpreter (this test process has pandas loaded)
and reports, when the interpreter exits, whether pandas was ever imported. The same holds for
hashlib's OpenSSL (3.3 MB resident), sqlite3 (0.8 MB) and rich (~3 MB) in a JSON report
without the cache into a pipe: only a cache key needs a hash, only a SQLite trace needs sqlite3,
only a terminal (a progress display, a drawn table) needs rich.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

_RUN = """
    import atexit, runpy, sys
    atexit.register(lambda: sys.stderr.write("\\nimported: %s\\n" % " ".join(
        m for m in ("pandas", "_hashlib", "sqlite3", "rich") if m in sys.modules)))
    sys.argv = ["copyprof", *{argv!r}]
    runpy.run_module("copyprof", run_name="__main__")
"""


def _imports(argv: list[str], env: dict[str, str] | None = None) -> tuple[str, set[str]]:
    """The command's output, and which of pandas, _hashlib (OpenSSL), sqlite3 and rich it imported."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_RUN.format(argv=argv))], capture_output=True,
                          text=True, cwd=REPO, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("imported:"), proc.stderr[-2000:]
    return proc.stdout, set(last.split()[1:])


def _report(argv: list[str]) -> tuple[str, bool]:
    out, imported = _imports(argv)
    return out, "pandas" in imported


def _corpus_run(prefix: str) -> tuple[str, str]:
    runs = json.loads((REPO / "corpus" / "runs.json").read_text())["runs"]
    r = next(r for r in runs if r["name"].startswith(prefix))
    return str(REPO / "corpus" / "runs" / r["name"]), str(REPO / "corpus" / "models" / r["model"])


@pytest.mark.parametrize("fmt", ["json", "table"])
def test_a_report_of_a_replica_run_never_imports_pandas(fmt: str) -> None:
    run = REPO / "traces" / "replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261130T042336Z"
    out, imported = _report(["report", str(run), "--model", "kimi-k3", "--no-cache", "--format", fmt])
    assert out.strip()  # a report was written
    assert not imported


def test_a_report_of_a_real_vllm_capture_with_stacks_never_imports_pandas() -> None:
    """A real vLLM 0.26 eager capture: Python stacks name each copy's code (analysis/sources)."""
    run, model = _corpus_run("jamba-8l-c12-eager-baseline")
    out, imported = _report(["report", run, "--model", model, "--no-cache", "--format", "json"])
    assert json.loads(out)["runs"][0]["per_step"]["copies"] > 0
    assert not imported


def test_an_ab_report_never_imports_pandas() -> None:
    traces = REPO / "traces"
    base = traces / "replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261130T042336Z"
    cand = traces / "replica-kimi-k3-tp8-c16-cuda-graph-candidate-20261130T042336Z"
    out, imported = _report(["report", str(base), str(cand), "--model", "kimi-k3", "--no-cache", "--format", "json"])
    assert len(json.loads(out)["runs"]) == 2
    assert not imported


def test_a_json_report_of_a_trace_file_without_the_cache_loads_no_openssl_sqlite_or_rich(tmp_path) -> None:
    # A trace file alone, as the read-path benchmark reports it (a replica run directory also
    # has timings, whose statistics import scipy, and scipy imports hashlib).
    run = REPO / "traces" / "replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261130T042336Z"
    trace = str(next(run.glob("*.pt.trace.json.gz")))
    out, imported = _imports(["report", trace, "--model", "kimi-k3", "--no-cache", "--format", "json"])
    assert json.loads(out)["runs"][0]["per_step"]["copies"] > 0 and imported == set()
    # With the cache, its keys are hashes: hashlib is imported where they are made.
    env = {**os.environ, "COPYPROF_CACHE_DIR": str(tmp_path / "cache")}
    out, imported = _imports(["report", trace, "--model", "kimi-k3", "--format", "json"], env=env)
    assert json.loads(out)["runs"][0]["per_step"]["copies"] > 0 and imported == {"_hashlib"}
