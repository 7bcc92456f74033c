"""What a run was: the versions and ids its traces and run.json carry, and whether two runs compare.

Why: a PR attachment must say what was measured (engine, TP, tokens per step, graph mode,
GPU, CUDA/HIP runtime, vLLM, torch, aiter, capture date, command), and an A/B of arms that
differ in more than the patch (C16 vs C24, another GPU, graphs vs eager) must not get a
confident verdict. Everything here is read from the inputs; nothing is assumed.
"""
from __future__ import annotations

from typing import Any

from copyprof.analysis.results import Setup
from copyprof.errors import CopyprofError
from copyprof.rundir.record import AbTag, Model, RunRecord, Server, Torch, Vllm, given, record_from_json


def _run_record(metadata: dict[str, Any]) -> RunRecord:
    """The run record ``analyze_run`` keeps in ``metadata["run"]`` (as JSON, so a cached report
    holds it too); an empty record for traces without a run.json."""
    if "run" not in metadata:
        return RunRecord()
    try:
        return record_from_json(metadata["run"])
    except CopyprofError:
        return RunRecord()


def _first(*values: Any) -> Any:
    return next((v for v in values if v not in (None, "", [], {})), None)


def _hip_version(code: Any) -> str | None:
    """Kineto's hip_runtime_version integer as major.minor.patch (major*10^7 + minor*10^5 +
    patch, as HIP_VERSION is built; trace-formats.md §1.6 marks the decoding unverified)."""
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    if not isinstance(code, int) or code <= 0:
        return None
    return f"{code // 10_000_000}.{code // 100_000 % 100}.{code % 100_000}"


def _cuda_version(code: Any) -> str | None:
    """Kineto's cuda_runtime_version (1000*major + 10*minor) as major.minor."""
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    if not isinstance(code, int) or code <= 0:
        return None
    return f"{code // 1000}.{code % 1000 // 10}"


def run_setup(metadata: dict[str, Any], *, device: str, tokens: int | None, graph_launches: int,
              layout_name: str | None, dtype_bytes: int | None) -> Setup:
    """The run's setup from its trace metadata and run.json (``metadata`` as analyze_run keeps it)."""
    rec = _run_record(metadata)
    vllm = given(rec.vllm) or Vllm()
    torch = given(rec.torch) or Torch()  # the replica's flat torch_version/cuda_version land here too
    model = given(rec.model) or Model()
    server = given(rec.server) or Server()
    command = given(rec.command)
    dist: dict[str, Any] = metadata["distributedInfo"] if isinstance(metadata.get("distributedInfo"), dict) else {}
    eager = "--enforce-eager" in server.argv
    graph_mode = _first(given(rec.graph_mode), "eager" if eager else None, "graph" if graph_launches else "eager")
    graph_mode = "graph" if "graph" in str(graph_mode) else str(graph_mode)
    engine = _first(given(rec.engine), "vllm" if _first(metadata.get("vllm_version"), vllm.version) else None)
    return Setup(
        engine=engine,
        model=_first(layout_name, given(model.name)),
        # A serving engine's world is its tensor-parallel group (one process per TP rank here);
        # a training job's (DDP, FSDP) is not TP at all: it stays a world size.
        tp=_first(given(rec.tp), dist.get("world_size") if engine in ("vllm", "sglang") else None),
        world_size=_first(dist.get("world_size"), given(rec.tp)),
        concurrency=given(rec.concurrency),
        tokens_per_step=tokens,
        graph_mode=graph_mode,
        device=device,
        dtype_bytes=dtype_bytes,
        vllm_version=_first(vllm.version, metadata.get("vllm_version")),
        vllm_commit=vllm.commit,
        torch_version=_first(torch.version),
        cuda_runtime=_first(_cuda_version(metadata.get("cuda_runtime_version")), torch.cuda),
        hip_runtime=_first(_hip_version(metadata.get("hip_runtime_version")), torch.hip),
        aiter_version=given(rec.aiter_version),
        profiler=_first(metadata.get("rocprofiler-sdk_version") and f"rocprofiler-sdk {metadata['rocprofiler-sdk_version']}",
                        metadata.get("roctracer_version") and f"roctracer {metadata['roctracer_version']}",
                        metadata.get("cupti_version") and f"CUPTI {metadata['cupti_version']}"),
        captured=_first(given(rec.started), given(rec.finished)),
        command=" ".join(command) if command is not None else None,
        arm=_first(given(rec.arm), given(rec.label)),
        ab_group=_first((given(rec.ab) or AbTag()).group),
        copyprof_version=given(rec.copyprof_version),
        **_engine(metadata, rec),
    )


def _engine(metadata: dict[str, Any], rec: RunRecord) -> dict[str, Any]:
    """What vLLM chose (model runner, compilation, CUDA graphs): run.json's ``vllm_engine``, read
    from the server log by `copyprof run`, else the log itself (a run.json that does not hold them)."""
    facts = given(rec.vllm_engine) or metadata.get("vllm_engine")
    if not isinstance(facts, dict):
        return {}
    backends = facts.get("attention_backends")
    return {"model_runner": facts.get("model_runner"), "compilation": facts.get("compilation_mode"),
            "compiled_by": facts.get("compiled_by"), "cudagraph_mode": facts.get("cudagraph_mode"),
            "attention_backends": [str(b) for b in backends] if isinstance(backends, list) else []}


# (field, words): what two arms must share for an A/B to measure the patch alone.
COMPARED = (("tokens_per_step", "tokens per step"), ("model", "model layout"), ("tp", "tensor parallelism"),
            ("device", "device"), ("dtype_bytes", "dtype bytes"), ("graph_mode", "graph mode"), ("engine", "engine"))


def mismatches(base: Setup, cand: Setup) -> list[str]:
    """What differs between two arms besides the patch (only fields both arms state)."""
    out = []
    for field, words in COMPARED:
        a, b = getattr(base, field), getattr(cand, field)
        if a is not None and b is not None and a != b:
            out.append(f"{words}: {a} vs {b}")
    return out
