"""`report --plot FILE`: step periods, copy ms by site, and one decode step's timeline."""
from __future__ import annotations

from typing import Any

import numpy as np

from copyprof.errors import CopyprofError
from copyprof.models.layout import kind_label


def _site_label(s: dict[str, Any]) -> str:
    names = {"post-proj": "post-proj (unattributed)", "allreduce-staging": "all-reduce staging"}
    name = f"post-proj {kind_label(s['site'])}" if s.get("role") == "post-projection" and s["site"] != "post-proj" \
        else names.get(s["site"], s["site"])
    size = f"{s['bytes'] / 1024:.0f} KiB" if s["bytes"] > 0 else "size ?"
    return f"{name} ({size})"


def write_plots(path: str, runs: list[dict[str, Any]], paths: tuple[str, ...], names: list[str],
                comparison: dict[str, Any] | None) -> None:
    from copyprof.analysis.compare import measure
    from copyprof.render.plots import plot_report

    if not path.lower().endswith((".png", ".svg")):
        raise CopyprofError("--plot needs a file name ending in .png or .svg", path=path)
    periods = {n: np.asarray([v for v in r["step_series"].get("period_ms", []) if v == v], dtype=float)
               for n, r in zip(names, runs)}
    periods = {n: v for n, v in periods.items() if len(v)}
    post = set()
    if len(runs) == 2:
        from copyprof.analysis.compare import post_keys, site_key

        post = post_keys(runs[0])
    sites = {}
    for n, r in zip(names, runs):
        rows = []
        for s in r["sites"]:
            label = _site_label(s)
            if s.get("role") != "post-projection" and post and site_key(s) in post:
                label = _site_label({**s, "site": "post-proj"})  # recognised by the baseline's copies
            rows.append((label, float(s["ms_per_step"])))
        sites[n] = rows
    shift = measure(runs[0], runs[1]) if len(runs) == 2 else None
    timeline = runs[0].get("timeline")
    if isinstance(timeline, dict) and "columns" in timeline:  # served from the result cache
        import pandas as pd

        timeline = pd.DataFrame(timeline["columns"])
    title = " vs ".join(names) if len(runs) == 2 else f"copyprof: {names[0]}"
    if not periods:
        raise CopyprofError("nothing to plot: no decode steps with a period were found", path=paths[0])
    try:
        plot_report(path, periods=periods, sites=sites, timeline=timeline, title=title, shift=shift)
    except OSError as exc:
        raise CopyprofError(f"cannot write plot: {exc.strerror or exc}", path=path) from exc
