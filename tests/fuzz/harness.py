"""Run mutated inputs through copyprof in worker processes, each input bounded in time and memory.

Why workers and not one process per input: starting Python with pandas costs ~1.3 s, which
would make ten thousand inputs per format a day's work; a worker that stays up runs an input
in tens of milliseconds. Why workers and not in-process: a hang or a runaway allocation must
cost one input, not the run. So each worker

* builds the input itself (``mutate.make_input``; reproducible from the job),
* runs ``copyprof inspect --format json`` and ``copyprof report --format json`` on it through
  the real CLI entry point (``copyprof.cli.main.main``: the same error mapping a user sees),
* under ``RLIMIT_AS`` (a runaway allocation becomes a MemoryError) and a SIGALRM timer (a slow
  input is stopped and reported as a hang); the parent also kills a worker that does not
  answer within a hard limit (a hang inside C code that the timer cannot interrupt);
* measures the input's peak RSS by resetting the kernel's high-water mark
  (``/proc/self/clear_refs``) before the input and reading ``VmHWM`` after it.

Outcomes per command: ``ok``; ``warned`` (exit 0, warnings); ``partial`` (exit 0, a file only
partly read);
``error`` (exit 2 and exactly one line ``copyprof: error: ...``). Anything else is a failure:
``crash`` (an exception escaped), ``hang``, ``memory``, ``bad-output`` (exit 0 but stdout is
not strict JSON, or something, such as a RuntimeWarning, was printed on stderr), ``bad-error`` (exit code or stderr not as promised), ``died`` (the worker
process died), ``mutator`` (the fuzzer itself failed to build the input).
"""
from __future__ import annotations

import io
import json
import multiprocessing as mp
import os
import random
import re
import signal
import sys
import time
import traceback
from collections.abc import Iterable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from tests.fuzz.mutate import make_input
from tests.fuzz.seeds import Seed

GOOD = ("ok", "warned", "partial", "error")
FAILURES = ("crash", "hang", "memory", "bad-output", "bad-error", "died", "mutator")
_WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CI": "1",
               "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg"}


@dataclass(frozen=True)
class Job:
    id: int
    fmt: str
    seed: int  # index into the format's seed list
    op: str
    rng: int
    small_blocks: int = 0  # >0: read with this block size (exercises the chunk cutter on small files)

    @property
    def key(self) -> str:
        return f"{self.fmt}:{self.seed}:{self.op}:{self.rng}:{self.small_blocks}"


@dataclass
class Result:
    job: Job
    seed_name: str
    inspect: str
    report: str
    detail: str
    secs: float
    rss_kb: int  # the worker's peak RSS during this input (VmHWM after a reset at its start)
    base_kb: int = 0  # the worker's RSS when the input started (imports, allocator-held memory)

    @property
    def outcome(self) -> str:
        """The input's worst outcome: a failure if either command failed, else the inspect outcome."""
        for o in (self.inspect, self.report):
            if o in FAILURES:
                return o
        return self.inspect

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "job": asdict(self.job), "outcome": self.outcome}


class _Hang(BaseException):
    """Raised by SIGALRM; a BaseException so that ``except Exception`` in copyprof does not swallow it."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Hang()


def _peak_reset() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _peak_kb() -> int:
    try:
        with open("/proc/self/status") as fh:
            m = re.search(r"VmHWM:\s+(\d+)", fh.read())
        return int(m.group(1)) if m else 0
    except OSError:
        return 0


def _describe(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "copyprof" in f.filename]
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {str(exc)[:300]}{where}"


def _describe_any(exc: BaseException) -> str:
    last = traceback.extract_tb(exc.__traceback__)[-1:]
    where = f" at {Path(last[0].filename).name}:{last[0].lineno}" if last else ""
    return f"{type(exc).__name__}: {str(exc)[:300]}{where}"


def _strict_json(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"non-finite number {token} in JSON output")
    return json.loads(text, parse_constant=refuse)


def _grade(doc: Any) -> str:
    """``partial`` when a file was only partly read, ``warned`` when there are warnings, else ``ok``."""
    items = [x for key in ("files", "runs") for x in (doc.get(key) or [] if isinstance(doc, dict) else [])
             if isinstance(x, dict)]
    warnings = [str(w) for x in items for w in x.get("warnings") or []]
    if any(x.get("partial") for x in items) or any("partly read" in w for w in warnings):
        return "partial"
    return "warned" if warnings else "ok"


def run_cli(args: list[str]) -> tuple[str, str]:
    """One copyprof command in this process, classified; returns (outcome, detail)."""
    from copyprof.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    argv, sys.argv = sys.argv, ["copyprof", *args]
    code: Any = 0
    try:
        with redirect_stdout(out), redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code
    except MemoryError as exc:
        return "memory", _describe(exc)
    except _Hang:
        raise
    except BaseException as exc:  # noqa: BLE001 - anything escaping the CLI is the finding
        return "crash", _describe(exc)
    finally:
        sys.argv = argv
    code = 0 if code is None else code
    lines = err.getvalue().strip().splitlines()
    if code == 0:
        if lines:  # a success prints nothing on stderr (a RuntimeWarning there means garbage values)
            return "bad-output", f"stderr not empty: {' | '.join(lines)}"[:300]
        try:
            doc = _strict_json(out.getvalue())
        except ValueError as exc:
            return "bad-output", f"stdout is not strict JSON: {exc}"[:300]
        return _grade(doc), ""
    if code == 2 and len(lines) == 1 and lines[0].startswith("copyprof: error: "):
        return "error", lines[0][:300]
    return "bad-error", f"exit {code}: {' | '.join(lines)[:300]}"


def run_input(path: Path, model: str | None, timeout_s: float) -> tuple[str, str, str, float, int, int]:
    """inspect then report on ``path`` under a SIGALRM timer; (inspect, report, detail, secs, peak kB, start kB)."""
    _peak_reset()
    base = _peak_kb()  # right after the reset the high-water mark is the current RSS
    t0 = time.perf_counter()
    results = {"inspect": "skipped", "report": "skipped"}
    detail = ""
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        results["inspect"], detail = run_cli(["inspect", "--format", "json", str(path)])
        report_args = ["report", str(path), "--format", "json"] + (["--model", model] if model else [])
        results["report"], d2 = run_cli(report_args)
        if results["report"] in FAILURES or not detail:
            detail = d2
    except _Hang:
        stage = "inspect" if results["inspect"] == "skipped" else "report"
        results[stage], detail = "hang", f"{stage} still running after {timeout_s:.0f} s"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return results["inspect"], results["report"], detail, time.perf_counter() - t0, _peak_kb(), base


def _warm_up() -> None:
    """Import what the commands import lazily, so an input's time is its reading, not first imports."""
    import importlib

    import copyprof.analysis.ab.compare  # noqa: F401
    import copyprof.analysis.report  # noqa: F401
    import copyprof.readers.kineto  # noqa: F401
    import copyprof.readers.nsys_sqlite  # noqa: F401
    import copyprof.readers.rocpd  # noqa: F401
    import copyprof.readers.rocprof_v1  # noqa: F401
    import copyprof.readers.rocprofv3_json  # noqa: F401
    import copyprof.render.report_text  # noqa: F401
    from copyprof.cli.main import COMMANDS

    for module, _ in COMMANDS.values():  # every command's module, loaded before the workers fork
        importlib.import_module(module)


def _worker(conn: Connection, seeds: dict[str, list[Seed]], scratch: str, timeout_s: float, mem_bytes: int) -> None:
    os.environ.update(_WORKER_ENV)
    import warnings

    warnings.simplefilter("always")  # every input that warns is seen, not only the first per place
    for hidden in (DeprecationWarning, ResourceWarning):  # as for a user: not shown by default
        warnings.simplefilter("ignore", hidden)
    # report caches parsed tables: keep the cache in the worker's scratch, small, never in ~/.cache
    os.environ.update(COPYPROF_CACHE_DIR=str(Path(scratch) / "cache"), COPYPROF_CACHE_MAX_MB="64")
    import resource

    if mem_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    from copyprof.readers import files as source

    _warm_up()
    block, read = source.BLOCK_SIZE, getattr(source, "READ_SIZE", None)
    while True:
        job: Job | None = conn.recv()
        if job is None:
            return
        seed = seeds[job.fmt][job.seed]
        try:
            path = make_input(seed, job.op, random.Random(job.rng), Path(scratch) / "input")
        except Exception as exc:  # noqa: BLE001 - a bug of the fuzzer, reported as such
            conn.send(Result(job, seed.name, "mutator", "skipped", _describe_any(exc), 0.0, 0))
            continue
        if job.small_blocks:
            source.BLOCK_SIZE = job.small_blocks
            if read is not None:
                source.READ_SIZE = job.small_blocks  # type: ignore[attr-defined]
        try:
            ins, rep, detail, secs, rss, base = run_input(path, seed.model, timeout_s)
        finally:
            source.BLOCK_SIZE = block
            if read is not None:
                source.READ_SIZE = read  # type: ignore[attr-defined]
        conn.send(Result(job, seed.name, ins, rep, detail, secs, rss, base))


def make_jobs(seeds: dict[str, list[Seed]], per_format: int, base_seed: int = 0,
              formats: Iterable[str] | None = None, big: int = 256 << 10) -> list[Job]:
    """``per_format`` jobs per format, interleaved across formats; reproducible from ``base_seed``.

    Seeds over ``big`` bytes are drawn 20x less often than small ones (each costs ~1 s to
    parse and mutate), so most inputs are small and each format still sees its real samples.
    Kineto inputs from small seeds are read with small blocks one time in three, so the
    streaming cutter and the merging of falsely cut pieces run on small files too, not only on
    files over 8 MB (a big seed in 64 B blocks would be 400,000 pieces: no real file's shape).
    """
    from tests.fuzz.mutate import OPS

    rng = random.Random(base_seed)
    per: dict[str, list[Job]] = {}
    n = 0
    for fmt in formats or seeds:
        if not seeds.get(fmt):
            continue
        weights = [0.05 if s.size > big else 1.0 for s in seeds[fmt]]
        jobs = []
        for _ in range(per_format):
            seed = rng.choices(range(len(seeds[fmt])), weights)[0]
            small = rng.choice((0, 0, rng.choice((64, 1024, 4096)))) if fmt == "kineto" else 0
            if seeds[fmt][seed].size > big:  # 64 B pieces of a 25 MB trace: 400k pieces, a file of no real shape
                small = 0
            jobs.append(Job(n, fmt, seed, rng.choice(OPS[fmt]), rng.getrandbits(48), small))
            n += 1
        per[fmt] = jobs
    out: list[Job] = []
    for group in zip(*per.values()):
        out.extend(group)
    return out


class Pool:
    """``workers`` processes; ``run(jobs)`` yields one Result per job (order of completion)."""

    def __init__(self, seeds: dict[str, list[Seed]], scratch: Path, workers: int = 2, timeout_s: float = 20.0,
                 hard_timeout_s: float = 60.0, mem_bytes: int = 3 << 30, recycle: int = 400) -> None:
        self.seeds, self.scratch, self.n = seeds, scratch, workers
        self.timeout_s, self.hard_s, self.mem = timeout_s, hard_timeout_s, mem_bytes
        # A fresh worker every `recycle` inputs: a long-lived process's address space only grows
        # (allocator arenas), and RLIMIT_AS must judge the input, not the worker's history.
        self.recycle = recycle
        self.ctx = mp.get_context("spawn")
        self.restarts = 0  # workers replaced after a death or a hard kill
        self.recycled = 0  # workers replaced on schedule (every `recycle` inputs)

    def _start(self, i: int) -> tuple[Any, Connection]:
        parent, child = self.ctx.Pipe()
        d = self.scratch / f"w{i}-{self.restarts}"
        d.mkdir(parents=True, exist_ok=True)
        p = self.ctx.Process(target=_worker, args=(child, self.seeds, str(d), self.timeout_s, self.mem))  # not a daemon: report may start its own decode workers
        p.start()
        child.close()
        return p, parent

    def run(self, jobs: Iterable[Job]) -> Iterator[Result]:
        pending = iter(jobs)
        procs = [self._start(i) for i in range(self.n)]
        busy: dict[int, tuple[Job, float]] = {}
        done = [0] * self.n

        def feed(i: int) -> None:
            job = next(pending, None)
            if job is not None:
                procs[i][1].send(job)
                busy[i] = (job, time.monotonic())

        for i in range(self.n):
            feed(i)
        try:
            while busy:
                ready = wait([procs[i][1] for i in busy], timeout=1.0)
                now = time.monotonic()
                for i in list(busy):
                    job, t0 = busy[i]
                    proc, conn = procs[i]
                    if conn in ready:
                        try:
                            res = conn.recv()
                        except (EOFError, OSError):
                            proc.join(5)
                            res = self._lost(job, "died", f"worker died (exit {proc.exitcode})", now - t0)
                            procs[i] = self._restart(i, proc)
                        del busy[i]
                        done[i] += 1
                        if done[i] % self.recycle == 0 and procs[i][0].is_alive():
                            procs[i][1].send(None)
                            procs[i] = self._restart(i, procs[i][0])
                            self.restarts -= 1
                            self.recycled += 1
                        yield res
                        feed(i)
                    elif now - t0 > self.hard_s:
                        proc.kill()
                        proc.join(5)
                        del busy[i]
                        yield self._lost(job, "hang", f"no answer after {self.hard_s:.0f} s (killed)", now - t0)
                        procs[i] = self._restart(i, proc)
                        feed(i)
        finally:
            for proc, conn in procs:
                try:
                    conn.send(None)
                except OSError:
                    pass
                proc.join(10)
                if proc.is_alive():
                    proc.kill()

    def _restart(self, i: int, old: Any) -> tuple[Any, Connection]:
        old.join(10)
        if old.is_alive():
            old.kill()
        self.restarts += 1
        return self._start(i)

    def _lost(self, job: Job, outcome: str, detail: str, secs: float) -> Result:
        return Result(job, self.seeds[job.fmt][job.seed].name, outcome, "skipped", detail, secs, 0)
