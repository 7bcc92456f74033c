"""Entry point: the click group and the mapping of CopyprofError to one-line errors."""
from __future__ import annotations

import importlib
import os
import signal
import sys

import click

from copyprof import __version__
from copyprof.errors import EXIT_BAD_INPUT, CopyprofError

COMMANDS: dict[str, tuple[str, str]] = {
    "inspect": ("copyprof.cli.inspect_cmd", "inspect_cmd"),
    "report": ("copyprof.cli.report_cmd", "report_cmd"),
    "models": ("copyprof.cli.report_cmd", "models_cmd"),
    "annotate": ("copyprof.cli.annotate_cmd", "annotate_cmd"),
    "run": ("copyprof.cli.run_cmd", "run_cmd"),
}
"""Every command a user runs: name -> (module, click command). One module per command; a
command module never imports this one back (no cycle), and only the command asked for is
imported (``report`` answered from the cache does not load ``run``'s capture code)."""


STARTS_PROGRAMS = frozenset({"run"})
"""Commands that start other programs (vLLM) with this process's environment."""


def serial_blas() -> None:
    """One OpenBLAS thread, unless the user chose a number: numpy's bundled OpenBLAS starts a
    thread per further core when numpy is imported, and each spins looking for work for tens of
    milliseconds (~50 ms of CPU measured with perf on a 2-core VM) while the read needs every core.
    copyprof does no linear algebra worth threads. Not for commands in ``STARTS_PROGRAMS``: the
    setting would pass to the vLLM they start, whose CPU work is what gets profiled."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def reuse_freed_memory() -> None:
    """glibc's malloc: allocations under 32 MB come from the heap, and what is freed stays there
    for the next ones (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD), instead of each multi-MB array of the
    read and the analysis mapping fresh pages and unmapping them when freed: a fresh page costs a
    fault (~0.5 ms per MB measured on a 2-core VM; a cold report faulted 63k pages, 51k with this).
    The peak RSS stays the same: freed memory is used again, not kept beside new. Forked decode
    workers inherit it; a program started with exec does not. Elsewhere (no glibc) nothing changes."""
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):  # not a POSIX confstr, or no such name here
        return
    if not libc.startswith("glibc"):
        return
    import ctypes  # numpy imports it too

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: glibc's largest (64-bit); setting it also stops it moving
    mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD


class CommandList(click.Group):
    """The explicit command list above, each module imported when its command is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        if cmd_name not in STARTS_PROGRAMS:
            serial_blas()
            reuse_freed_memory()
        module, attr = COMMANDS[cmd_name]
        return getattr(importlib.import_module(module), attr)


@click.group(cls=CommandList)
@click.version_option(__version__, prog_name="copyprof")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Trace-driven copy-cost profiler for LLM serving."""
    ctx.obj = {"debug": debug}


def global_first(args: list[str]) -> list[str]:
    """``--debug`` may stand anywhere before a ``--`` (``copyprof report X --debug`` too): move it
    in front of the subcommand, where click's group expects it. After ``--`` it is vLLM's."""
    end = args.index("--") if "--" in args else len(args)
    if "--debug" not in args[:end]:
        return args
    return ["--debug"] + [a for a in args[:end] if a != "--debug"] + args[end:]


def main() -> None:
    args = global_first(sys.argv[1:])
    debug = args[:1] == ["--debug"]
    try:
        cli.main(args=args, prog_name="copyprof", standalone_mode=False)
    except click.exceptions.Abort:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # cleanup is done; a further Ctrl-C must not turn 130 into -2
        click.echo("copyprof: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except CopyprofError as exc:
        if debug:
            raise
        message = str(exc)
        if exc.exit_code == EXIT_BAD_INPUT:  # one line, as promised (a library's message may hold newlines)
            message = " ".join(message.split())
        click.echo(f"copyprof: error: {message}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        click.echo("copyprof: interrupted", err=True)
        sys.exit(130)
