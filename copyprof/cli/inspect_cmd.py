"""``copyprof inspect PATH...``: what a trace holds, with its device-to-device copies."""
from __future__ import annotations

import click

from copyprof.cli.main import cli


@cli.command("inspect")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def inspect_cmd(paths: tuple[str, ...], fmt: str) -> None:
    """Show format, ranks, event counts, copies and annotations of trace files or run directories."""
    # Imported here, not at module level: every command pays only for its own imports.
    from copyprof.analysis.summary import summarize
    from copyprof.cli.progress import reading_progress
    from copyprof.events import use_python_strings
    from copyprof.load import discover, read_source
    from copyprof.render.inspect_render import render_terminal, to_json

    use_python_strings()
    sources = discover(paths)
    summaries = []
    with reading_progress(len(sources)) as advance:
        for src in sources:
            advance(src.path)
            for trace in read_source(src):
                summaries.append(summarize(trace))
    if fmt == "json":
        click.echo(to_json(summaries))
    else:
        from rich.console import Console

        render_terminal(summaries, Console())
