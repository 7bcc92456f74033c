"""The typed results of an A/B: ``comparison`` of ``report --format json``, beside the A/B that fills it.

Why a module of its own: a run's results (analysis/results.py) are what every report holds and
what the result cache stores; the comparison of two arms (what changed, each measure with its
interval and verdict, the estimates checked against them, the A/A noise floor, whether the GPU
bounds the step) is one idea, built only by analysis/ab/ and read by the renderers. It builds
on the runs' base pieces and imports nothing heavy, so a report answered from the cache
still renders without numpy or pandas.
"""
from __future__ import annotations

import msgspec

from copyprof.analysis.results import Struct
from copyprof.vocabulary import GroupStatus, MeasureName, Replication, Role, SiteStatus, VerdictKey


class SiteChange(Struct):
    site: str
    bytes: int
    neighbour: str
    baseline_per_step: float
    candidate_per_step: float
    status: SiteStatus


class GroupChange(Struct):
    """A copy group (``runs[].candidates`` key) whose copies per step differ between the arms."""

    role: Role
    source: str | None
    producer: str
    key: str
    layers: list[int]
    bytes: list[int]
    baseline_per_step: float
    candidate_per_step: float
    status: GroupStatus
    estimate_ms: float  # the baseline's kernel time of the copies that went (negative: copies added)
    estimate_with_gap_ms: float


class RemovedSite(Struct):
    bytes: int
    layer_kind: str
    per_step: int


class Measure(Struct):
    """One measurement of an A/B's saving (baseline − candidate) on its own observations."""

    name: MeasureName
    unit: str  # what one observation of the interval is: runs, steps (one process), blocks
    measured_ms: float
    ci95_ms: list[float | None]
    mde_ms: float | None
    n_baseline: int
    n_candidate: int
    key: VerdictKey  # the verdict's class (analysis/ab/verdict.py)
    resolved: bool
    verdict: str
    supports: str | None = None  # the estimate it supports: kernel | kernel_plus_gap (analysis/ab/verdict.py)
    supported_error: float | None = None  # (that estimate - measured) / measured
    assumes: str = ""  # what the interval assumes, in words
    between_runs_sd_ms: float | None = None  # the pooled between-run SD (runs as unit), None: not measured
    runs_needed: int | None = None  # runs per arm that would resolve the estimate (runs as unit)
    run_values_ms: dict[str, list[float]] = {}  # each run's value per arm (runs as unit)
    sessions: int = 0  # capture sessions the arm effect was read within (runs as unit); 0: not blocked


class PerArm(Struct):
    """A figure of each arm (None where it is not known)."""

    baseline: float | None
    candidate: float | None


class ArmCounts(Struct):
    baseline: int
    candidate: int


class RunsPerArm(Struct):
    """Runs pooled in each arm, and ``aa``: the runs of A/A groups."""

    baseline: int = 0
    candidate: int = 0
    aa: int = 0


class Estimates(Struct):
    """The saving a removal should give, ms per step: the copy kernels' time, and that plus the
    dispatch gap before each (which only a graph replay gives back)."""

    kernel: float
    kernel_plus_gap: float


class EstimateCheck(Struct):
    estimate_ms: float
    in_ci: bool
    abs_error_ms: float
    rel_error: float | None  # (estimate - measured) / measured; None when 0 was measured


class EstimatorCheck(Struct):
    """Which estimate (``kernel`` or ``kernel_plus_gap``) a measured saving supports (analysis/ab/verdict.py)."""

    measured_ms: float
    ci95_ms: list[float | None]
    resolved: bool
    ci_narrower_than_saving: bool
    estimates: dict[str, EstimateCheck]
    supported: str
    basis: str
    within_10pct: bool


class AaSummary(Struct):
    """An A/A of the setup: how far boots of identical code land apart (the noise floor)."""

    groups: int
    runs: int
    measure: MeasureName
    between_runs_sd_ms: float | None
    df: int
    two_boots_differ_ms: float | None
    # the same on the GPU's busy time per step (GPU time alone: what a patch to GPU work must exceed)
    gpu_busy_between_runs_sd_ms: float | None = None
    gpu_busy_two_boots_differ_ms: float | None = None


class ClientComparison(Struct):
    """``comparison.client``: each request's TPOT, with runs as the unit."""

    metric: str
    unit: str
    requests: ArmCounts
    runs: ArmCounts
    measured_ms: float
    ci95_ms: list[float | None]
    mde_ms: float | None
    runs_needed: int | None
    verdict: str


class GpuSpanComparison(Struct, omit_defaults=True):
    measured_ms: float
    ci95_ms: list[float | None]
    noise_ms: PerArm
    estimator: EstimatorCheck | None = None  # only where a saving is expected


class TimingComparison(Struct, omit_defaults=True):
    """``comparison.timing``: the replica's interleaved timing of this very pair."""

    measured_ms: float
    ci95_ms: list[float | None]
    noise_ms: dict[str, float | None]
    blocks: int
    replays_per_block: int | None
    timer: str | None
    method: str
    source: str
    median_ms: dict[str, float | None]
    arms: list[str]
    mde_ms: float | None
    estimator: EstimatorCheck | None = None  # only where a saving is expected
    verdict: str | None = None


class GpuBound(Struct):
    """``comparison.gpu_bound``: how much of each arm's step the GPU is busy (median over its
    runs of their median busy / step period), and whether a GPU saving reaches the wall clock."""

    busy_fraction: PerArm
    gpu_bound: bool | None  # None: not known (no GPU busy time in a run)
    message: str


class Comparison(Struct):
    """``comparison`` of ``report --format json`` (README): savings are baseline − candidate."""

    baseline: int
    candidate: int
    scope: str | None
    scope_text: str
    estimate_ms: Estimates
    site_changes: list[SiteChange]
    removed_sites: list[RemovedSite]
    timing: TimingComparison | None
    client: ClientComparison | None
    measured_ms: float | None = None
    ci95_ms: list[float | None] | None = None
    noise_ms: PerArm | None = None
    mde_ms: float | None = None
    steps_needed: int | None = None
    n_steps: ArmCounts | None = None
    method: str | None = None
    verdict: str = ""
    estimator: EstimatorCheck | None = None
    gpu_span: GpuSpanComparison | None = None
    comparable: bool = True
    mismatch: list[str] = []
    measures: list[Measure] = []
    best_measure: MeasureName | None = None
    best_measure_note: str = ""  # why a finer measure was passed over (step periods that measure the profiler)
    lower_bound_runs: list[int] = []  # runs whose copy counts are a floor (GPU work missing under graph launches)
    runs_per_arm: RunsPerArm = msgspec.field(default_factory=RunsPerArm)
    replication: Replication = Replication.NONE  # what separates the arms' measurements
    aa: AaSummary | None = None
    is_aa: bool = False  # both arms are runs of identical code (an A/A report)
    group_changes: list[GroupChange] = []  # every copy group the candidate changed
    gpu_bound: GpuBound | None = None  # busy / period per arm, and what it means for the wall clock
