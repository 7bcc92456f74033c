"""copyprof from Python: read traces, analyse a run, compare two arms.

The three functions are the commands' own pipeline (readers → one event table → analysis →
typed results), without the terminal: what ``copyprof report`` prints is a rendering of the
``RunReport`` and ``Comparison`` returned here, and ``.to_json()`` of either is the object the
JSON contract documents (docs/contracts.md)::

    from copyprof import api

    base = api.analyze("runs/kimi-baseline", model="kimi-k3")
    cand = api.analyze("runs/kimi-direct", model="kimi-k3")
    print(base.per_step.post_proj, [c.role for c in base.candidates])
    ab = api.compare([base], [cand])
    print(ab.best_measure, ab.estimate_ms.kernel, [m.verdict for m in ab.measures])

Nothing here prints, caches or exits; bad input raises :class:`copyprof.errors.CopyprofError`
(its message is the one line the CLI shows).
"""
from __future__ import annotations

from collections.abc import Sequence

from copyprof.analysis.ab.results import Comparison
from copyprof.analysis.results import RunReport
from copyprof.errors import CopyprofError
from copyprof.events import Trace
from copyprof.models.layout import ModelLayout

__all__ = ["read", "analyze", "compare", "layout", "CopyprofError", "RunReport", "Comparison", "Trace"]


def read(paths: str | Sequence[str], *, jobs: int = 1) -> list[Trace]:
    """Every trace in ``paths`` (trace files, folders, run directories), one ``Trace`` per rank
    and file: its event table and what the file said of itself (``trace.meta``). The table (its
    columns are documented in copyprof/events.py) comes two ways: ``trace.events``, a pandas
    DataFrame (categorical kind, name, bytes_src and copy_dir), built on first use; and
    ``trace.table``, the ``copyprof.columns.Columns`` the analysis reads (numpy arrays and
    ``Categorical`` columns, no pandas). ``jobs``: processes for decoding big Kineto files."""
    from copyprof.reading import read_runs

    return read_runs([paths] if isinstance(paths, str) else list(paths), jobs=jobs)


def layout(model: str) -> ModelLayout:
    """A model's layer layout: a preset name (``copyprof models`` lists them), a Hugging Face
    ``config.json`` or a model directory holding one."""
    from copyprof.models.presets import load_layout

    return load_layout(model)


def analyze(run: str | Sequence[str], *, model: str | ModelLayout | None = None, rank: int | None = None,
            all_steps: bool = False, jobs: int = 1) -> RunReport:
    """One run's report: its steps, every copy with layer, role and source, the estimates and
    the copy groups (``candidates``). ``run``: a run directory, trace files, or a folder of
    them. ``model``: the layout that names layers and roles; without it, the model the run's
    ``run.json`` records, else none (copies are then counted but not placed). ``rank``: the
    rank whose figures head the report (default: the lowest). ``all_steps``: count prefill and
    mixed steps too. ``jobs``: processes that decode a big trace's chunks and analyse its ranks
    (the ranks only where this process runs no other thread: analysis/rank_pool.py)."""
    from copyprof.analysis.report import analyze_run
    from copyprof.rundir.model import resolve_layout

    paths = [run] if isinstance(run, str) else list(run)
    if isinstance(model, ModelLayout):
        chosen: ModelLayout | None = model
    else:
        chosen, _ = resolve_layout(model, tuple(paths))
    return analyze_run(read(paths, jobs=jobs), paths[0], chosen, rank=rank, all_steps=all_steps, jobs=jobs)


def compare(baseline: Sequence[RunReport], candidate: Sequence[RunReport], *,
            aa: Sequence[Sequence[RunReport]] = ()) -> Comparison:
    """The A/B of two arms, each a list of runs of one code (one report per boot): which copies
    the candidate removed, what each measure saw with runs as the unit of replication, and the
    verdicts. ``aa``: groups of runs of identical code whose spread is the setup's noise floor.
    A pure function of the reports: nothing is read again."""
    from copyprof.analysis.ab.compare import compare_arms
    from copyprof.analysis.ab.units import Arms

    if not baseline or not candidate:
        raise CopyprofError("compare needs at least one run in each arm")
    return compare_arms(Arms(list(baseline), list(candidate), [list(g) for g in aa]))
