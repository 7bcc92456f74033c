"""``copyprof report RUN [CANDIDATE]``: decode-step copy census, attribution, estimate (and A/B)."""
from __future__ import annotations

import os
import shlex
import sys

import click
import msgspec

from copyprof.analysis.ab.results import Comparison
from copyprof.analysis.results import RunReport, encode
from copyprof.cli.arms import ArmPaths, ArmsCommand, resolve_arms
from copyprof.rundir.model import resolve_layout
from copyprof.errors import CopyprofError
from copyprof.models import ModelLayout
from copyprof.readers.discover import discover
from copyprof.cache.results import load_result, result_key, store_result

# numpy, scipy and the readers are imported only when a run must be analysed: a
# report served from the result cache (copyprof/cache/results.py) never loads them.


def _load_run(path: str, layout: ModelLayout | None, rank: int | None, all_steps: bool, jobs: int | None,
              cache: bool, lend: RunReport | None = None) -> RunReport:
    """One run's report (from the result cache when nothing changed). ``lend``: an eager run
    whose copy sources are carried onto this one's (it keys the cache entry too)."""
    sources = discover([path])
    options: dict[str, object] = {"layout": layout, "rank": rank, "all_steps": all_steps}
    if lend is not None:
        options["sources"] = [lend.path, encode(lend.source_entries).decode()]
    key = result_key(path, [s.paths for s in sources], options) if cache else None
    result = load_result(key)
    if result is None:
        result = _analyze(path, sources, layout, rank, all_steps, jobs, cache, lend)
        if key is not None and result_key(path, [s.paths for s in sources], options) == key:
            store_result(key, result)  # not when a file changed while it was read (a live capture)
    return result


def _analyze(path: str, sources: list, layout: ModelLayout | None, rank: int | None, all_steps: bool,
             jobs: int | None, cache: bool, lend: RunReport | None = None) -> RunReport:
    from copyprof.cache.tables import wait_for_writes, writes_held
    from copyprof.cli.read_progress import read_traces
    from copyprof.readers.kineto.pool import available_cores

    jobs = jobs or available_cores()
    try:
        # Tables cached while we analyse; their writer threads start once the ranks' analyses
        # have forked (analysis/rank_pool.py: no thread may run at the fork).
        with writes_held() as start_writes:
            traces = read_traces(sources, jobs, cache, background_writes=True)
            # The analysis (numpy, scipy at its import; never pandas) only now, after the decode
            # workers forked: they need none of it.
            from copyprof.analysis.report import analyze_run

            return analyze_run(traces, path, layout, rank=rank, all_steps=all_steps,
                               sources=lend.source_entries if lend is not None else None,
                               sources_origin=lend.path if lend is not None else "",
                               jobs=jobs, meanwhile=start_writes)
    finally:
        wait_for_writes()


@click.command("report", cls=ArmsCommand,
               short_help="Copies per step: layer, role, code, cost to remove; an A/B of two arms.")
@click.argument("runs", nargs=-1, type=click.Path())
@click.option("--baseline", "baseline", multiple=True, type=click.Path(),
              help="The baseline arm's runs (several: --baseline R1 R2 ...); the between-run spread is their unit.")
@click.option("--candidate", "candidate", multiple=True, type=click.Path(), help="The candidate arm's runs.")
@click.option("--aa", "aa", multiple=True, type=click.Path(),
              help="Runs of identical code in the same setup (an A/A): alone, the setup's noise floor; with an "
                   "A/B, their spread is pooled into the between-run variance.")
@click.option("--model", "model",
              help="Model layout: a preset (kimi-k3, kimi-linear-48b-a3b, qwen3-next-80b-a3b, deepseek-v3, "
                   "gpt-oss-20b; `copyprof models`), a config.json or a model directory. Default: the one "
                   "the run's run.json records.")
@click.option("--rank", type=int, default=None, help="Rank whose figures head the report (default: the lowest, normally 0).")
@click.option("--by-rank", is_flag=True, help="Show every rank's per-step figures.")
@click.option("--by-source", is_flag=True, help="Group the census by the code (Python frame) that issued each copy.")
@click.option("--candidates", "show_candidates", is_flag=True,
              help="List every copy group (role, issuing code, layers) by what removing it would save.")
@click.option("--sources", "sources_run", type=click.Path(),
              help="An eager capture with stacks of the same model and workload: its copy sources are carried "
                   "onto the runs' copies that have none (graph replay), by their place in the layers.")
@click.option("--all-steps", is_flag=True, help="Count every step, not only pure-decode ones.")
@click.option("--labels", help="Comma-separated names for the runs (default: baseline,candidate or the paths).")
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "csv", "json"]), default="table", show_default=True)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Write plots to FILE.png or FILE.svg (never over an existing file unless --force).")
@click.option("--force", is_flag=True, help="Let --plot replace an existing file.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Processes that decode trace chunks (default: the available cores).")
@click.option("--no-cache", is_flag=True, help="Read the traces even if parsed tables are cached (and cache nothing).")
def report_cmd(runs: tuple[str, ...], baseline: tuple[str, ...], candidate: tuple[str, ...], aa: tuple[str, ...],
               model: str | None, rank: int | None, by_rank: bool, by_source: bool, show_candidates: bool,
               sources_run: str | None, all_steps: bool, labels: str | None, fmt: str, plot_path: str | None,
               force: bool, jobs: int | None, no_cache: bool) -> None:
    """Every device-to-device copy of each decode step: its layer, role and issuing code, what
    removing it saves, and with two arms what an A/B measured.

    RUNS is one run (a run directory, a vLLM profile directory, trace files), a baseline and a
    candidate, or a folder of `copyprof run --repeat` runs (grouped by their run.json); several
    runs per arm with --baseline R1 R2 --candidate C1 C2, an A/A with --aa. Without --model the
    layout is the one the run's run.json records. Parsed tables and analyses are cached in
    $COPYPROF_CACHE_DIR (default ~/.cache/copyprof), keyed by each file's size, mtime and hash.
    """
    if plot_path and os.path.exists(plot_path) and not force:  # before any reading: nothing a user made is replaced
        raise CopyprofError("exists; give another --plot file or --force", path=plot_path)
    arms = _as_shown(resolve_arms(runs, baseline, candidate, aa))
    shown = [arms.baseline[0], *arms.candidate[:1]]
    layout, model_note = resolve_layout(model, tuple(shown))
    names = _labels(labels, tuple(shown)) if labels or len(shown) == 1 else list(arms.labels)
    lend = _lender(sources_run, layout, rank, all_steps, jobs, not no_cache)
    loaded: dict[str, RunReport] = {}

    def load(path: str) -> RunReport:
        if path not in loaded:
            loaded[path] = _load_run(path, layout, rank, all_steps, jobs, not no_cache, lend)
        return loaded[path]
    base_runs, cand_runs = [load(p) for p in arms.baseline], [load(p) for p in arms.candidate]
    comparison = None
    if cand_runs:
        from copyprof.analysis.ab.compare import compare_arms
        from copyprof.analysis.ab.units import Arms

        aa_runs = [load(p) for p in arms.aa]
        comparison = compare_arms(Arms(base_runs, cand_runs, [aa_runs] if len(aa_runs) >= 2 else [],
                                       identical=set(arms.baseline) | set(arms.candidate) <= set(arms.aa)))
    notes = [n for n in (arms.note, model_note) if n]
    # the shown runs as this report presents them (new objects: a loaded result is never edited)
    results = [msgspec.structs.replace(r, notes=notes + r.notes,
                                       timing_in_comparison=bool(comparison and comparison.timing))
               for r in (base_runs[0], *cand_runs[:1])]
    _emit(results, comparison, names, tuple(shown), fmt, plot_path, by_rank, by_source, show_candidates)


def _as_shown(arms: ArmPaths) -> ArmPaths:
    """An A/A alone is shown as the first boot against the others, all of them the A/A group;
    its two columns are named by boot so a reader never sees "baseline vs baseline"."""
    if not arms.is_aa_only:
        return arms
    arm = arms.labels[0] if arms.labels[0] != "baseline" or arms.note else "A/A"
    return ArmPaths([arms.aa[0]], arms.aa[1:], arms.aa, labels=(f"{arm} boot 1", f"{arm} boot 2"), note=arms.note)


def _lender(sources_run: str | None, layout: ModelLayout | None, rank: int | None, all_steps: bool,
            jobs: int | None, cache: bool) -> RunReport | None:
    """The eager run whose copy sources a graph run borrows (--sources-from), checked to have some."""
    if not sources_run:
        return None
    lend = _load_run(sources_run, layout, rank, all_steps, jobs, cache)
    if not lend.source_entries:
        raise CopyprofError("has no copy with a Python source: capture it eagerly with stacks "
                            "(copyprof run --with-stack, vLLM --enforce-eager)", path=sources_run)
    return lend


def _emit(results: list[RunReport], comparison: Comparison | None, names: list[str], runs: tuple[str, ...],
          fmt: str, plot_path: str | None, by_rank: bool, by_source: bool, show_candidates: bool) -> None:
    """The plot (where asked) and the report in the chosen format, from the results alone."""
    if plot_path:
        from copyprof.render.report_plots import write_plots

        written = write_plots(plot_path, results, runs, names, comparison)
        click.echo(f"copyprof: plot written to {written}", err=True)
    from copyprof.render.report_text import RENDERERS, ReportView, render_terminal

    view = ReportView(results, comparison, names, by_rank=by_rank, by_source=by_source, candidates=show_candidates,
                      command=command_line())
    if fmt == "table":
        from copyprof.render.console import output_console

        render_terminal(view, output_console())
    else:
        click.echo(RENDERERS[fmt](view), nl=fmt == "json")


NOT_SHOWN = {"--no-cache": 0, "--debug": 0, "--jobs": 1, "-j": 1}
"""Options that change how a report is made, never what it says (and how many values follow)."""


def command_line(argv: list[str] | None = None) -> str:
    """The command as the user typed it, for the markdown attachment — less the options of
    ``NOT_SHOWN``, so a cached report stays byte-identical to a fresh one."""
    args, shown = list(sys.argv[1:] if argv is None else argv), []
    while args:
        a = args.pop(0)
        name = a.split("=", 1)[0]
        if a.startswith("-j") and a[2:].isdigit():  # "-j4"
            continue
        if name in NOT_SHOWN:
            del args[:NOT_SHOWN[name] if "=" not in a else 0]
            continue
        shown.append(a)
    return " ".join(["copyprof", *(shlex.quote(a) for a in shown)])


def _labels(labels: str | None, runs: tuple[str, ...]) -> list[str]:
    if labels:
        names = [s.strip() for s in labels.split(",")]
        if len(names) != len(runs):
            raise CopyprofError(f"--labels names {len(names)} runs but {len(runs)} were given")
        return names
    if len(runs) == 2:
        return ["baseline", "candidate"]
    return [os.path.basename(os.path.normpath(runs[0])) or runs[0]]


@click.command("models", short_help="The model layout presets and their layer kinds.")
def models_cmd() -> None:
    """List model layout presets: each kind's layer count (and, for the rarer kinds, which layers)."""
    from copyprof.models import PRESETS

    for p in PRESETS.values():
        kinds = []
        for kind, n in p.kinds.items():
            where = f" (layers {_ranges(p.layers_of(kind))})" if 0 < n < p.layers / 2 else ""
            kinds.append(f"{n} {kind}{where}")
        click.echo(f"{p.name:<22} {p.layers:>3} layers  hidden {p.hidden:<5}  {', '.join(kinds)}  {p.hf_id or ''}")


def _ranges(layers: list[int]) -> str:
    if len(layers) > 6:
        return f"{layers[0]}, {layers[1]}, …, {layers[-2]}, {layers[-1]}"
    return ", ".join(map(str, layers))
