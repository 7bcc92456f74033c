"""Report renderers by name: terminal (rich), markdown (GitHub, for PRs), csv, json."""
from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from rich.console import Console
from rich.table import Table

from copyprof.render.report_tables import TableData, run_tables, setup_lines

JSON_RUN_KEYS = ("path", "format", "flavour", "ranks", "layout", "steps", "per_step", "estimate")
JSON_EXTRA_KEYS = ("headline_rank", "device", "peak_gbps", "sites", "attribution", "notes", "rank_agreement",
                   "by_rank", "timing", "warnings")


def render_json(runs: list[dict[str, Any]], comparison: dict[str, Any] | None) -> str:
    out = {"runs": [{k: r.get(k) for k in (*JSON_RUN_KEYS, *JSON_EXTRA_KEYS)} for r in runs], "comparison": comparison}
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


def render_terminal(runs: list[dict[str, Any]], console: Console, *, labels: list[str], by_rank: bool,
                    extra_tables: list[TableData] | None = None) -> None:
    for label, run in zip(labels, runs):
        console.rule(f"[bold]{label}[/bold]: {run['path']}")
        console.print(" · ".join(setup_lines(run)))
        for t in run_tables(run, by_rank):
            _rich_table(console, t)
        for n in run["notes"]:
            console.print(f"[dim]note:[/dim] {n}")
        for w in run["warnings"]:
            console.print(f"[yellow]warning:[/yellow] {w}")
    for t in extra_tables or []:
        _rich_table(console, t)


def _rich_table(console: Console, t: TableData) -> None:
    table = Table(title=t.title, title_justify="left", show_edge=False)
    for i, c in enumerate(t.columns):
        table.add_column(c, justify="left" if i == 0 or c in ("where", "bound", "site") else "right")
    for row in t.rows:
        table.add_row(*(str(v) for v in row))
    console.print(table)
    if t.note:
        console.print(f"  [dim]{t.note}[/dim]")


def markdown_table(t: TableData) -> str:
    lines = [f"**{t.title}**", "", "| " + " | ".join(t.columns) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(t.columns))) + "|"]
    lines += ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in t.rows]
    if t.note:
        lines += ["", f"_{t.note}_"]
    return "\n".join(lines)


def render_markdown(runs: list[dict[str, Any]], *, labels: list[str], by_rank: bool,
                    extra: list[str] | None = None) -> str:
    parts: list[str] = []
    for label, run in zip(labels, runs):
        title = f"### {label}" if len(runs) > 1 else "### copyprof report"
        parts.append(title)
        parts.append("**Profile setup.** " + "; ".join(setup_lines(run)) + ".")
        parts.extend(markdown_table(t) for t in run_tables(run, by_rank))
        notes = run["notes"] + run["warnings"]
        if notes:
            parts.append("\n".join(f"- {n}" for n in notes))
    parts.extend(extra or [])
    return "\n\n".join(parts) + "\n"


def render_csv(runs: list[dict[str, Any]], *, labels: list[str], by_rank: bool) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["run", "table", "row", "column", "value"])
    for label, run in zip(labels, runs):
        for t in run_tables(run, by_rank):
            for i, row in enumerate(t.rows):
                for col, val in zip(t.columns, row):
                    w.writerow([label, t.key, i, col, val])
        for i, text in enumerate(run.get("warnings") or []):  # low-confidence results: said in every format
            w.writerow([label, "warnings", i, "warning", text])
    return buf.getvalue()
