"""``copyprof inspect PATH...``: what a trace holds, with its device-to-device copies."""
from __future__ import annotations

import click


@click.command("inspect", short_help="What a trace holds: format, ranks, events, copies, step markers.")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Processes that decode trace chunks (default: the available cores).")
@click.option("--no-cache", is_flag=True, help="Read the traces even if parsed tables are cached (and cache nothing).")
@click.option("--steps", "by_step", is_flag=True,
              help="Also count the copies of each annotated step by the form the trace shows them in.")
@click.option("--step-pattern", default=None,
              help="With --steps: regex of the step annotations (default: vLLM's pure-decode steps; "
                   "'^copies_' in a copies-* run directory).")
def inspect_cmd(paths: tuple[str, ...], fmt: str, jobs: int | None, no_cache: bool, by_step: bool,
                step_pattern: str | None) -> None:
    """Show format, ranks, event counts, copies and annotations of trace files or run directories.

    Parsed tables are cached as for `report` (a report after an inspect reads no trace again)."""
    # Imported here, not at module level: every command pays only for its own imports.
    from copyprof.cli.read_progress import read_traces
    from copyprof.readers.discover import discover

    traces = read_traces(discover(paths), jobs, not no_cache)
    # Imported only now, after the decode workers forked (they need none of it).
    from copyprof.analysis.inspect.summary import summarize
    from copyprof.render.inspect_render import render_terminal, to_json

    summaries = [summarize(trace) for trace in traces]
    if by_step or step_pattern:
        import re

        from copyprof.analysis.inspect.step_forms import step_forms
        from copyprof.errors import CopyprofError

        try:
            re.compile(step_pattern or "")
        except re.error as exc:
            raise CopyprofError(f"--step-pattern is not a regular expression: {exc}") from exc
        for summary, trace in zip(summaries, traces):
            summary["steps"] = step_forms(trace, step_pattern)
    if fmt == "json":
        click.echo(to_json(summaries))
    else:
        from copyprof.render.console import output_console

        render_terminal(summaries, output_console())
