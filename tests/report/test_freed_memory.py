"""The reading commands keep freed memory in glibc's heap for the next allocations.

Why: the read and the analysis allocate and free multi-MB numpy arrays again and again; by
default glibc maps a fresh region for each large one and unmaps it when freed, so every reuse
faults its pages in again (~0.5 ms per MB on the 2-core VM; a cold 1 GB report faulted 63k
pages, 51k with the setting). The check is on the process's own page-fault count.
"""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

cli_main = importlib.import_module("copyprof.cli.main")  # the module (copyprof.cli's ``main`` is its function)

_ROUNDS = """
    import resource, sys
    import numpy as np
    from copyprof.cli.main import reuse_freed_memory
    reuse_freed_memory()
    for mb in (16, 24, 8, 20):  # the heap grows once to what the work needs
        a = np.ones(mb << 17); del a
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):  # then the same sizes again: 204 MB allocated, written and freed
        for mb in (16, 24, 8, 20):
            a = np.ones(mb << 17); del a
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (AttributeError, ValueError, OSError):
        return False


@pytest.mark.skipif(not _glibc(), reason="glibc's malloc settings")
def test_freed_arrays_are_reused_without_new_page_faults() -> None:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_ROUNDS)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # 204 MB written into reused memory: a fresh mapping each time would fault ~52k pages.
    assert int(proc.stdout.strip()) < 64


def test_without_glibc_nothing_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_such_name(name: str) -> str:
        raise ValueError("unrecognized configuration name")

    monkeypatch.setattr(cli_main.os, "confstr", no_such_name)
    assert cli_main.reuse_freed_memory() is None  # returns quietly: the allocator is left as it is


def test_the_reading_commands_ask_for_it_and_run_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    import click

    asked: list[str] = []
    monkeypatch.setattr(cli_main, "reuse_freed_memory", lambda: asked.append("yes"))
    cli_main.CommandList().get_command(click.Context(click.Command("x")), "report")
    assert asked == ["yes"]
    cli_main.CommandList().get_command(click.Context(click.Command("x")), "run")
    assert asked == ["yes"]  # run's own process stays as it is: vLLM is what it profiles
