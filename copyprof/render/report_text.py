"""Report renderers by name — ``table`` (rich terminal), ``markdown`` (a PR attachment), ``csv``
(tidy: one row per figure), ``json`` (the README contract) — over one ``ReportView``.

Every format opens with the same headline (render/headline.py) and draws the same tables
(render/report_tables.py, compare_render.py), so their numbers cannot drift apart. Text
never cuts a number: piped output has no width limit, and on a terminal cells fold rather
than end in "…".
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table

from copyprof.analysis.results import JSON_RUN_KEYS, Comparison, RunReport
from copyprof.render.compare_render import comparison_tables
from copyprof.render.headline import report_headline
from copyprof.render.report_tables import TableData, run_tables, setup_lines
from copyprof.render.tidy import tidy_rows


@dataclass
class ReportView:
    """What a report shows: the runs, their A/B, the user's names for them and options."""

    runs: list[RunReport]
    comparison: Comparison | None
    labels: list[str]
    by_rank: bool = False
    by_source: bool = False
    candidates: bool = False
    command: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def headline(self) -> str:
        return report_headline(self.runs, self.comparison, self.labels)

    def tables(self, run: RunReport) -> list[TableData]:
        tables = run_tables(run, self.by_rank, self.by_source, self.candidates)
        if self.comparison is not None and run is self.runs[1] and all(e.removable_ms == 0 for e in run.estimate):
            tables = [t for t in tables if t.key != "estimate"]  # the candidate's all-zero estimate says nothing
        return [t for t in tables if t.rows]


def render_json(view: ReportView) -> str:
    out = {"headline": view.headline,
           "runs": [{k: msgspec.to_builtins(getattr(r, k)) for k in JSON_RUN_KEYS} for r in view.runs],
           "comparison": msgspec.to_builtins(view.comparison) if view.comparison is not None else None}
    return json.dumps(strict(out), indent=2, default=_default, allow_nan=False)


def strict(o: Any) -> Any:
    """Strict JSON: NaN and ±inf (an interval too wide to bound) become null."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: strict(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [strict(v) for v in o]
    if hasattr(o, "item") and not hasattr(o, "__len__"):
        return strict(o.item())
    return o


def _default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def render_terminal(view: ReportView, console: Console) -> None:
    console.print(f"[bold]{_esc(view.headline)}[/bold]")
    for label, run in zip(view.labels, view.runs):
        _section(console, f"{label}: {run.path}")
        console.print(_esc(" · ".join(setup_lines(run))))
        for w in run.warnings:
            console.print(f"[yellow]warning:[/yellow] {_esc(w)}")
        for t in view.tables(run):
            _rich_table(console, t)
        for n in run.notes:
            console.print(f"[dim]note:[/dim] {_esc(n)}")
    if view.comparison is not None:
        _section(console, f"A/B: {view.labels[0]} vs {view.labels[1]}")
        for t in comparison_tables(view.comparison, view.labels):
            _rich_table(console, t)


def _section(console: Console, text: str) -> None:
    """A section heading: a rule across a terminal; a plain line when piped (no width to fill)."""
    if console.is_terminal:
        console.rule(f"[bold]{_esc(text)}[/bold]")
    else:
        console.print(f"\n== {_esc(text)} ==")


def _esc(text: str) -> str:
    return text.replace("[", "\\[")


TEXT_COLUMNS = ("where", "bound", "site", "source", "sites", "verdict", "status", "function", "frame", "shape", "role",
                "layers", "bytes", "issued by", "change")


def _is_text(i: int, column: str) -> bool:
    """Words align left, numbers right (the first column always names the row)."""
    return i == 0 or column in TEXT_COLUMNS


def _rich_table(console: Console, t: TableData) -> None:
    if t.as_list:
        console.print(f"[bold]{_esc(t.title)}[/bold]")
        for name, text in t.rows:
            console.print(f"  [bold]{_esc(str(name))}[/bold]: {_esc(str(text))}")
        return
    table = Table(title=_esc(t.title), title_justify="left", show_edge=False)
    for i, c in enumerate(t.columns):
        left = _is_text(i, c)
        table.add_column(_esc(c), justify="left" if left else "right", overflow="fold")
    for row in t.rows:
        table.add_row(*(_esc(str(v)) for v in row))
    console.print(table)
    if t.note:
        console.print(f"  [dim]{_esc(t.note)}[/dim]")


def markdown_table(t: TableData) -> str:
    if t.as_list:
        return "\n".join([f"**{t.title}**", ""] + [f"- **{name}**: {text}" for name, text in t.rows])
    lines = [f"**{t.title}**", "", "| " + " | ".join(t.columns) + " |",
             "|" + "|".join("---" if _is_text(i, c) else "---:" for i, c in enumerate(t.columns)) + "|"]
    lines += ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in t.rows]
    if t.note:
        lines += ["", f"_{t.note}_"]
    return "\n".join(lines)


def render_markdown(view: ReportView) -> str:
    """A self-contained PR attachment: title, headline, setup of each run with every version
    and id its inputs carry, the command and copyprof's version, then the tables."""
    from copyprof import __version__

    title = f"copyprof: {view.labels[1]} vs {view.labels[0]}" if view.comparison else f"copyprof: {view.labels[0]}"
    parts = [f"## {title}", f"**{view.headline}**"]
    setup = [f"- **{label}** (`{run.path}`): {'; '.join(setup_lines(run))}."
             + (f" Captured with `{run.setup.command}`." if run.setup.command else "")
             for label, run in zip(view.labels, view.runs)]
    parts.append("**Setup.**\n\n" + "\n".join(setup))
    cmd = f"`{view.command}` · " if view.command else ""
    parts.append(f"**Command.** {cmd}copyprof {__version__}")
    for label, run in zip(view.labels, view.runs):
        parts.append(f"### {label}")
        parts.extend(markdown_table(t) for t in view.tables(run))
        notes = [f"- warning: {w}" for w in run.warnings] + [f"- {n}" for n in run.notes]
        if notes:
            parts.append("\n".join(notes))
    if view.comparison is not None:
        parts.append(f"### A/B: {view.labels[0]} vs {view.labels[1]}")
        parts.extend(markdown_table(t) for t in comparison_tables(view.comparison, view.labels))
    return "\n\n".join(parts) + "\n"


def render_csv(view: ReportView) -> str:
    """Tidy CSV: ``section, name, arm, value, unit``, one row per figure, plain numbers."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["section", "name", "arm", "value", "unit"])
    w.writerows(tidy_rows(view.runs, view.comparison, view.labels, view.headline, view.by_source))
    return buf.getvalue()


RENDERERS = {"json": render_json, "markdown": render_markdown, "csv": render_csv}
