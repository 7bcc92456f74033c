"""Step fallbacks meet a stated minimum or say plainly that no steps were
found, and every low-confidence result carries a warning in every output format.

Seen on real traces: TraceLens ``tests/traces/mi210/gpu_only_trace`` (no CPU side) was cut at
3 µs gaps into 13 one-kernel "decode steps"; on the shared MI350X rocprofv3 sample (a training
run, 3,153 ``__amd_rocclr_copyBuffer`` launches) the idle-gap rule took 1 of 7 unrelated
segments and showed 0 copies per step. The GPU timelines below are written here to have each
shape on its own; the MI350X sample is read as it is.
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from copyprof.analysis.report import analyze_run
from copyprof.analysis.steps.idle_gaps import MIN_KERNELS
from copyprof.analysis.steps.segment import segment
from copyprof.events import EventTableBuilder, Trace, TraceMeta
from copyprof.reading import read_runs
from copyprof.render.report_text import RENDERERS, ReportView, render_terminal

MI350X = Path(__file__).resolve().parents[2].parent / "shared" / "sample_traces" / \
    "rocprofv3_json_gfx950_mi350x_908_results.json.gz"


def _timeline(segments: list[int], gap_ns: int, inner_gap_ns: int = 2_000, copies_per_segment: int = 1):
    """GPU-only events: ``segments`` runs of kernels (the first ``copies_per_segment`` of each
    a rocclr copy kernel), ``inner_gap_ns`` apart inside a run and ``gap_ns`` between runs."""
    b = EventTableBuilder()
    t = 0
    for n in segments:
        for i in range(n):
            name = "__amd_rocclr_copyBuffer.kd" if i < copies_per_segment else f"gemm_{i}"
            b.add("kernel", name, t, 5_000, on_gpu=True, device=0, stream=1)
            t += 5_000 + inner_gap_ns
        t += gap_ns
    return b.build()


def test_a_microscopic_gap_finds_no_steps():
    # the GPU-only shape: runs of kernels 0.1 µs apart, the runs 3 µs apart: 3 µs stands out
    # from the gaps inside (30x) but each run holds 5 kernels: no decode step is that small
    events = _timeline([5] * 13, gap_ns=3_000, inner_gap_ns=100)
    steps = segment(events)
    assert steps.rule == "none" and steps.table.empty
    [warning] = steps.warnings
    assert warning.startswith("no steps were found") and f"fewer than {MIN_KERNELS}" in warning
    assert "13 device-to-device copies in all" in warning


def test_a_short_gap_that_stands_far_out_cuts_steps():
    """A fast engine: K3-sized steps of 400 kernels at most 1 µs apart, 43 µs of idle between
    steps (under the 50 µs a fixed floor once asked): 43 µs is 43x the gaps inside, so each run
    is a step, and the note says the ratio the rule found and the one it asks."""
    events = _timeline([400] * 12, gap_ns=43_000, inner_gap_ns=1_000)
    steps = segment(events)
    assert steps.rule == "idle-gap" and steps.decode["n_events"].tolist() == [400] * 12
    assert "idle gaps >= 44.0 µs (44x the 95th-percentile gap inside a segment, 1.00 µs; the rule asks 10x)" \
        in steps.notes[0]


def test_a_gap_not_far_above_the_gaps_inside_cuts_nothing():
    # 43 µs between runs whose kernels are 8 µs apart: only 5x, not a step boundary
    steps = segment(_timeline([400] * 12, gap_ns=43_000, inner_gap_ns=8_000))
    assert steps.rule == "none" and "is not 10x the gaps it leaves inside the segments" in steps.warnings[0]


def test_a_repeating_structure_is_taken_and_flagged():
    # warm-up, 8 decode steps of 40 kernels 500 µs apart, a tail: the repeating size wins
    events = _timeline([7] + [40] * 8 + [3], gap_ns=500_000)
    steps = segment(events)
    assert steps.rule == "idle-gap"
    assert steps.decode["n_events"].tolist() == [40] * 8
    [warning] = steps.warnings
    assert warning.startswith("steps are inferred, not marked") and "8 of 10 segments" in warning


@pytest.mark.parametrize("segments,why", [
    ([40, 40, 90, 70], "no segment size repeats 3 times"),
    ([36, 114] * 6, "segments of 36, 114 events are equally common"),  # cloverleaf's shape: half a period each
    ([4] * 6, f"fewer than {MIN_KERNELS}"),  # saxpy's shape: one kernel and its copies per iteration
])
def test_structure_below_the_minimum_is_no_steps(segments, why):
    steps = segment(_timeline(segments, gap_ns=800_000))
    assert steps.rule == "none"
    assert why in steps.warnings[0]


def test_the_next_standing_out_gap_is_tried():
    # Steps of 30 kernels are 2 ms apart, and inside each a 10-kernel and a 20-kernel half are
    # 200 µs apart. Cutting at the most outstanding gap (200 µs against 2 µs) gives halves of
    # 10 and 20 equally often (rejected); the next outstanding gap, 2 ms, gives the steps.
    b = EventTableBuilder()
    t = 0
    for _ in range(6):
        for half in (10, 20):
            for i in range(half):
                b.add("kernel", f"k{i}", t, 5_000, on_gpu=True, device=0, stream=1)
                t += 7_000
            t += 200_000
        t += 2_000_000
    steps = segment(b.build())
    assert steps.rule == "idle-gap" and steps.decode["n_events"].tolist() == [30] * 6


@pytest.mark.skipif(not MI350X.is_file(), reason="shared sample not present")
def test_mi350x_training_run_has_no_steps_and_says_where_the_copies_are():
    [trace] = read_runs([str(MI350X)])
    steps = segment(trace.table)
    assert steps.rule == "none"
    assert "3,153 device-to-device copies" in steps.warnings[0]
    assert "no segment size repeats" in steps.warnings[0]


def _run(events) -> dict:
    meta = TraceMeta(path="gpu_only.json", format="kineto", flavour="cupti", ranks=[0], kind_counts={"kernel": len(events)})
    return analyze_run([Trace(meta, events)], "gpu_only.json", None)


@pytest.mark.parametrize("segments,gap,expect", [
    ([5] * 13, 3_000, "no steps were found"),
    ([40] * 8, 500_000, "steps are inferred, not marked"),
])
def test_every_output_format_carries_the_warning(segments, gap, expect):
    run = _run(_timeline(segments, gap_ns=gap, inner_gap_ns=100))
    assert any(w.startswith(expect) for w in run.warnings)
    view = ReportView([run], None, ["run"])
    outputs = {fmt: RENDERERS[fmt](view) for fmt in ("json", "markdown", "csv")}
    console = Console(file=io.StringIO(), width=10_000)
    render_terminal(view, console)
    outputs["table"] = console.file.getvalue()
    for fmt, text in outputs.items():
        assert expect in text, fmt
    assert any(w.startswith(expect) for w in json.loads(outputs["json"])["runs"][0]["warnings"])
    if expect.startswith("no steps"):  # no step counted: no per-step figure, not 0
        per_step = [line for line in outputs["csv"].splitlines() if line.startswith("per_step,")]
        assert per_step and all(line.split(",")[3] == "" for line in per_step), per_step
        census = [line for line in outputs["table"].splitlines() if "device-to-device copies │" in line]
        assert census and all("–" in line and " 0 " not in line for line in census), census


def test_graph_launch_steps_are_flagged():
    b = EventTableBuilder()
    for s in range(4):
        b.add("runtime", "cudaGraphLaunch", s * 1_000_000, 5_000, on_gpu=False, stream=11, correlation=s + 1)
        for i in range(12):
            b.add("kernel", f"k{i}", s * 1_000_000 + 10_000 + i * 6_000, 5_000, on_gpu=True, device=0, stream=7,
                  correlation=s + 1)
    steps = segment(b.build())
    assert steps.rule == "graph-launch" and len(steps.decode) == 4
    assert steps.warnings and "each of the 4 graph launches is taken as one step" in steps.warnings[0]
    assert not any("graph launch" in n for n in steps.notes)  # said once, as the warning
    assert np.all(steps.decode["n_events"] == 12)
