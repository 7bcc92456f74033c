"""Renderers for ``copyprof inspect`` summaries: rich terminal tables and the JSON contract."""
from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Column, Table

from copyprof.taxonomy.devices import device_label

# The documented `inspect --format json` contract (README "JSON contracts"). Extra keys may be
# added later; these never change meaning.
CONTRACT_KEYS = ("path", "format", "flavour", "ranks", "counts", "d2d_copies", "d2d_by_name",
                 "annotations", "graph_launches")
EXTRA_KEYS = ("role", "span_ms", "d2d_by_bytes", "d2d_total_ms", "elementwise_copies_by_name", "partial", "warnings",
              "steps")


def to_json(summaries: list[dict[str, Any]]) -> str:
    files = [{k: s[k] for k in (*CONTRACT_KEYS, *EXTRA_KEYS) if k in s} for s in summaries]
    return json.dumps({"files": files}, indent=2)


def _more(console: Console, total: int, shown: int, what: str) -> None:
    """Say that a list was cut, and where the rest is (the JSON holds every row)."""
    if total > shown:
        console.print(f"  [dim]… {total - shown:,} more {what} (the first {shown} shown; --format json lists all)[/dim]")


def render_terminal(summaries: list[dict[str, Any]], console: Console, top: int = 12) -> None:
    """Each file's summary; kernel names are cut to a line on a terminal only (piped: whole)."""
    width = 110 if console.is_terminal else None
    for s in summaries:
        role = "" if s["role"] == "rank" else f" [{s['role']}]"
        if console.is_terminal:
            console.rule(f"[bold]{s['path']}[/bold]{role}")
        else:  # piped: no terminal width to fill (a rule would be as wide as the console's unlimited width)
            console.print(f"== {s['path']}{role} ==", markup=False)
        console.print(
            f"format [cyan]{s['format']}[/cyan] · flavour [cyan]{s['flavour']}[/cyan] · "
            f"ranks {s['ranks']} · {device_label(s['devices'])} · span {s['span_ms']:.3f} ms · "
            f"graph launches {s['graph_launches']}"
        )
        counts = Table(title="events by kind", show_edge=False)
        for k in s["counts"]:
            counts.add_column(k, justify="right")
        counts.add_row(*(f"{v:,}" for v in s["counts"].values()))
        console.print(counts)
        console.print(f"device-to-device copies: [bold]{s['d2d_copies']:,}[/bold] ({s['d2d_total_ms']:.3f} ms in all)")
        if s["d2d_by_name"]:
            t = Table("copy event", "count", show_edge=False)
            for name, n in list(s["d2d_by_name"].items())[:top]:
                t.add_row(name, f"{n:,}")
            console.print(t)
            _more(console, len(s["d2d_by_name"]), top, "copy event names")
            b = Table("bytes", "from", "count", "median µs", show_edge=False)
            for row in s["d2d_by_bytes"][:top]:
                size = "unknown" if row["bytes"] < 0 else (f"≤{row['bytes']:,}" if row["bytes_src"] == "grid-bound" else f"{row['bytes']:,}")
                b.add_row(size, row["bytes_src"], f"{row['count']:,}", f"{row['median_us']:.2f}")
            console.print(b)
            _more(console, len(s["d2d_by_bytes"]), top, "copy sizes")
        if s["elementwise_copies_by_name"]:
            n = sum(s["elementwise_copies_by_name"].values())
            console.print(f"elementwise copy kernels (not counted as d2d): {n:,}")
            for name, c in list(s["elementwise_copies_by_name"].items())[:5]:
                console.print(f"  {c:>7,}  {_short(name, width)}")
            _more(console, len(s["elementwise_copies_by_name"]), 5, "elementwise copy kernel names")
        if s["annotations"]:
            console.print(f"annotations: {len(s['annotations']):,} names")
            for name, c in list(s["annotations"].items())[:top]:
                console.print(f"  {c:>7,}  {_short(name, width)}")
            _more(console, len(s["annotations"]), top, "annotation names")
        if "steps" in s:
            _step_forms(console, s["steps"])
        if s["partial"]:
            console.print(f"[yellow]partly read:[/yellow] {s['partial']}")
        for w in s["warnings"]:
            console.print(f"[yellow]warning:[/yellow] {w}")


def _short(name: str, width: int | None) -> str:
    return name if width is None or len(name) <= width else name[: width - 1] + "…"


def _step_forms(console: Console, steps: dict[str, Any]) -> None:
    """``--steps``: per step annotation, each copy form's count per step (min–max if it varies)."""
    if not steps["annotations"]:
        console.print(f"no step annotation matches {steps['pattern']!r} (--step-pattern)")
    for name, entry in steps["annotations"].items():
        t = Table("copy form", Column("per step", justify="right"), title=f"{name}: {entry['steps']:,} steps", title_justify="left",
                  show_edge=False)
        for form, n in entry["copies_per_step"].items():
            t.add_row(form, f"{n:,}" if isinstance(n, int) else f"{n['min']:,}–{n['max']:,}")
        console.print(t)
    if steps["outside_steps"]:
        outside = ", ".join(f"{n:,} {form}" for form, n in steps["outside_steps"].items())
        console.print(f"outside every step: {outside}")
