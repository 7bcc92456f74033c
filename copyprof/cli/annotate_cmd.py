"""``copyprof annotate RUN -o FILE``: the census on the timeline, to open in Perfetto UI or chrome://tracing."""
from __future__ import annotations

import os

import click

from copyprof.errors import CopyprofError


@click.command("annotate",
               short_help="The census on the timeline: a trace for Perfetto UI or chrome://tracing.")
@click.argument("run", type=click.Path())
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="File to write (.json or .json.gz); never an existing file unless --force.")
@click.option("--model", help="Model layout (preset, config.json or model directory): layers and kinds. "
                               "Default: the model run.json records.")
@click.option("--rank", type=int, default=None, help="Rank to annotate (default: the lowest).")
@click.option("--all-steps", is_flag=True, help="Annotate every step, not only pure-decode ones.")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Decode processes (default: the cores).")
@click.option("--no-cache", is_flag=True, help="Read the traces even if parsed tables are cached.")
def annotate_cmd(run: str, output: str, model: str | None, rank: int | None, all_steps: bool, force: bool,
                 jobs: int | None, no_cache: bool) -> None:
    """Write a Chrome/Perfetto trace of the counted decode steps: every copy with its layer, kind,
    site, bytes and source in its args, plus tracks of steps, layer segments and copy sites.

    Open it at https://ui.perfetto.dev (Open trace file) or chrome://tracing (Load). Nothing is
    written next to the input unless OUTPUT says so."""
    out = os.path.abspath(output)
    if os.path.exists(out) and not force:
        raise CopyprofError("exists; give another -o or --force", path=output)
    parent = os.path.dirname(out)
    if not os.path.isdir(parent):
        raise CopyprofError("the folder to write into does not exist", path=parent)
    if not out.endswith((".json", ".json.gz")):
        raise CopyprofError("the output name must end in .json or .json.gz", path=output)
    from copyprof.rundir.model import resolve_layout
    from copyprof.cli.read_progress import read_traces
    from copyprof.readers.discover import discover

    layout, note = resolve_layout(model, [run])
    if note:
        click.echo(f"copyprof: note: {note}", err=True)
    traces = [t for t in read_traces(discover([run]), jobs, not no_cache) if t.meta.role == "rank"]
    if not traces:
        raise CopyprofError("no per-rank trace found", path=run)
    from copyprof.analysis.rank_figures import analyze_rank
    from copyprof.render.annotated_trace import write_annotated

    ranks = {t.meta.ranks[0] if t.meta.ranks else 0: t for t in traces}
    want = rank if rank is not None else min(ranks)
    if want not in ranks:
        raise CopyprofError(f"rank {want} is not in this run (ranks: {sorted(ranks)})", path=run)
    ra = analyze_rank(ranks[want], layout, all_steps, keep_layers=True)
    try:
        n = write_annotated(out, ra, run, model)
    except OSError as exc:
        raise CopyprofError(f"cannot write: {exc.strerror or exc}", path=output) from exc
    click.echo(f"copyprof: wrote {n:,} events of {len(ra.census.per_step)} steps to {out}", err=True)
    click.echo(out)
