"""The vLLM server child process: start in its own process group, wait for health, stop for sure.

Why this much care: a vLLM server is a tree (API process, engine core, one worker per TP rank,
and a profiler wrapper on top for rocprofv3/nsys) holding GPU memory. If copyprof died or was
interrupted and left it running, the next capture would fail or, worse, share the GPUs and
measure nonsense. So the server gets its own session (``start_new_session=True``: the terminal's
Ctrl-C does not reach it, copyprof decides), and stopping signals the whole group:
SIGINT (vLLM and nsys shut down cleanly and flush) -> SIGTERM -> SIGKILL, each with a timeout.
"""
from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from copyprof.capture.vllm.log_evidence import LOG_TAIL_LINES, first_error_line, log_tail, quote_log
from copyprof.capture.vllm.port import listener_is_in_group
from copyprof.capture.vllm.process_group import group_members, stat_fields
from copyprof.errors import EXIT_CAPTURE_FAILED, CopyprofError

SERVER_LOG = "server.log"
ENGINE_DEATH_GRACE_S = 3.0  # after an engine process died, how long the API server may take to exit by itself
ORPHAN_GRACE_S = 5.0  # a stop's wait per signal once the leader has exited (ServerProcess._wait_group)
class ServerProcess:
    """One server child; ``stop()`` is idempotent and safe to call from ``finally``."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, port: int,
                 own_listener: bool = True) -> None:
        self.argv = list(argv)
        self.env = env
        self.log_path = Path(log_path)
        self.port = port
        self.own_listener = own_listener  # the server's own process group holds its listening socket
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None
        self.stop_signal: str | None = None
        self._hurry = False  # set by a further Ctrl-C while stopping: go to the next signal now
        self.hurries = 0  # how many times that happened (recorded in run.json)
        self.engine_processes: dict[int, str] = {}  # pid -> vLLM process title, watched by check_alive
        self.engine_died: tuple[int, str] | None = None  # (pid, title) of the one check_alive saw die

    def start(self) -> None:
        # The log file is opened exclusively: a run directory is new, so an existing log would mean a bug.
        log = open(self.log_path, "xb")
        try:
            with _sigint_default_in_children():
                self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        except FileNotFoundError as exc:
            raise CopyprofError(f"cannot start the server: {exc.filename or self.argv[0]} not found",
                                exit_code=EXIT_CAPTURE_FAILED) from exc
        finally:
            log.close()  # the child has its own descriptor

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def poll(self) -> int | None:
        if self.proc is None:
            return None
        code = self.proc.poll()
        if code is not None:
            self.exit_code = code
        return code

    def tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        return log_tail(self.log_path, lines)

    def check_alive(self, what: str, grace_s: float = 0.0) -> None:
        """Raise a capture error with the log tail (and the first error line) if the server has exited.

        ``grace_s``: when a connection just broke, the server is usually exiting but not yet
        reaped; wait up to this long for its exit so the error names the real cause.
        """
        code = self.poll()
        dead = self._dead_engine_process() if code is None else None
        if dead is not None:  # the API server usually exits next and its log names the cause: give it that chance
            grace_s = max(grace_s, ENGINE_DEATH_GRACE_S)
        deadline = time.monotonic() + grace_s
        while code is None and time.monotonic() < deadline:
            time.sleep(0.1)
            code = self.poll()
        if code is None and dead is not None:
            self.engine_died = pid, title = dead
            tail = self.tail()
            raise CopyprofError(f"vLLM's {title} process (pid {pid}) died during {what} while the API server still "
                                f"runs (a signal or the out-of-memory killer; requests to it never finish); last "
                                f"{len(tail)} lines of {self.log_path}:\n" + quote_log(tail),
                                exit_code=EXIT_CAPTURE_FAILED)
        if code is not None:
            tail = self.tail()
            cause = first_error_line(self.log_path)
            hint = f"\nfirst error in the log: {cause}" if cause and cause not in tail else ""
            raise CopyprofError(f"vLLM server exited with code {code} during {what}; last {len(tail)} lines of "
                                f"{self.log_path}:\n" + quote_log(tail) + hint, exit_code=EXIT_CAPTURE_FAILED)

    def watch_engine_processes(self) -> dict[int, str]:
        """Note the server's engine-core and worker processes, so that :meth:`check_alive` sees one die.

        Why: when a vLLM engine or worker process is killed (the OOM killer, a signal) the API
        server can keep running with the requests to it hanging (vLLM 0.32's HTTP server then
        waits for them forever); watching only the API server, copyprof waited out its whole
        ``--timeout`` and then blamed the clock. vLLM names these processes ``<prefix>::EngineCore``
        and ``<prefix>::Worker...`` (``set_process_title``, with ``setproctitle`` installed);
        without those titles nothing extra is watched and the API server alone is.
        """
        self.engine_processes = {}
        members = group_members(self.pid) if self.pid is not None else None
        for pid, state, _ in members or []:
            if pid == self.pid or state in ("Z", "X"):
                continue
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            if re.search(r"::(EngineCore|Worker)", title):
                self.engine_processes[pid] = title.strip()
        return self.engine_processes

    def _dead_engine_process(self) -> tuple[int, str] | None:
        """A watched engine process that is gone or a zombie, if any."""
        for pid, title in self.engine_processes.items():
            fields = stat_fields(pid)
            if fields is None or fields[0] in (b"Z", b"X"):
                return pid, title
        return None

    def wait_healthy(self, timeout_s: float, on_tick: Callable[[str], None] | None = None,
                     interval_s: float = 0.25) -> float:
        """Poll ``GET /health`` until 200; return seconds waited. Fails fast if the server exits."""
        t0 = time.monotonic()
        while True:
            self.check_alive("boot")
            if health_ok(self.port):
                self._check_listener_is_ours()
                return time.monotonic() - t0
            waited = time.monotonic() - t0
            if waited > timeout_s:
                tail = self.tail()
                raise CopyprofError(f"timed out after {timeout_s:.0f} s waiting for the vLLM server to answer "
                                    f"GET /health on 127.0.0.1:{self.port}; last {len(tail)} lines of "
                                    f"{self.log_path}:\n" + quote_log(tail), exit_code=EXIT_CAPTURE_FAILED)
            if on_tick:
                last = self.tail(1)
                on_tick(last[0] if last else "")
            time.sleep(interval_s)

    def _check_listener_is_ours(self) -> None:
        """A ``/health`` answer counts only from the server started here (port.py says why)."""
        assert self.proc is not None
        if self.own_listener and listener_is_in_group(self.port, self.proc.pid) is False:
            raise CopyprofError(f"127.0.0.1:{self.port} answers GET /health, but the process listening there is not "
                                "the server copyprof started: another program took the port before it bound it; "
                                "run again", exit_code=EXIT_CAPTURE_FAILED)

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, sig)  # the child leads its own session, so pgid == pid
        except ProcessLookupError:
            pass

    def _group_alive(self) -> bool:
        """True while a *live* process is in the server's group; zombies do not count.

        Why not only ``killpg(pgid, 0)``: it succeeds on zombies, and under an init that does
        not reap orphans (containers, VMs with a minimal PID 1) an engine process orphaned by
        its dead API server stays a zombie forever, so a stop would escalate to SIGKILL and
        wait for nothing. Zombies that are our own children (orphans reparented to copyprof,
        see :func:`adopt_orphans`) are reaped here, so the group really goes away.
        """
        assert self.proc is not None
        members = group_members(self.proc.pid)
        if members is None:  # no /proc: the signal probe is all there is
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        self._reap_ours(members)
        return any(state != "Z" for _, state, _ in members)

    def _reap_ours(self, members: list[tuple[int, str, int]]) -> None:
        """Reap the group's zombies that are copyprof's children (not the leader: Popen reaps it)."""
        assert self.proc is not None
        me = os.getpid()
        for pid, state, ppid in members:
            if state == "Z" and ppid == me and pid != self.proc.pid:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def _gone(self) -> bool:
        """The leader is reaped and no live process of the group is left (its stragglers reaped)."""
        self.poll()
        if self.exit_code is None or self._group_alive():
            return False
        self._reap_stragglers()
        return True

    def _wait_group(self, timeout_s: float, orphan_s: float | None = None) -> bool:
        """Wait until the leader is reaped and no process of the group is left. With ``orphan_s``,
        give up sooner once the leader has gone: the rest are orphans that its own shutdown did
        not end (a vLLM worker whose engine core was killed ignored SIGINT and SIGTERM and held a
        stop for both 30 s grace periods), so the next signal goes out after ``orphan_s``."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        leader_gone: float | None = None
        while time.monotonic() < deadline and not self._hurry:
            if self._gone():
                return True
            if self.exit_code is not None:
                leader_gone = leader_gone if leader_gone is not None else time.monotonic()
                if orphan_s is not None and time.monotonic() - leader_gone >= orphan_s:
                    break
            time.sleep(0.2)
        self._hurry = False
        return self._gone()

    def _reap_stragglers(self, timeout_s: float = 3.0) -> None:
        """Once no live process is left: reap the group's zombies as they are handed to copyprof.

        Why: a zombie whose parent is itself a zombie (a worker under a killed engine core) is
        reparented to copyprof only when that parent is reaped, so one pass can leave it; once
        copyprof has exited it goes to PID 1, which on minimal inits never reaps it, and the
        server's group outlives the run (seen once: a vLLM worker SIGKILLed while exporting its
        trace). Bounded: a zombie that never becomes ours is left after ``timeout_s``."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            members = group_members(self.proc.pid)
            if not members or any(state != "Z" for _, state, _ in members):
                return  # gone (or /proc unreadable), or a live process: not a straggler to wait for
            self._reap_ours(members)
            time.sleep(0.05)

    def stop(self, graceful_s: float = 60.0, term_s: float = 30.0) -> str:
        """Stop the whole group; returns how: ``exited`` / ``SIGINT`` / ``SIGTERM`` / ``SIGKILL``."""
        if self.proc is None:
            return "not-started"
        if self.stop_signal is not None:
            return self.stop_signal
        if self.poll() is not None and not self._group_alive():
            self.stop_signal = "exited"
            return self.stop_signal
        with ctrl_c_hurries(self.hurry):
            for sig, wait_s in ((signal.SIGINT, graceful_s), (signal.SIGTERM, term_s), (signal.SIGKILL, 30.0)):
                self._signal_group(sig)
                # After SIGKILL only the kernel is left to act: a killed process can take seconds to
                # go (freeing GBs of memory on a loaded host), so that wait is never cut short.
                if self._wait_group(wait_s, orphan_s=ORPHAN_GRACE_S if sig != signal.SIGKILL else None):
                    self.stop_signal = sig.name
                    return self.stop_signal
        self.stop_signal = "SIGKILL (processes may remain)"
        return self.stop_signal

    def hurry(self) -> None:
        """Cut the current wait of :meth:`stop` short (a further Ctrl-C): the next signal goes out now."""
        self._hurry = True
        self.hurries += 1


@contextmanager
def ctrl_c_hurries(on_ctrl_c: Callable[[], None]) -> Iterator[list[int]]:
    """While copyprof cleans up, Ctrl-C calls ``on_ctrl_c`` instead of raising KeyboardInterrupt.

    Why: the cleanup after a failure or a first Ctrl-C stops the server group and records
    run.json. Interrupting that half-way is how GPUs are left held by orphaned servers and
    runs are left saying "capturing". A further Ctrl-C therefore makes the stop escalate
    (SIGINT -> SIGTERM -> SIGKILL) sooner, but the cleanup still finishes. Yields the list
    of signals received. Only the main thread can set handlers; elsewhere this does nothing.
    """
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return

    def handler(signum: int, frame: object) -> None:
        got.append(signum)
        on_ctrl_c()

    old = signal.signal(signal.SIGINT, handler)
    try:
        yield got
    finally:
        signal.signal(signal.SIGINT, old)


@contextmanager
def _sigint_default_in_children() -> Iterator[None]:
    """Let the server be stopped by SIGINT even when copyprof itself ignores it.

    Why: a copyprof started by ``nohup`` or as a background job of a script inherits SIGINT
    ignored, and an ignored signal stays ignored across exec — the server would shrug off the
    graceful SIGINT stop and only go at SIGTERM, a whole grace period later and without
    flushing (seen: four fake-server runs of 65 s instead of 4 s). A *caught* signal is reset
    to the default by exec, so a no-op handler is installed around the spawn; copyprof itself
    still ignores SIGINT meanwhile and afterwards. Only the main thread can set handlers."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, _still_ignored)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _still_ignored(signum: int, frame: object) -> None:
    """SIGINT while spawning, in a copyprof that ignores it: ignored."""


def loopback_get(port: int, path: str, timeout_s: float) -> tuple[int, bytes] | None:
    """``GET path`` of the server copyprof started: (status, body), or None without an answer."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def health_ok(port: int, timeout_s: float = 5.0) -> bool:
    answer = loopback_get(port, "/health", timeout_s)
    return answer is not None and answer[0] == 200
