"""`report --plot FILE`: step periods, copy ms by site, and one decode step's timeline."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from copyprof.analysis.ab.results import Comparison
from copyprof.analysis.results import RunReport, Site
from copyprof.errors import CopyprofError
from copyprof.models.layout import kind_label
from copyprof.vocabulary import MeasureName, Role, UNATTRIBUTED_SITE


def _site_label(s: Site, site: str | None = None) -> str:
    names = {UNATTRIBUTED_SITE: "post-proj (unattributed)", Role.STAGING: "all-reduce staging"}
    site = site or s.site
    name = f"post-proj {kind_label(site)}" if s.role == Role.POST and site != UNATTRIBUTED_SITE \
        else names.get(site, site)
    size = f"{s.bytes / 1024:.0f} KiB" if s.bytes > 0 else "size ?"
    return f"{name} ({size})"


def write_plots(path: str, runs: list[RunReport], paths: tuple[str, ...], names: list[str],
                comparison: Comparison | None) -> Path:
    """Draw the report's figure to ``path`` and return where it went (the CLI prints it).

    A missing folder is an error, never created: ``--plot /tmp/typo/x.png`` must not scatter
    folders, and the user must learn where the plot did not go."""
    from copyprof.render.plots import plot_report

    if not path.lower().endswith((".png", ".svg")):
        raise CopyprofError("--plot needs a file name ending in .png or .svg", path=path)
    folder = Path(path).parent
    if not folder.is_dir():
        raise CopyprofError(f"--plot: the folder {str(folder)!r} does not exist (copyprof creates no folders)",
                            path=path)
    periods = {n: np.asarray([v for v in r.step_series.get("period_ms", []) if v is not None], dtype=float)
               for n, r in zip(names, runs)}
    periods = {n: v for n, v in periods.items() if len(v)}
    post = set()
    if len(runs) == 2:
        from copyprof.analysis.ab.sites import post_keys, site_key

        post = post_keys(runs[0])
    sites = {}
    for n, r in zip(names, runs):
        rows = []
        for s in r.sites:
            label = _site_label(s)
            if s.role != Role.POST and post and site_key(s) in post:
                label = _site_label(s, UNATTRIBUTED_SITE)  # recognised by the baseline's copies
            rows.append((label, float(s.ms_per_step)))
        sites[n] = rows
    shift = _drawn_shift(comparison)
    tl = runs[0].timeline
    timeline = None if tl is None else {"start_ns": tl.start_ns, "dur_ns": tl.dur_ns, "name": tl.name, "site": tl.site}
    title = " vs ".join(names) if len(runs) == 2 else f"copyprof: {names[0]}"
    if not periods:
        raise CopyprofError("nothing to plot: no decode steps with a period were found", path=paths[0])
    try:
        return plot_report(path, periods=periods, sites=sites, timeline=timeline, title=title, shift=shift)
    except OSError as exc:
        raise CopyprofError(f"cannot write plot: {exc.strerror or exc}", path=path) from exc


def _or_nan(x: float | None) -> float:
    return float("nan") if x is None else x


def _drawn_shift(comparison: Comparison | None):  # noqa: ANN202 (a ShiftResult, imported lazily)
    """The comparison's step-period saving, as the plot draws it: from the results, never recomputed."""
    if comparison is None:
        return None
    m = next((x for x in comparison.measures if x.name == MeasureName.STEP_PERIOD), None)
    if m is None:
        return None
    import math

    from copyprof.stats.shift import ShiftResult

    lo, hi = m.ci95_ms
    noise = comparison.noise_ms
    return ShiftResult(estimate_ms=-m.measured_ms,
                       ci95_ms=(-hi if hi is not None else -math.inf, -lo if lo is not None else math.inf),
                       method=m.unit, n_baseline=m.n_baseline, n_candidate=m.n_candidate,
                       noise_ms={"baseline": _or_nan(noise.baseline if noise else None),
                                 "candidate": _or_nan(noise.candidate if noise else None)},
                       mean_ms={}, median_ms={})
