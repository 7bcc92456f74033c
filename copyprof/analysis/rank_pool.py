"""The ranks of a run analysed side by side, in processes forked after the read.

Why: a TP8 run is eight traces whose analyses (steps, census, checks) are independent of one
another, yet they ran one after another in the report's process: on 8 ranks of 125 MB, 1.2 s
of a ~3.9 s report on two cores. Forked once the tables are read, a child sees them as they
are (copy-on-write: nothing is sent to it), analyses its share of the ranks and sends back
their analyses without the traces; the parent puts each trace back. The analyses are the
same objects the serial path makes (tests/analysis/test_rank_pool.py compares the reports).
Memory: the tables stay shared; each child adds what its ranks' analyses allocate (~50 MB per
GB of trace, measured on the 1 GB benchmark trace), so ``jobs`` children hold up to that many
analyses at once where the serial path held one.

When it does not fork: one rank or one job; no ``fork`` start method; or another thread is
running in this process (a cache writer, a progress display). A forked child has only the
forking thread, and a lock another thread held at the fork stays held in the child forever;
Python 3.12 warns about exactly that. A child that fails, or whose result does not come
back, leaves its ranks to the parent, which analyses them one after another as the serial
path does, and so fails on a bad rank with the serial path's error.
"""
from __future__ import annotations

import multiprocessing as mp
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from copyprof.analysis.aside import fork_is_safe
from copyprof.analysis.rank_figures import RankAnalysis, analyze_rank
from copyprof.events import Trace
from copyprof.models import ModelLayout

Meanwhile = Callable[[], None]


def analyze_ranks(traces: list[Trace], layout: ModelLayout | None, all_steps: bool = False, *, jobs: int = 1,
                  meanwhile: Meanwhile | None = None, health: bool = True) -> list[RankAnalysis]:
    """``analyze_rank`` of every trace, in order, in up to ``jobs`` forked processes.
    ``meanwhile``: work for this process once the children are forked (or at once, when there
    are none), e.g. starting the cache writes, which must not run as threads at the fork.
    ``health`` False: ranks analysed in this process are left with ``health_due``, their health
    worked out meanwhile in a forked child where ``jobs`` > 1 (analyze_rank); a child of this
    pool checks its ranks' health itself (the per-op arrays do not come back to check it here)."""
    children = min(jobs, len(traces))
    if children < 2 or not fork_is_safe():
        if meanwhile is not None:
            meanwhile()
        return [analyze_rank(t, layout, all_steps, health=health, fork=jobs > 1) for t in traces]
    ctx = mp.get_context("fork")
    started: list[tuple[Any, Connection, list[int]]] = []
    for k in range(children):
        share = list(range(k, len(traces), children))
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(send, traces, share, layout, all_steps), daemon=True,
                           name="copyprof-analysis")
        try:
            proc.start()
        except OSError:  # no room for another process: the parent takes this share
            receive.close()
            send.close()
            continue
        send.close()
        started.append((proc, receive, share))
    if meanwhile is not None:
        meanwhile()
    done: dict[int, RankAnalysis] = {}
    for proc, receive, share in started:
        try:
            status, parts = receive.recv()
        except (EOFError, OSError):
            status, parts = "lost", []
        finally:
            receive.close()
            proc.join()
        if status == "ok":
            for i, (rank, steps, census, completeness, overhead) in zip(share, parts):
                done[i] = RankAnalysis(rank, traces[i], steps, census, completeness, overhead)
    return [done[i] if i in done else analyze_rank(t, layout, all_steps) for i, t in enumerate(traces)]


def _child(send: Connection, traces: list[Trace], share: list[int], layout: ModelLayout | None,
           all_steps: bool) -> None:
    """A child's share: each rank's analysis without its trace (the parent holds the traces)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it stops on Ctrl-C
    try:
        parts = []
        for i in share:
            ra = analyze_rank(traces[i], layout, all_steps)
            parts.append((ra.rank, ra.steps, ra.census, ra.completeness, ra.overhead))
        out: tuple[str, list[Any]] = ("ok", parts)
    except Exception:  # noqa: BLE001 - the parent analyses this share itself and reports what fails
        out = ("failed", [])
    send.send(out)
    send.close()
