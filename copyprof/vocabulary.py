"""copyprof's vocabulary: every word a result carries as a value, one type each.

Why string enums: a result is written to JSON (the documented contract) and read back by the
result cache, so each value must stay the plain string the contract names ("post-projection",
"lower-bound"); a ``StrEnum`` is that string, and a typo in the code is an ``AttributeError``
instead of a silent mismatch. The module imports only the standard library: the result cache
decodes results without numpy, and every room of the analysis and every renderer reads it.
"""
from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """A copy's role: what removing it takes, and whether a direct-return change removes it."""

    POST = "post-projection"  # the attention block's output copied into a caller's buffer
    PLACEMENT = "placement"  # inside the attention block, before its output projection (a layout change)
    MLP_OUTPUT = "mlp-output"  # the MoE reduction's or the MLP GEMM's output copied on
    STAGING = "allreduce-staging"  # a tensor staged right before an all-reduce
    METADATA = "metadata"  # outside the decoder layers: inputs, positions, sampling state
    OTHER = "other"
    UNPLACED = "unplaced"  # structure could not place it (internal: the census settles it)
    ELEMENTWISE_COPY = "elementwise-copy"  # a copy done by an elementwise kernel (a copy group of its own)
    FUSED_COPY = "fused-copy"  # a copy fused into an Inductor kernel: not removable on its own
    MIXED = "mixed"  # a size group of copies whose roles differ


UNATTRIBUTED_SITE = "post-proj"  # the site of a post-projection copy whose layer is unknown


class Place(StrEnum):
    """Where structure put a copy (the evidence behind its role, in the report's words)."""

    AFTER_PROJECTION = "after the attention block's output projection"
    IN_ATTENTION = "inside the attention block, before its output projection"
    BEFORE_CORE = "in the attention block, before its core"
    AFTER_MOE_REDUCE = "after the MoE reduction"
    AFTER_MLP_GEMM = "after the MLP block's GEMM"
    IN_MLP = "inside the MLP block"
    BEFORE_ALLREDUCE = "right before an all-reduce"
    OUTSIDE = "outside the decoder layers"
    NO_CORE = "no attention core recognised in its layer"
    NO_BOUNDARY = "no norm closes its layer's attention block"
    NO_LAYERS = "the step's layers were not found"
    NONE = ""  # no layout: nothing was placed


class EvidenceKind(StrEnum):
    """What set a copy's role."""

    NONE = ""  # no layout: no role was looked for
    STRUCTURE = "structure"
    STRUCTURE_AND_STACK = "structure+stack"
    STACK = "stack"
    SIZE = "size"


class CandidateForm(StrEnum):
    """How a copy group appears in the trace."""

    COPY = "copy"  # memcpy / copy-engine or rocclr blit
    KERNEL = "kernel"  # an elementwise or fused kernel that copies


class GroupStatus(StrEnum):
    """How a copy group changed between the arms of an A/B."""

    GONE = "gone"
    FEWER = "fewer"
    MORE = "more"
    NEW = "new"
    MOVED = "moved"  # as many per step, in other layers or sizes


class SiteStatus(StrEnum):
    """How a copy site (size and neighbour) changed between the arms."""

    REMOVED = "removed"
    APPEARED = "appeared"
    CHANGED = "changed"


class MeasureName(StrEnum):
    """The measurements an A/B can have, each on its own observations."""

    REPLICA_TIMING = "replica timing"
    GPU_BUSY = "GPU busy"  # the union of the step's GPU ops (analysis/steps/gpu_time.py): GPU time only
    GRAPH_REPLAY_SPAN = "graph-replay span"  # first to last op its graph launches ran, gaps between nodes included
    GPU_SPAN = "GPU span"
    CLIENT_TPOT = "client TPOT"
    STEP_PERIOD = "step period"
    STEP_PERIOD_THIS_PAIR = "step period, this pair"  # two single boots, described, never a verdict


# GPU time alone: what a patch to GPU work changes whatever the host does (GPU span, TPOT and the
# step period carry host time: launches, scheduling, the GPU waiting for the host)
GPU_TIME_MEASURES = frozenset({MeasureName.GPU_BUSY, MeasureName.GRAPH_REPLAY_SPAN})


class VerdictKey(StrEnum):
    """The class of a measure's verdict (analysis/ab/verdict.py has the decision table)."""

    NONE_NONE = "none-none"
    NONE_MEASURED = "none-measured"
    CONSISTENT = "consistent"
    NOT_RESOLVABLE = "not-resolvable"
    LARGER = "larger"
    SMALLER = "smaller"
    OPPOSITE = "opposite"
    UNMEASURED = "unmeasured"  # one run per arm and no A/A: the between-run variation is unknown
    DESCRIPTIVE = "descriptive"  # how two boots differ, the patch and boot-to-boot variation together


class Replication(StrEnum):
    """What separates the measurements of the two arms of an A/B."""

    BOOTS = "boots"  # separate server boots: runs are the unit
    ONE_PROCESS = "one-process"  # both arms in one process (the replica's interleaved timing)
    UNKNOWN = "unknown"
    NONE = ""  # not an A/B


class CompletenessStatus(StrEnum):
    """Whether a trace holds the GPU work its graph launches ran."""

    COMPLETE = "complete"
    LOWER_BOUND = "lower-bound"  # work under graph launches is missing: every count is a floor
    NO_GRAPH_LAUNCHES = "no-graph-launches"
    NO_GPU_WORK = "no-gpu-work"


class AttributionStatus(StrEnum):
    """How far a run's copies could be attributed to the model's layers."""

    OK = "ok"
    PARTIAL = "partial"
    NO_LAYOUT = "no-layout"
    NOT_ATTRIBUTED = "not-attributed"
