"""The typed results a report is made of: one structure shared by analysis, cache and renderers.

Why msgspec Structs: the analysis fills them, the result cache writes and reads them as JSON
(decoded straight back into these types, without importing numpy or pandas), and every
renderer reads attributes, not string keys. Field order is the order of the JSON contract
(README), so ``to_builtins`` yields the documented objects.

Values that are not known are None (never NaN): JSON has no NaN, and a cached report must
read back exactly as it was written.

The comparison of an A/B has its own module beside the A/B (analysis/ab/results.py), built on
the base pieces here (``Struct``); nothing here imports it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec

from copyprof.vocabulary import AttributionStatus, CandidateForm, CompletenessStatus, EvidenceKind, Place, Role


class Struct(msgspec.Struct, kw_only=True):
    def to_json(self) -> Any:
        return msgspec.to_builtins(self)


class Layout(Struct):
    name: str
    layers: int
    mla_layers: int | None = None
    kda_layers: int | None = None
    hidden: int = 0
    dtype_bytes: int = 2
    kinds: dict[str, int] = {}


class StepsInfo(Struct):
    decode: int
    excluded: int
    rule: str

    @property
    def word(self) -> str:
        """"decode step" where a serving engine marked the steps (vLLM, SGLang), else "step"
        (a training ProfilerStep, a graph launch or an idle gap says nothing of decoding)."""
        return "decode step" if self.rule.startswith(("annotation (vllm", "annotation (sglang")) else "step"


class PerStep(Struct):
    """Medians over the counted decode steps of one rank. ``post_proj`` / ``post_proj_ms``:
    one key per layout kind plus ``total`` (only ``total`` without a layout)."""

    tokens: int | None
    period_ms: float | None
    gpu_span_ms: float | None
    copies: int
    other: int
    post_proj: dict[str, int]
    post_proj_ms: dict[str, float | None]
    other_ms: float | None
    post_proj_gap_ms: dict[str, float | None] | None = None
    host_copies: int | None = None
    host_copies_by_name: dict[str, int] | None = None
    lower_bound: bool = False  # the trace lost GPU work under graph launches: counts are at least these
    # The GPU's own time (analysis/steps/gpu_time.py): the union of the step's GPU ops, every
    # stream together; the first-to-last span of what its graph launches ran (None: no graph
    # replayed); busy / step period (median of the per-step ratios, 0..1).
    gpu_busy_ms: float | None = None
    gpu_replay_span_ms: float | None = None
    gpu_busy_fraction: float | None = None


class Estimate(Struct):
    patch: str
    scope: str
    removed_per_step: int
    removable_ms: float
    removable_p10_ms: float | None
    removable_p90_ms: float | None
    removable_with_gap_ms: float
    removable_pct: float | None
    period_with_patch_ms: float | None


class Site(Struct):
    """One copy site of a run: ``site`` is the layer kind for post-projection copies placed in
    a layer, else the role; ``role`` is post-projection | placement | allreduce-staging | other
    (``mixed`` when a size group spans roles); ``layer_kind`` the kind of every layer it occurs in."""

    site: str
    bytes: int
    bytes_src: str
    per_step: float
    median_us: float
    ms_per_step: float
    achieved_gbps: float | None
    peak_gbps: float | None
    bound: str | None
    where: str
    neighbour: str
    role: Role = Role.OTHER
    layer_kind: str | None = None
    source: str | None = None  # the issuing Python frame (analysis/sources/frames.py), or None
    stack: list[str] = []  # that frame and its callers, innermost first
    source_note: str = ""  # why there is no source
    shape: str = ""  # the dims and dtypes its CPU op recorded (record_shapes), the commonest; "" if none
    graph_nodes: list[int] = []  # the graph node ids its copies replay (trace field "graph node id"), sorted
    graph_node_stable: bool | None = None  # every counted step replays the same nodes for it (None: no node ids)
    place: Place = Place.NONE  # where structure put it, in words
    evidence: EvidenceKind = EvidenceKind.NONE  # what set the role: structure | structure+stack | stack | size ("" without a layout)
    evidence_agree: bool | None = None  # structure and stack named the same block (None: only one of them)
    structure_said: str = ""  # the role structure gave where the stack overruled it


class Candidate(Struct):
    """One group of copies (or of elementwise copy kernels) and what removing it would save
    (analysis/cost/candidates.py): ``runs[].candidates`` of ``report --format json``."""

    form: CandidateForm
    role: Role
    source: str | None
    stack: list[str]
    layers: list[int]
    kinds: list[str]
    bytes: list[int]
    shape: str
    producer: str  # the kernel that made what is copied (without template arguments)
    per_step: float
    removable_ms: float | None  # kernel time per step (median over steps)
    removable_with_gap_ms: float | None  # plus dispatch gaps in graph replay (= removable_ms eagerly)
    gap_counts: bool  # graph replay: the gap is GPU time a removal frees
    share_pct: float | None  # of the step period
    steps_needed: int | None  # decode steps per arm to see it (within-run noise)
    change: str  # what kind of change removes it
    key: str  # the group's identity across arms


class Attribution(Struct):
    """How copies were attributed: ``status`` ok | partial | not-attributed | no-layout;
    ``method`` structure | size and order | ""."""

    status: AttributionStatus = AttributionStatus.NO_LAYOUT
    message: str = "no model layout given"
    method: str = ""
    steps_attributed: int = 0
    steps: int = 0
    layers_found: int = 0
    kind_kernels: dict[str, int] = {}
    kind_disagreements: list[str] = []
    kind_count_coincidences: int = 0  # kernels launched as often as a kind has layers that are not attention kernels
    anchored: int = 0
    anchors_agree: int = 0
    size_disagree: int = 0


class SourceEntry(Struct):
    """One copy place of an eager capture and the code that issued it (analysis/sources/across_captures.py)."""

    layer: int
    kind: str
    role: str
    ordinal: int
    bytes: int
    source: str
    stack: list[str] = []


class SourceMatch(Struct):
    """How many of a graph run's copies took an eager capture's sources, per step."""

    origin: str
    matched_per_step: float
    copies_per_step: float
    rate: float | None
    key: str


class BySource(Struct):
    """The census of one issuing function across layers (``report --by-source``)."""

    source: str | None
    stack: list[str]
    per_step: float
    ms_per_step: float
    sites: list[str]
    layer_kinds: list[str]
    layers: int
    bytes: list[int]
    note: str = ""


class RankAgreement(Struct):
    agree: bool
    message: str


class TimingSummary(Struct):
    """The replica's interleaved timing of a pair (timing.json): saving per step, baseline − candidate."""

    measured_ms: float
    ci95_ms: list[float | None]
    noise_ms: dict[str, float | None]
    blocks: int
    replays_per_block: int | None
    timer: str | None
    method: str
    source: str
    median_ms: dict[str, float | None]
    arms: list[str] = msgspec.field(default_factory=lambda: ["baseline", "candidate"])  # baseline − arms[1]


class Timeline(Struct):
    """GPU ops of the first counted step (plots): columns of equal length."""

    start_ns: list[int]
    dur_ns: list[int]
    name: list[str]
    site: list[str]


class Setup(Struct):
    """What was measured, as the inputs say (analysis/setup.py); None where they do not."""

    engine: str | None = None
    model: str | None = None
    tp: int | None = None
    world_size: int | None = None
    concurrency: int | None = None
    tokens_per_step: int | None = None
    graph_mode: str | None = None
    device: str | None = None
    dtype_bytes: int | None = None
    vllm_version: str | None = None
    vllm_commit: str | None = None
    torch_version: str | None = None
    cuda_runtime: str | None = None
    hip_runtime: str | None = None
    aiter_version: str | None = None
    profiler: str | None = None
    captured: str | None = None
    command: str | None = None
    arm: str | None = None
    # the `copyprof run` invocation whose boots this run is one of (run.json ab.group): boots of
    # one session ran one after the other on one machine, so an A/B reads its arms within sessions
    ab_group: str | None = None
    copyprof_version: str | None = None
    model_runner: str | None = None  # vLLM's: "v1" (gpu_model_runner.py) or "v2" (Model Runner V2)
    compilation: str | None = None  # vLLM's compilation mode (VLLM_COMPILE, NONE, ...)
    compiled_by: str | None = None  # the torch.compile backend when compiled ("inductor")
    cudagraph_mode: str | None = None  # FULL_AND_PIECEWISE, PIECEWISE, FULL, NONE
    attention_backends: list[str] = []


class Completeness(Struct):
    """Whether the trace holds the GPU work its graph launches ran (analysis/health/completeness.py).

    ``status``: ``complete`` (no launch is short by any check that could run), ``lower-bound``
    (work is missing: copy counts are at least the census's), ``no-graph-launches``."""

    status: CompletenessStatus
    graph_launches: int = 0
    launches_without_gpu_work: int = 0
    launches_short: int = 0
    gpu_ops_per_launch: float | None = None  # median over the launches
    missing_gpu_ops: int = 0  # GPU ops the checks know are missing (a floor)
    steps_flagged: int = 0
    checks: list[str] = []  # what each comparison found, in words
    message: str = ""  # the warning ("" when complete)


class LaunchOverhead(Struct):
    """Graph-launch calls against the GPU's idle time (analysis/health/launch_overhead.py): whether
    step periods measure the launch path (and the profiler's hooks on it) rather than the model."""

    graph_launches: int
    launches_per_step: float | None
    call_median_ms: float | None
    call_p90_ms: float | None
    call_max_ms: float | None
    per_step_ms: float | None  # summed launch-call time of a step (median)
    gpu_idle_in_launch_ms: float | None  # GPU idle time inside the step's launch calls (median)
    share_of_step: float | None  # that idle time / the step period (median; 0..1)
    gpu_busy_share: float | None  # busy time of the GPU / step period (median; 0..1)
    launch_bound: bool = False
    message: str = ""


class GraphNodeMatch(Struct):
    """Copies identified by their graph node across replays (trace field ``graph node id``)."""

    copies_per_step: float
    with_node_per_step: float
    sites: int
    stable_sites: int
    message: str


class RunReport(Struct):
    """One run: the ``runs[i]`` object of ``report --format json`` (README) plus what the
    renderers need besides (metadata, per-step series, the timeline)."""

    path: str
    format: str
    flavour: str
    ranks: list[int]
    layout: Layout | None
    steps: StepsInfo
    per_step: PerStep
    estimate: list[Estimate]
    headline_rank: int
    device: str
    peak_gbps: float | None
    sites: list[Site]
    attribution: Attribution
    notes: list[str]
    rank_agreement: RankAgreement
    by_rank: dict[str, PerStep]
    timing: TimingSummary | None = None
    warnings: list[str] = []
    metadata: dict[str, Any] = {}
    step_series: dict[str, list[float | None]] = {}
    timeline: Timeline | None = None
    timing_in_comparison: bool = False
    by_source: list[BySource] = []
    source_entries: list[SourceEntry] = []
    source_match: SourceMatch | None = None
    setup: Setup = msgspec.field(default_factory=Setup)
    completeness: Completeness | None = None
    launch_overhead: LaunchOverhead | None = None
    graph_nodes: GraphNodeMatch | None = None
    candidates: list[Candidate] = []  # every copy group, largest saving first
    tpot_ms: list[float] = []  # each request's TPOT (client_metrics.json): the A/B needs no second read
    timing_blocks: dict[str, list[float]] = {}  # the replica's timed blocks per arm (timing.json), ms
    timing_arm: str | None = None  # which of them this run is

    @property
    def lower_bound(self) -> bool:
        """The trace lost GPU work under graph launches: every copy count is a floor."""
        return self.completeness is not None and self.completeness.status == CompletenessStatus.LOWER_BOUND


JSON_RUN_KEYS = ("path", "format", "flavour", "ranks", "layout", "steps", "per_step", "estimate", "headline_rank",
                 "device", "peak_gbps", "sites", "attribution", "notes", "rank_agreement", "by_rank", "timing",
                 "warnings", "by_source", "source_match", "setup", "completeness", "launch_overhead", "graph_nodes",
                 "candidates")


def known(x: float | None) -> float | None:
    """A float, or None where it is NaN / infinite (not known)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def encode(obj: Struct | Sequence[Struct]) -> bytes:
    return msgspec.json.encode(obj)


def decode_run(data: bytes | str) -> RunReport:
    return msgspec.json.decode(data, type=RunReport)
