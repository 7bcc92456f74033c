"""The run record: ``run.json`` as one typed structure, written by every capture and read by one loader.

Why a type: three capture paths write run.json (``copyprof run`` against vLLM, the replica
engine, the copy micro-capture) and five places read it (the report's metadata and setup, A/B
grouping, the default ``--model``, the message for a directory holding no trace). Without one
schema each reader guarded every key with ``isinstance`` and each writer could drift its own
way. Here every field any writer writes is declared once, with its type.

Shapes. The record is one structure for all engines, and a field an engine does not write is
*absent* (``UNSET``: not in the JSON at all), never ``null`` -- run.json's keys are a documented
contract, and a key a writer sets to ``null`` (``finished`` until the run ends, ``ab`` outside an
A/B, ``pair`` of a lone arm) must stay, while a key it never writes must not appear. That is why
fields default to ``UNSET`` rather than relying on ``omit_defaults``: ``omit_defaults`` would
drop those meaningful nulls. Readers take a field with :func:`given` (the value, or None where
the record lacks it). The nested parts a writer always writes whole (versions, GPU, workload,
A/B tag, server command) have ordinary defaults, so an older file missing one of their keys
still reads.

Both shapes in the field are read: the replica engine and the copy capture recorded torch as flat
``torch_version`` / ``cuda_version`` keys where ``copyprof run`` writes ``torch: {version, hip,
cuda}``; the loader fills ``torch`` from the flat keys when the file has no ``torch`` (the flat
keys stay too, since the replica still writes them). Unknown keys (a newer copyprof's) are
ignored. A file that is not JSON, not an object, or has a field of the wrong type is a one-line
:class:`~copyprof.errors.CopyprofError` naming the file (and the field).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, TypeVar, Union

import msgspec
from msgspec import UNSET, UnsetType

from copyprof.errors import CopyprofError

RUN_JSON = "run.json"
CLIENT_STALL_NOTE_S = 2.0  # a gap this long in the client's polling (every 50 ms) is worth a warning

T = TypeVar("T")
# A field some records do not have: absent from their JSON (UNSET), which is not the same as null.
Maybe = Union[T, UnsetType]


def given(value: Maybe[T]) -> T | None:
    """The field's value, or None where the record does not have the field."""
    return None if isinstance(value, UnsetType) else value


class _Part(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """A nested part of the record (unknown keys tolerated, like the record's own)."""


class Torch(_Part):
    """The torch that ran the capture (the vLLM environment's, or copyprof's own for the replica)."""

    version: str | None = None
    hip: str | None = None
    cuda: str | None = None


class Vllm(_Part):
    version: str | None = None
    commit: str | None = None
    distribution: str | None = None
    python_version: str | None = None


class Gpu(_Part):
    """The first GPU the vLLM environment sees, and how many there are."""

    name: str | None = None
    arch: str | None = None
    count: int = 0


class Device(_Part):
    """The device the replica ran on (``capture/replica/device.py``); CUDA and CPU say different things."""

    type: Maybe[str] = UNSET
    name: Maybe[str | None] = UNSET
    capability: Maybe[list[int] | None] = UNSET
    multiprocessors: Maybe[int] = UNSET
    total_memory_bytes: Maybe[int] = UNSET
    cpu_count: Maybe[int | None] = UNSET


class Model(_Part):
    """What was served or replicated. The fields typed ``Any`` are copied verbatim from the model's
    config.json (``capture/vllm/plan.py``), whatever type a given model's config gives them
    (some configs hold a list per layer where most hold one number)."""

    arg: Maybe[str] = UNSET  # what vLLM got as --model
    name: Maybe[str] = UNSET
    kind: Maybe[str] = UNSET  # "preset" | "directory" | "id"
    hf_id: Maybe[str | None] = UNSET
    model_type: Maybe[Any] = UNSET
    architectures: Maybe[Any] = UNSET
    num_hidden_layers: Maybe[Any] = UNSET
    hidden_size: Maybe[Any] = UNSET
    num_attention_heads: Maybe[Any] = UNSET
    num_key_value_heads: Maybe[Any] = UNSET
    intermediate_size: Maybe[Any] = UNSET
    vocab_size: Maybe[Any] = UNSET
    max_position_embeddings: Maybe[Any] = UNSET
    torch_dtype: Maybe[Any] = UNSET
    layers: Maybe[int] = UNSET  # the replica's layout
    hidden: Maybe[int] = UNSET
    kinds: Maybe[dict[str, int]] = UNSET
    layer_kinds: Maybe[str] = UNSET
    source: Maybe[str] = UNSET  # "preset", or the config.json the layout came from
    mla_layers: Maybe[int] = UNSET
    kda_layers: Maybe[int] = UNSET
    config: Maybe[str] = UNSET  # the copy of config.json in the run directory


class Workload(_Part):
    max_tokens: int = 0
    min_tokens: int = 0
    ignore_eos: bool = True
    max_model_len: int | None = None
    seed: int = 0
    warmup_requests: int = 0
    prompt: str = ""


class AbTag(_Part):
    """Which A/B a run belongs to: ``group`` id, ``arm`` label, repeat index and place in the order."""

    group: str = ""
    arm: str = ""
    repeat: int = 0
    position: int = 0
    runs: int = 1
    arms: dict[str, str] = {}  # label -> that arm's Python
    order: list[str] = []
    interleaved: bool = False


class Server(_Part):
    """The vLLM server command copyprof started."""

    argv: list[str] = []
    env_added: dict[str, str] = {}
    port: int = 0
    profiler_style: str = ""
    vllm_profiler: str = ""
    window_control: str = ""
    profiler_config: dict[str, Any] | None = None
    notes: list[str] = []
    log: str = ""


class CohortRetry(_Part):
    """A cohort sent again because one request ran ahead before the last got its first token."""

    attempt: int = 0
    tokens_per_request: list[int] = []
    request_ahead: int = 0


class Window(_Part):
    """The profile window; a run that failed earlier has only the cohort's attempts."""

    control: Maybe[str] = UNSET
    tokens_at_first_token_barrier: Maybe[list[int]] = UNSET
    tokens_at_start_profile: Maybe[list[int]] = UNSET
    tokens_at_stop_profile: Maybe[list[int]] = UNSET
    stop_profile_http: Maybe[int] = UNSET
    window_s: Maybe[float] = UNSET
    cohort_intact_through_window: Maybe[bool] = UNSET
    cohort_retries: list[CohortRetry] = []
    client_longest_stall_s: Maybe[float] = UNSET  # over the whole capture
    client_longest_stall_in_window_s: Maybe[float] = UNSET
    end_judged_by: Maybe[str] = UNSET  # "server tokens" (its /metrics counter) | "client tokens" [(why)]
    server_tokens_at_start_profile: Maybe[int | None] = UNSET  # None: the server gave no count
    server_tokens_at_window_end: Maybe[int | None] = UNSET

    def stall_warnings(self) -> list[str]:
        """What a client that went unscheduled costs this run: the window's steps, where only the
        client's count judged its end, and the client's TPOT per request, always."""
        out = []
        inside = given(self.client_longest_stall_in_window_s)
        judged = given(self.end_judged_by)
        if inside is not None and inside >= CLIENT_STALL_NOTE_S and judged and judged.startswith("client"):
            out.append(f"copyprof's client did not run for {inside:.1f} s in the profile window and the server's "
                       "token count did not judge its end: tokens decoded before the window, read late, counted "
                       "as the window's, so it may hold fewer decode steps than asked")
        whole = given(self.client_longest_stall_s)
        if whole is not None and whole >= CLIENT_STALL_NOTE_S:
            out.append(f"copyprof's client did not run for {whole:.1f} s during the capture: the TPOT per request "
                       "of this run times a client short of CPU, not the server")
        return out


class ReplicaProfiler(_Part):
    """The replica's torch.profiler settings (``copyprof run`` records the profiler's name instead)."""

    activities: list[str] = []
    with_stack: bool = False
    record_shapes: bool = False


class RunRecord(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """run.json. ``status`` goes ``starting`` -> ``capturing`` -> ``complete`` or ``failed: <why>``."""

    # every engine
    copyprof_version: Maybe[str] = UNSET
    engine: Maybe[str] = UNSET  # "vllm" | "replica" | "replica-copies"
    status: Maybe[str] = UNSET
    label: Maybe[str] = UNSET
    command: Maybe[list[str]] = UNSET
    model: Maybe[Model] = UNSET
    tp: Maybe[int] = UNSET
    rank: Maybe[int] = UNSET
    concurrency: Maybe[int] = UNSET
    prefix_len: Maybe[int] = UNSET
    suffix_len: Maybe[int] = UNSET
    steps: Maybe[int] = UNSET
    profiler: Maybe[str | ReplicaProfiler] = UNSET  # vLLM: torch | rocprofv3 | nsys
    dummy: Maybe[bool] = UNSET
    workload: Maybe[Workload] = UNSET
    spec: Maybe[dict[str, Any]] = UNSET  # the RunSpec as given
    graph_mode: Maybe[str] = UNSET
    device: Maybe[Device] = UNSET
    torch_version: Maybe[str | None] = UNSET  # the replica's flat torch fields (see ``torch``)
    cuda_version: Maybe[str | None] = UNSET
    host: Maybe[str] = UNSET
    platform: Maybe[str] = UNSET
    python: Maybe[str] = UNSET  # vLLM: the interpreter path; replica: the Python version
    env: Maybe[dict[str, str]] = UNSET
    ab: Maybe[AbTag | None] = UNSET
    started: Maybe[str | None] = UNSET
    finished: Maybe[str | None] = UNSET
    files: Maybe[list[str]] = UNSET
    # the replica and the copy capture
    annotation: Maybe[str] = UNSET
    rank_shapes: Maybe[dict[str, Any]] = UNSET
    seed: Maybe[int] = UNSET
    expected_copies_per_step: Maybe[dict[str, Any]] = UNSET
    dtype: Maybe[str] = UNSET
    sizes_bytes_in_order: Maybe[list[int]] = UNSET
    variants: Maybe[list[str]] = UNSET
    replays_per_variant: Maybe[int] = UNSET
    # versions
    vllm: Maybe[Vllm] = UNSET
    torch: Maybe[Torch] = UNSET
    aiter_version: Maybe[str | None] = UNSET
    gpu: Maybe[Gpu | None] = UNSET
    probe: Maybe[dict[str, Any]] = UNSET
    notes: Maybe[list[str]] = UNSET
    profiler_backend: Maybe[dict[str, Any] | None] = UNSET
    note: Maybe[str] = UNSET
    # the replica's arms
    arm: Maybe[str] = UNSET
    removed_kinds: Maybe[list[str]] = UNSET
    pair: Maybe[str | None] = UNSET
    arms: Maybe[dict[str, str]] = UNSET  # arm -> its run directory's name
    # the vLLM server and the window
    server: Maybe[Server] = UNSET
    server_pid: Maybe[int] = UNSET
    server_pgid: Maybe[int] = UNSET
    boot_s: Maybe[float] = UNSET
    window: Maybe[Window] = UNSET
    # how it ended
    failed_stage: Maybe[str] = UNSET
    server_stop: Maybe[str] = UNSET
    server_exit_code: Maybe[int | None] = UNSET
    error_log_tail: Maybe[list[str]] = UNSET
    stop_log_tail: Maybe[list[str]] = UNSET
    usable: Maybe[dict[str, Any]] = UNSET
    cleanup_problems: Maybe[list[str]] = UNSET
    rank_traces: Maybe[list[str]] = UNSET
    replica_bytes: Maybe[int] = UNSET
    completeness: Maybe[dict[str, Any]] = UNSET
    vllm_engine: Maybe[dict[str, Any] | None] = UNSET


_AT = re.compile(r"^(?P<what>.*) - at `\$(?P<where>.*)`$")


def record_from_json(data: Any, path: str | Path = RUN_JSON) -> RunRecord:
    """The record of run.json's decoded content, either shape (``path`` names the file in errors)."""
    if not isinstance(data, dict):
        raise CopyprofError("run.json does not hold a JSON object", path=str(path))
    if "torch" not in data and ("torch_version" in data or "cuda_version" in data):
        data = {**data, "torch": {"version": data.get("torch_version"), "hip": None, "cuda": data.get("cuda_version")}}
    try:
        return msgspec.convert(data, RunRecord)
    except msgspec.ValidationError as exc:
        text = " ".join(str(exc).split())
        m = _AT.match(text)
        field = m.group("where").lstrip(".") if m else ""
        what = m.group("what") if m else text
        raise CopyprofError(f"run.json field `{field}` has the wrong type: {what}" if field else
                            f"run.json: {what}", path=str(path)) from exc


def load_run_record(run_dir: str | Path) -> RunRecord:
    """``run_dir/run.json`` as a record; a one-line CopyprofError naming the file when it is
    missing, unreadable, not JSON, not an object, or has a field of the wrong type."""
    path = Path(run_dir) / RUN_JSON
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise CopyprofError("no run.json here", path=str(path)) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise CopyprofError(f"cannot read run.json: {getattr(exc, 'strerror', None) or exc}", path=str(path)) from exc
    try:
        data = json.loads(text)  # the json module, as the writer: it takes what json.dump wrote (NaN included)
    except ValueError as exc:
        raise CopyprofError(f"run.json is not valid JSON: {exc}", path=str(path)) from exc
    return record_from_json(data, path)


def record_json(record: RunRecord) -> dict[str, Any]:
    """The record as run.json holds it (plain JSON types; absent fields left out)."""
    out: dict[str, Any] = msgspec.to_builtins(record, enc_hook=str)
    return out
