"""Plot tests: files are real PNG/SVG, the report figure has the panels it claims, odd inputs draw.

What the plots look like was checked by eye on rendered PNGs; these tests pin what
can be checked mechanically: headers, panel count, legend content, no crash on edge cases.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes

from copyprof.stats.shift import shift_estimate
from copyprof.render.plots import build_report_figure, plot_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def periods() -> dict[str, np.ndarray]:
    """Two arms of 200 steps, the candidate 0.13 ms faster, 2 % of steps 3-10x long."""
    rng = np.random.default_rng(0)
    out = {}
    for name, mu in (("baseline", 25.53), ("direct-return", 25.40)):
        x = mu + rng.normal(0, 0.3, 200)
        m = rng.random(200) < 0.02
        x[m] *= rng.uniform(3, 10, int(m.sum()))
        out[name] = x
    return out


SITES = {
    "baseline": [("post-proj copy, MLA layers", 0.036), ("post-proj copy, KDA layers", 0.10), ("KV-cache write", 0.02)],
    "direct-return": [("post-proj copy, KDA layers", 0.10), ("KV-cache write", 0.02)],
}


def timeline() -> pd.DataFrame:
    """A short step: kernels with one copy of each layer kind in between, absolute ns times."""
    rows, t = [], 1_000_000_000
    for i, site in enumerate(["", "mla", "", "kda", "", "other-copy", ""]):
        dur = 2_000 if site else 20_000
        rows.append((t, dur, f"k{i}", site))
        t += dur + 1_500
    return pd.DataFrame(rows, columns=["start_ns", "dur_ns", "name", "site"])


def legend_texts(ax: Axes) -> list[str]:
    leg = ax.get_legend()
    return [t.get_text() for t in leg.get_texts()] if leg else []


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_report_file_is_written_with_a_valid_header(tmp_path: Path, suffix: str) -> None:
    """The extension picks the format; the file must start like a real PNG / SVG document."""
    out = plot_report(tmp_path / f"report{suffix}", periods=periods(), sites=SITES, timeline=timeline(),
                      title="baseline vs direct-return")
    data = out.read_bytes()
    assert out.exists() and len(data) > 1000
    if suffix == ".png":
        assert data.startswith(PNG_MAGIC)
    else:
        head = data[:400].decode("utf-8")
        assert head.startswith("<?xml") and "<svg" in data[:2000].decode("utf-8")


def test_a_missing_folder_is_refused_not_created(tmp_path: Path) -> None:
    """--plot /typo/x.png must not scatter folders: the folder must exist, nothing is created."""
    with pytest.raises(FileNotFoundError, match="does not exist"):
        plot_report(tmp_path / "typo" / "r.png", periods=periods(), sites=SITES, timeline=None, title="t")
    assert list(tmp_path.iterdir()) == []


def test_unknown_extension_is_refused(tmp_path: Path) -> None:
    """--plot takes .png or .svg only; anything else is a user error, not a silent PNG."""
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        plot_report(tmp_path / "r.pdf", periods=periods(), sites=SITES, timeline=None, title="t")


def test_report_figure_has_three_panels_or_two_without_timeline() -> None:
    """Panels (a) distributions, (b) sites, (c) timeline are three axes; (c) is skipped if None."""
    fig = build_report_figure(periods=periods(), sites=SITES, timeline=timeline(), title="t")
    assert len(fig.axes) == 3
    assert [ax.get_title(loc="left")[:3] for ax in fig.axes] == ["(a)", "(b)", "(c)"]
    assert len(build_report_figure(periods=periods(), sites=SITES, timeline=None, title="t").axes) == 2


def test_panels_carry_the_numbers_a_reviewer_needs() -> None:
    """(a) states the comparison's shift with its CI (the renderer draws it; it computes none) and
    how many outliers fell off the axis; (b) marks the site only the baseline has (the removed
    copy); (c) names each copy kind with count and us."""
    p = periods()
    shift = shift_estimate(*p.values())
    fig = build_report_figure(periods=p, sites=SITES, timeline=timeline(), title="t", shift=shift)
    a, b, c = fig.axes
    ta = legend_texts(a)
    # stated as a saving (baseline - candidate), the tables' sign: the candidate is ~0.13 ms faster,
    # so the number is positive
    saving = [t for t in ta if t.startswith("saving baseline \u2212 direct-return: ") and "95 % CI [" in t]
    assert len(saving) == 1 and 0.05 < float(saving[0].split(": ")[1].split(" ms")[0]) < 0.25, ta
    assert any("values beyond the axis" in t for t in ta)
    assert "post-proj copy, MLA layers  (baseline only)" in legend_texts(b)
    tc = legend_texts(c)
    assert any(t.startswith("MLA-layer copy: 1,") for t in tc) and any(t.startswith("KDA-layer copy: 1,") for t in tc)
    assert [t.get_text() for t in c.get_yticklabels()] == ["all kernels", "MLA-layer copies", "KDA-layer copies",
                                                             "other copies"]
    assert a.get_xlim()[1] < 30  # the 10x steps did not stretch the axis


def test_edge_cases_still_draw(tmp_path: Path) -> None:
    """Tiny samples, an arm without copies, many long site names, an empty timeline and a
    missing/NaN site column value must all produce a file rather than an exception."""
    many = {"baseline": [(f"site {i}: a rather long copy site label number {i}", 0.01 * (i + 1)) for i in range(12)],
            "candidate": []}
    tl = pd.DataFrame({"start_ns": [0, 5000], "dur_ns": [4000, 1000], "name": ["a", "copy"], "site": [None, "mla"]})
    small = {"baseline": np.array([25.1, 25.4, 25.2]), "candidate": np.array([25.0, 25.3, 24.9])}
    cases = [(small, many, tl), (small, many, tl.iloc[:0]), ({"only": np.array([1.0])}, {}, None)]
    for i, (p, s, t) in enumerate(cases):
        out = plot_report(tmp_path / f"e{i}.png", periods=p, sites=s, timeline=t, title="edge")
        assert out.read_bytes().startswith(PNG_MAGIC)
    fig = build_report_figure(periods=small, sites=many, timeline=tl, title="edge")
    assert "5 smaller sites  (baseline only)" in legend_texts(fig.axes[1])  # 12 sites: 7 shown + 1 folded
