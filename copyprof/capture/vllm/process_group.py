"""The server's process group as /proc shows it, and copyprof as the reaper of its orphans.

Why a module of its own: stopping a vLLM server "for sure" means knowing which processes are
still in its group, which of them are zombies and whose children they are, and having orphaned
engine processes handed to copyprof rather than to a PID 1 that never reaps them. That is
Linux process bookkeeping, independent of how the server is started, signalled or waited for
(server.py), and the fault tests read it directly.
"""
from __future__ import annotations

import os


def group_members(pgid: int) -> list[tuple[int, str, int]] | None:
    """(pid, state, ppid) of every process in group ``pgid``, from /proc; None without /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    out = []
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = stat_fields(int(entry))
        if fields is not None and len(fields) > 2 and int(fields[2]) == pgid:
            out.append((int(entry), fields[0].decode(), int(fields[1])))
    return out


def stat_fields(pid: int) -> list[bytes] | None:
    """``/proc/PID/stat`` after the command name (state, ppid, pgrp, ...); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:  # exited meanwhile
        return None
    return data[data.rfind(b")") + 2:].split()  # the command name may hold spaces and parentheses


def adopt_orphans() -> bool:
    """Become the reaper of orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``); True if set.

    Why: when vLLM's API server dies first, its engine and worker processes are reparented.
    To PID 1 by default, which in many containers never reaps them; adopted by copyprof they
    are reaped by :meth:`ServerProcess.stop` and the server's process group is really gone.
    Called by the ``copyprof run`` command (not by library code, which must not change how
    its host process treats orphans).
    """
    if not os.uname().sysname == "Linux":
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(36, 1, 0, 0, 0)) == 0  # PR_SET_CHILD_SUBREAPER = 36
    except (OSError, AttributeError):
        return False
