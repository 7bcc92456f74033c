"""A/B plots for ``copyprof report --plot FILE.png|.svg`` (matplotlib, headless).

Three panels a reviewer reads in this order: (a) did the step period move, and by how much
with what certainty; (b) where the copy time per step goes, per arm, and which sites the
candidate removed; (c) where in one decode step the copies sit, coloured by layer kind.

Headless by construction: figures are ``matplotlib.figure.Figure`` objects (never pyplot), so
no GUI backend, no global figure registry and nothing to close; ``savefig`` picks the Agg (PNG)
or SVG canvas from the file extension. Panel functions take an ``Axes`` so that the report can
also place them elsewhere; :func:`plot_report` draws all of them into one file.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from copyprof.columns import Categorical
from copyprof.stats.shift import ShiftResult, robust_noise
from copyprof.analysis.wording import fmt_ms
from copyprof.models.layout import kind_label

ARM_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#8172b3")
# a copy's layer kind -> colour (K3's kinds have fixed colours, so that figures compare across
# reports; any other kind takes the next of SPARE_COLOURS); "other-copy" is any copy outside a
# layer's post-projection site and "" (not a copy) is drawn grey
KIND_COLOURS = {"mla": "#d62728", "kda": "#1f77b4"}
SPARE_COLOURS = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
OTHER_COPY_COLOUR = "#ff7f0e"
KERNEL_COLOUR = "#b0b0b0"
SITE_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
                "#ccb974", "#64b5cd", "#1b9e77", "#e7298a")
SUFFIXES = (".png", ".svg")
MAX_SITES = 8  # segments per bar; the rest are folded into "N smaller sites"
MAX_LABEL = 48  # characters of a site label in the legend
MAX_ARM = 28  # characters of an arm's name on an axis or in a legend (run folders are long)


def short_name(name: str, limit: int = MAX_ARM) -> str:
    """An arm's name cut in the middle ("replica-kimi…0T042336Z") so both ends stay readable."""
    if len(name) <= limit:
        return name
    head = (limit - 1) // 2
    return name[:head] + "\u2026" + name[-(limit - 1 - head):]


def kind_styles(kinds: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Each copy kind's (legend label, colour): layer kinds first, then "other copy"."""
    styles, spare = {}, iter(SPARE_COLOURS)
    for k in kinds:
        if k and k != "other-copy" and k not in styles:
            styles[k] = (f"{kind_label(k)}-layer copy", KIND_COLOURS.get(k) or next(spare, "#7f7f7f"))
    styles["other-copy"] = ("other copy", OTHER_COPY_COLOUR)
    return styles


def plot_periods(ax: Axes, periods: Mapping[str, np.ndarray], shift: ShiftResult | None = None,
                 *, xlabel: str = "step period (ms)") -> ShiftResult | None:
    """(a) Overlaid histograms of each arm on shared bins, medians dashed, the shift's CI drawn.

    The x range is the bulk (0.5-99.5 % quantiles of the values within 8 robust SDs of the
    pooled median) so that a few 10x steps do not squash the bulk into one bin; how many fell
    outside is written in the legend instead. The first arm is the baseline, the second the
    candidate (the shift is candidate - baseline, drawn as a bar at baseline median + shift);
    ``shift`` is the comparison's (none: no interval is drawn; a renderer computes nothing). The legend states it as a
    saving (baseline - candidate, positive = candidate faster), the sign every table uses; the
    bar sits where the candidate's median is expected. Returns the shift drawn.
    All numbers sit in the one legend box so that nothing overlaps.
    """
    arms = [(short_name(k), np.asarray(v, dtype=float)) for k, v in periods.items()]
    arms = [(k, v[np.isfinite(v)]) for k, v in arms]
    pooled = np.concatenate([v for _, v in arms]) if arms else np.array([])
    ax.set_title(f"(a) {xlabel.split(' (')[0]} distribution", loc="left", fontweight="bold")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    if pooled.size == 0:
        ax.text(0.5, 0.5, "no periods", ha="center", va="center", transform=ax.transAxes)
        return shift
    lo, hi = _bulk_range(pooled)
    shown = (pooled >= lo) & (pooled <= hi)
    nbins = int(np.clip(1.5 * math.sqrt(shown.sum()), 10, 50))
    edges: list[float] = np.histogram_bin_edges(pooled[shown], bins=nbins, range=(lo, hi)).tolist()
    _draw_arms(ax, arms, edges, lo, hi)
    ax.set_xlim(lo, hi)
    top = ax.get_ylim()[1]
    ax.set_ylim(0, top * 1.75)  # head-room for the CI bar and the legend box
    extra = _draw_shift(ax, shift, arms, top) if shift is not None and len(arms) >= 2 else []
    outside = int(pooled.size - shown.sum())
    if outside:
        extra.append(f"{outside} values beyond the axis (max {fmt_ms(float(pooled.max()))} ms)")
    _period_legend(ax, extra)
    return shift


def _bulk_range(pooled: np.ndarray) -> tuple[float, float]:
    """The x range of panel (a): the 0.5-99.5 % quantiles of the values within 8 robust SDs of
    the pooled median, padded by 5 %."""
    centre, spread = float(np.median(pooled)), robust_noise(pooled)
    bulk = pooled[np.abs(pooled - centre) <= 8 * spread] if spread > 0 else pooled
    lo, hi = np.quantile(bulk, [0.005, 0.995])
    pad = max(hi - lo, 1e-6 * max(abs(hi), 1.0)) * 0.05
    return lo - pad, hi + pad


def _draw_arms(ax: Axes, arms: Sequence[tuple[str, np.ndarray]], edges: list[float], lo: float, hi: float) -> None:
    """Each arm's histogram of its values inside [lo, hi] on the shared ``edges``, filled and
    outlined in the arm's colour, and its median as a dashed line."""
    for i, (name, v) in enumerate(arms):
        col = ARM_COLOURS[i % len(ARM_COLOURS)]
        if v.size == 0:
            continue
        med = float(np.median(v))
        inside = v[(v >= lo) & (v <= hi)]
        ax.hist(inside, bins=edges, histtype="stepfilled", alpha=0.30, color=col)
        ax.hist(inside, bins=edges, histtype="step", lw=1.4, color=col,
                label=f"{name}: n={v.size}, median {fmt_ms(med, 4)} ms (dashed)")
        ax.axvline(med, color=col, ls="--", lw=1.2)


def _draw_shift(ax: Axes, shift: ShiftResult, arms: Sequence[tuple[str, np.ndarray]], top: float) -> list[str]:
    """Draw the shift's CI as a bar at the baseline median + shift, above the histograms' ``top``;
    returns the text-only legend rows (the saving when it has no finite interval, the noise)."""
    extra: list[str] = []
    elo, ehi = shift.ci95_ms
    slo, shi = shift.saving_ci95_ms
    ci = (f"{_ci_label(shift)} [{fmt_ms(slo)}, {fmt_ms(shi)}]" if math.isfinite(slo) and math.isfinite(shi)
          else f"no finite {_ci_label(shift)} (too few values)")
    label = f"saving {arms[0][0]} \u2212 {arms[1][0]}: {fmt_ms(shift.saving_ms)} ms, {ci}"
    if math.isfinite(elo) and math.isfinite(ehi):
        c = float(np.median(arms[0][1])) + shift.estimate_ms
        ax.errorbar([c], [top * 1.1], xerr=[[shift.estimate_ms - elo], [ehi - shift.estimate_ms]], fmt="o",
                    color="black", capsize=4, ms=4, label=label)
    else:
        extra.append(label)
    extra.append(f"noise (MAD\u00d71.4826) {arms[0][0]} / {arms[1][0]}: {fmt_ms(shift.noise_ms['baseline'])}"
                 f" / {fmt_ms(shift.noise_ms['candidate'])} ms")
    return extra


def _period_legend(ax: Axes, extra: list[str]) -> None:
    """One legend box: the arms, then the shift, then the text-only ``extra`` rows."""
    for line in extra:
        ax.plot([], [], " ", label=line)  # text-only legend rows
    handles, labels = ax.get_legend_handles_labels()
    rank = [1 if t.startswith("saving") else 2 if t in extra else 0 for t in labels]  # arms, shift, notes
    order = sorted(range(len(labels)), key=lambda i: rank[i])
    ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper left", fontsize=8,
              framealpha=0.95)


def plot_sites(ax: Axes, sites: Mapping[str, Sequence[tuple[str, float]]]) -> None:
    """(b) Copy ms per step by site, one stacked horizontal bar per arm, the total at its end.

    Sites keep one colour across arms and are ordered by their largest ms/step; a site missing
    from some arm says so in the legend ("baseline only"), which is how a removed copy shows.
    """
    ax.set_title("(b) copy time per step by site", loc="left", fontweight="bold")
    ax.set_xlabel("copy time per step (ms)")
    arms = [short_name(a) for a in sites]
    per_arm = {short_name(a): _sum_by_label(rows) for a, rows in sites.items()}
    labels: list[str] = []
    for a in arms:
        labels += [s for s in per_arm[a] if s not in labels]
    labels.sort(key=lambda s: -max(per_arm[a].get(s, 0.0) for a in arms))
    if len(labels) > MAX_SITES:  # fold the smallest into one segment so the legend stays readable
        rest = labels[MAX_SITES - 1:]
        other = f"{len(rest)} smaller sites"
        for a in arms:
            if any(s in per_arm[a] for s in rest):
                per_arm[a][other] = sum(per_arm[a].pop(s) for s in rest if s in per_arm[a])
        labels = labels[:MAX_SITES - 1] + [other]
    if not labels:
        ax.text(0.5, 0.5, "no copies", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks(range(len(arms)), arms)
        return
    totals = [sum(per_arm[a].values()) for a in arms]
    for j, s in enumerate(labels):
        left = [sum(per_arm[a].get(t, 0.0) for t in labels[:j]) for a in arms]
        width = [per_arm[a].get(s, 0.0) for a in arms]
        present = [a for a in arms if s in per_arm[a]]
        tag = "" if len(present) == len(arms) else f"  ({', '.join(present)} only)"
        short = s if len(s) <= MAX_LABEL else s[:MAX_LABEL - 1] + "\u2026"
        ax.barh(range(len(arms)), width, left=left, height=0.55, color=SITE_COLOURS[j % len(SITE_COLOURS)],
                edgecolor="white", lw=0.6, label=short + tag)
    xmax = max(totals) if max(totals) > 0 else 1.0
    for i, t in enumerate(totals):
        ax.text(t + xmax * 0.01, i, f"{fmt_ms(t)} ms/step", va="center", fontsize=9)
    ax.set_xlim(0, xmax * 1.28)  # room for the totals
    ax.set_yticks(range(len(arms)), arms)
    ax.invert_yaxis()  # first arm (baseline) on top
    wide = max(len(t) for t in labels) > MAX_LABEL // 3 or len(arms) > 2
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1 if wide else min(2, len(labels)),
              fontsize=8, frameon=False)


def plot_timeline(ax: Axes, timeline: Any, *, step_start_ns: int | None = None) -> None:
    """(c) One step's kernels on a time axis (us from step start), copies in their own lanes.

    Copies are a few microseconds in a multi-millisecond step, i.e. narrower than a pixel, so
    besides their true-width bars each copy lane draws a tick per copy; the kernel lane shows
    the copies in colour too, so their position among the other kernels is visible.
    ``timeline``: a table by column name (``copyprof.columns.Columns``, a pandas DataFrame or a
    dict of sequences) with start_ns, dur_ns, name, site (a layer kind such as "mla" or
    "linear", "other-copy", or "" / None for non-copies; "site" may be absent).
    """
    ax.set_xlabel("time from step start (\u00b5s)")
    start_ns = _column(timeline, "start_ns")
    order = np.argsort(start_ns, kind="quicksort")  # as DataFrame.sort_values orders (ties included)
    if not len(order):
        ax.set_title("(c) one decode step: no kernels", loc="left", fontweight="bold")
        ax.set_yticks([])
        return
    start = start_ns[order]
    t0 = int(start.min()) if step_start_ns is None else int(step_start_ns)
    x = (start.astype(float) - t0) / 1e3
    w = _column(timeline, "dur_ns")[order].astype(float) / 1e3
    sites = _column(timeline, "site")[order].tolist() if "site" in timeline else [""] * len(order)
    site = np.array([_site_text(v) for v in sites], dtype=object)
    styles = kind_styles([k for k in dict.fromkeys(site.tolist()) if k])  # kinds in order of first copy
    kinds = [k for k in styles if np.any(site == k)]
    lanes = ["all kernels"] + [styles[k][0].replace("copy", "copies") for k in kinds]
    ax.broken_barh(list(zip(x[site == ""], w[site == ""])), (-0.35, 0.7), facecolors=KERNEL_COLOUR)
    handles = [Patch(color=KERNEL_COLOUR, label=f"other kernels ({int(np.sum(site == ''))})")]
    for lane, k in enumerate(kinds, start=1):
        label, col = styles[k]
        m = site == k
        ax.broken_barh(list(zip(x[m], w[m])), (-0.35, 0.7), facecolors=col)  # in the stream
        ax.broken_barh(list(zip(x[m], w[m])), (lane - 0.35, 0.7), facecolors=col)
        ax.eventplot([x[m]], lineoffsets=lane, linelengths=0.7, colors=col, linewidths=0.8)
        handles.append(Patch(color=col, label=f"{label}: {int(m.sum())}, {fmt_ms(float(w[m].sum()))} \u00b5s"))
    end = float(np.max(x + w))
    ax.set_xlim(min(0.0, float(x.min())), end * 1.01 if end > 0 else 1.0)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.grid(axis="x", alpha=0.3)
    ncopy = int(np.sum(site != ""))
    ax.set_title(f"(c) one decode step: {len(order)} kernels, {ncopy} {'copy' if ncopy == 1 else 'copies'}, "
                 f"{fmt_ms(end)} \u00b5s",
                 loc="left", fontweight="bold")
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(handles), fontsize=8,
              frameon=False)


def build_report_figure(*, periods: Mapping[str, np.ndarray], sites: Mapping[str, Sequence[tuple[str, float]]],
                        timeline: Any, title: str, shift: ShiftResult | None = None,
                        period_label: str = "step period (ms)") -> Figure:
    """The three panels in one figure: (a) | (b) on top, (c) full width below (omitted if None)."""
    with_tl = timeline is not None
    fig = Figure(figsize=(14, 10.5 if with_tl else 5.8), layout="constrained")
    fig.suptitle(title, fontsize=13, fontweight="bold")
    if with_tl:
        gs = fig.add_gridspec(2, 2, height_ratios=[1.25, 1], width_ratios=[1.15, 1])
        ax_a, ax_b, ax_c = fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[0, 1]), fig.add_subplot(gs[1, :])
    else:
        gs = fig.add_gridspec(1, 2, width_ratios=[1.15, 1])
        ax_a, ax_b, ax_c = fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[0, 1]), None
    plot_periods(ax_a, periods, shift, xlabel=period_label)
    plot_sites(ax_b, sites)
    if ax_c is not None and timeline is not None:
        plot_timeline(ax_c, timeline)
    return fig


def plot_report(path: str | Path, *, periods: Mapping[str, np.ndarray],
                sites: Mapping[str, Sequence[tuple[str, float]]], timeline: Any, title: str,
                shift: ShiftResult | None = None, period_label: str = "step period (ms)", dpi: int = 150) -> Path:
    """Write the report figure to ``path`` (``.png`` or ``.svg``, chosen by the extension)."""
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES:
        raise ValueError(f"plot file must end in .png or .svg, got {p.name!r}")
    if not p.parent.is_dir():  # a typo in a folder name should not create folders
        raise FileNotFoundError(f"folder {str(p.parent)!r} does not exist")
    fig = build_report_figure(periods=periods, sites=sites, timeline=timeline, title=title, shift=shift,
                              period_label=period_label)
    fig.savefig(p, dpi=dpi, format=p.suffix.lower()[1:])
    return p


def _column(table: Any, name: str) -> np.ndarray:
    """A column of a timeline table as a numpy array (a categorical's strings, None where missing)."""
    col = table[name]
    return col.strings(None) if isinstance(col, Categorical) else np.asarray(col)


def _site_text(v: Any) -> str:
    """A site as the timeline draws it: lower case, "" for a missing one (None or NaN)."""
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v).lower()


def _sum_by_label(rows: Sequence[tuple[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for label, ms in rows:
        out[str(label)] = out.get(str(label), 0.0) + float(ms)
    return out


def _ci_label(shift: ShiftResult) -> str:
    return f"{100 * shift.confidence:g} % CI"
