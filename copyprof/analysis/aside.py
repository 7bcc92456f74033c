"""Work handed to a forked child while this process goes on with other work of its own.

Why: a one-rank report analysed on one core while the other sat idle (0.33 s of a 1.3 s report
of the 1 GB benchmark trace on two cores). Parts of the analysis need different things, so a
child forked between them (copy-on-write: nothing is sent to it) works out one part while this
process does another, and sends its small result back:

* the rank's health (completeness, launch overhead) needs the steps and the census' per-op
  arrays only: it starts as soon as the census knows them, while the census goes on
  (rank_figures.analyze_rank);
* the copies' figures (sources, candidates) need the copies and the per-step table only: they
  start once the census is taken, while this process takes the kernel candidates and the copy
  speeds (report.analyze_run).

When it does not fork (``fork`` False, no ``fork`` start method, or another thread running in
this process, as for rank_pool.py), the work runs here when its result is asked for, which is
the order the serial analysis always had. A child that fails or dies leaves the work to this
process, which does it then: the work must need nothing this process lets go meanwhile.
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def fork_is_safe() -> bool:
    """Whether this process may fork a child that runs Python: a forked child has only the
    forking thread, and a lock another thread held at the fork stays held in the child forever
    (a cache writer, a progress display; Python 3.12 warns about exactly that)."""
    return "fork" in mp.get_all_start_methods() and threading.active_count() == 1


class Aside(Generic[T]):
    """``work()`` in a forked child, its result fetched by :meth:`result`.

    ``in_child`` runs in the child first: what the child may drop that this process still
    needs (the child's memory is counted on its own: its peak is what it inherited plus what
    it allocates)."""

    def __init__(self, work: Callable[[], T], *, fork: bool, in_child: Callable[[], None] | None = None) -> None:
        self._work = work
        self._proc: Any = None
        self._receive: Connection | None = None
        if fork and fork_is_safe():
            ctx = mp.get_context("fork")
            receive, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(send, work, in_child), daemon=True, name="copyprof-aside")
            try:
                proc.start()
            except OSError:  # no room for another process: the work is done here
                receive.close()
            else:
                self._proc, self._receive = proc, receive
            finally:
                send.close()

    @property
    def forked(self) -> bool:
        return self._proc is not None

    def result(self) -> T:
        """The child's result; the work done here when there was no child or it failed."""
        if self._proc is None or self._receive is None:
            return self._work()
        try:
            status, value = self._receive.recv()
        except (EOFError, OSError):
            status, value = "lost", None
        finally:
            self._receive.close()
            self._proc.join()
            self._proc = self._receive = None
        return value if status == "ok" else self._work()


def _child(send: Connection, work: Callable[[], Any], in_child: Callable[[], None] | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it stops on Ctrl-C
    try:
        if in_child is not None:
            in_child()
        out: tuple[str, Any] = ("ok", work())
    except Exception:  # noqa: BLE001 - the parent does the work itself and reports what fails
        out = ("failed", None)
    try:
        send.send(out)
    except Exception:  # noqa: BLE001 - a result that does not pickle: the parent does the work
        send.send(("failed", None))
    send.close()
