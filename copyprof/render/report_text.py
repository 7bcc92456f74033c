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
from typing import TYPE_CHECKING, Any

import msgspec

from copyprof.analysis.ab.results import Comparison
from copyprof.analysis.results import JSON_RUN_KEYS, PerStep, RunReport
from copyprof.analysis.wording import VERDICT_CELL
from copyprof.analysis.wording import fmt_ms as sig_ms
from copyprof.render.compare_render import comparison_tables
from copyprof.render.headline import report_headline
from copyprof.render.report_tables import TableData, fmt_ms, run_tables, setup_fields, setup_lines
from copyprof.render.tidy import tidy_rows

if TYPE_CHECKING:  # rich is imported where a terminal is drawn: ~3 MB that JSON, CSV and markdown never need
    from rich.console import Console


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
    from rich.table import Table

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


MD_WIDTH = 200  # no line of the attachment is longer (a PR comment is read, not scrolled)
MD_CELL = 70  # a word cell of a markdown table longer than this keeps its end ("…" marks the cut)


def render_markdown(view: ReportView) -> str:
    """A PR attachment: a summary a reviewer reads in ten seconds (title, headline, one table of
    what changed and what it is worth, at most ~25 lines), then everything else folded inside
    ``<details>``: the setup once (fields that differ between the arms marked), each run's
    tables, the A/B tables and verdicts. Paths are relative to the runs' common folder; no line
    but the headline is over ``MD_WIDTH`` characters, and no number is ever cut."""
    from copyprof import __version__

    title = f"copyprof: {view.labels[1]} vs {view.labels[0]}" if view.comparison else f"copyprof: {view.labels[0]}"
    parts = [f"## {title}", markdown_table(summary_table(view))]
    details = ["**Setup.**", "\n".join(_setup_list(view))]
    cmd = f"`{view.command}` · " if view.command else ""
    details.append(f"**Command.** {cmd}copyprof {__version__}")
    for label, run in zip(view.labels, view.runs):
        details.append(f"### {label}")
        details.extend(markdown_table(t) for t in view.tables(run))
        notes = [f"- warning: {w}" for w in run.warnings] + [f"- {n}" for n in run.notes]
        if notes:
            details.append("\n".join(notes))
    if view.comparison is not None:
        details.append(f"### A/B: {view.labels[0]} vs {view.labels[1]}")
        details.extend(markdown_table(t) for t in comparison_tables(view.comparison, view.labels))
    parts.append("<details><summary>Setup, every table, the verdicts</summary>\n\n" + "\n\n".join(details)
                 + "\n\n</details>")
    # the headline stays one line (at most 300 characters by its own rule) so a reviewer can quote it
    body = _fit("\n\n".join(parts[1:]) + "\n", _common_folder(view))
    return "\n\n".join([parts[0], f"**{_relative(view.headline, _common_folder(view))}**", body])


def summary_table(view: ReportView) -> TableData:
    """What changed and what it is worth, one row a figure, a column an arm (from the results)."""
    runs, labels = view.runs, view.labels
    t = TableData("summary", "Summary", ["", *labels])
    ps = [r.per_step for r in runs]
    t.rows.append([f"{runs[0].steps.word}s counted", *[r.steps.decode for r in runs]])
    kinds = [k for k in ps[0].post_proj if k != "total"]
    if kinds:
        t.rows.append(["post-projection copies / step", *[p.post_proj.get("total", 0) for p in ps]])
    t.rows.append(["all device copies / step", *[p.copies for p in ps]])
    t.rows.append(["step period, ms (median)", *[fmt_ms(p.period_ms) for p in ps]])
    if any(p.gpu_busy_ms is not None for p in ps):
        t.rows.append(["GPU busy, ms/step (median; share of the step)", *[_busy_cell(p) for p in ps]])
    top = runs[0].candidates[0] if runs[0].candidates else None
    if top is not None and top.removable_ms is not None:
        t.rows.append([f"largest copy group: {top.per_step:g} {top.role}, ms/step",
                       _kernel_and_gap(top.removable_ms, top.removable_with_gap_ms if top.gap_counts else None)]
                      + [""] * (len(runs) - 1))
    cmp = view.comparison
    if cmp is not None:
        # the kernel-time estimate is the one the verdicts and the headline compare against
        t.rows.append(["estimated saving, ms/step", "",
                       _kernel_and_gap(cmp.estimate_ms.kernel, cmp.estimate_ms.kernel_plus_gap)])
        for m in sorted(cmp.measures, key=lambda m: m.name != cmp.best_measure)[:2]:
            lo, hi = m.ci95_ms
            ci = f"95 % CI [{sig_ms(lo)}, {sig_ms(hi)}]" if lo is not None and hi is not None else "no interval"
            t.rows.append([f"saving measured by {m.name} ({m.n_baseline} vs {m.n_candidate} {m.unit})", "",
                           f"{sig_ms(m.measured_ms)}, {ci}: {VERDICT_CELL[m.key]}"])
    return t


def _busy_cell(ps: PerStep) -> str:
    """``0.966 (17 %)``: the GPU's own time per step and the share of the step period it is busy."""
    if ps.gpu_busy_ms is None:
        return ""
    share = f" ({100 * ps.gpu_busy_fraction:.0f} %)" if ps.gpu_busy_fraction is not None else ""
    return f"{fmt_ms(ps.gpu_busy_ms)}{share}"


def _kernel_and_gap(kernel: float, with_gap: float | None) -> str:
    if with_gap is None or abs(with_gap - kernel) < 5e-4:
        return sig_ms(kernel)
    return f"{sig_ms(kernel)} ({sig_ms(with_gap)} with dispatch gaps)"


def _setup_list(view: ReportView) -> list[str]:
    """The setup once: a field the arms share in one line, a field that differs marked **differs**."""
    rows: dict[str, list[str]] = {"run": [f"`{run.path}`" for run in view.runs]}
    for run in view.runs:
        for label, value in setup_fields(run):
            rows.setdefault(label, []).append(value)
    for run in view.runs:
        if run.setup.command:
            rows.setdefault("captured with", []).append(f"`{run.setup.command}`")
    out = []
    for label, values in rows.items():
        if len(view.runs) > 1 and (len(values) != len(view.runs) or len(set(values)) > 1):
            cells = values if len(values) == len(view.runs) else values + ["—"] * (len(view.runs) - len(values))
            out.append(f"- {label}: " + " / ".join(f"{lab}: {v}" for lab, v in zip(view.labels, cells))
                       + " **(differs)**")
        else:
            out.append(f"- {label}: {values[0]}")
    return out


def _common_folder(view: ReportView) -> str:
    import os

    paths = [os.path.abspath(r.path) for r in view.runs]
    if len(paths) == 1:
        return os.path.dirname(paths[0])
    return os.path.commonpath(paths)


def _fit(text: str, folder: str) -> str:
    """Paths relative to the runs' folder; long prose lines wrapped; long word cells of a table
    keep their end; numbers are never cut."""
    import textwrap

    text = _relative(text, folder)
    out = []
    for line in text.split("\n"):
        if len(line) <= MD_WIDTH:
            out.append(line)
        elif line.startswith("|"):
            cells = line.strip("|").split(" | ")
            cells = [c if len(c) <= MD_CELL or _numeric(c) else "…" + c[-(MD_CELL - 1):] for c in cells]
            out.append("| " + " | ".join(c.strip() for c in cells) + " |")
        else:
            lead = "  " if line.startswith("- ") else ""
            out.extend(textwrap.wrap(line, MD_WIDTH, subsequent_indent=lead, break_long_words=False,
                                     break_on_hyphens=False) or [line])
    return "\n".join(out)


def _relative(text: str, folder: str) -> str:
    import os

    if folder and folder != os.sep:
        text = text.replace(folder + os.sep, "").replace(folder, ".")
    return text


def _numeric(cell: str) -> bool:
    return any(ch.isdigit() for ch in cell) and not any(ch.isalpha() for ch in cell.replace("ms", ""))


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
