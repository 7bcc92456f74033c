"""The corpus's capture plan on one H200: which `copyprof run` commands, in which phase.

Run on the device machine from the repository root, after `stage.sh` (see corpus/README.md):

    python3 corpus/capture/jobs.py structure   # every shape and mode at once, in the background
    python3 corpus/capture/jobs.py timing      # then, alone on the GPU, an ABBA pair of one shape

Phase "structure" runs many captures concurrently on one GPU: their copies, kernels and stacks
are what the corpus is for, and those do not depend on what else the GPU runs; their timings
do, so they are never used as timing evidence (each run's `corpus.json` says so). Phase
"timing" runs alone: two boots of each arm in ABBA order, the repeats of one arm forming the
corpus's A/A pair. Only the standard library: the device has no copyprof dependencies beyond
what vLLM brought.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("CORPUS_OUT", "/root/runs"))
MODELS = os.environ.get("CORPUS_MODELS", "corpus/models")  # the setup copies them out of the synced tree
BASE = "/opt/vpy"            # stock vLLM 0.26.0 (stage.sh)
DIRECT = "/opt/vpy-direct"   # the same install with corpus/patches/direct-return-kimi-olmo.diff applied
MAMBA = "/opt/vpy-mamba"     # with corpus/patches/direct-return-jamba-mamba.diff (Jamba's mamba mixer returns)
MOE = "/opt/vpy-moe"         # with corpus/patches/moe-output-alias.diff (the experts' reduction writes the output)
# KV cache sized by hand, so that concurrent servers do not profile each other's memory
# (vLLM's profiling counts every process's allocations on the device as its own).
MEMORY = ["--gpu-memory-utilization", "0.06", "--kv-cache-memory-bytes", str(3 << 30)]
COMMON = ["--dummy", "--prefix-len", "2048", "--suffix-len", "64", "--out", str(OUT), "--tp", "1"]

# (model folder, cohort N, has a direct-return candidate in vLLM 0.26.0)
SHAPES = [
    ("kimi-linear-12l", 16, True),   # KDA + MLA + MoE (kimi_linear.py, kimi_gdn_linear_attn.py)
    ("olmo-hybrid-8l", 16, True),    # gated delta-net + full attention, dense MLP (olmo_gdn_linear_attn.py)
    ("deepseek-v3-6l", 8, False),    # MLA + MoE, dense first layer (deepseek_v2.py returns directly)
    ("jamba-8l", 12, False),         # mamba-1 + attention + MoE (mamba_mixer.py copies; no patch here)
    ("qwen3-8l", 24, False),         # dense decoder, GQA (qwen3.py returns directly)
]


def structure_jobs() -> list[tuple[str, list[str]]]:
    jobs = []
    for name, n, patched in SHAPES:
        arms = [("baseline", BASE)] + ([("direct", DIRECT)] if patched else [])
        for mode, extra in (("graph", ["--steps", "24"]), ("eager", ["--steps", "10", "--enforce-eager"])):
            for arm, py in arms:
                label = f"{name}-c{n}-{mode}-{arm}"
                jobs.append((label, ["-m", "copyprof", "run", "--model", f"{MODELS}/{name}",
                                     "--concurrency", str(n), "--python", py, "--label", label,
                                     *COMMON, *extra, "--", *MEMORY]))
    return jobs


def timing_jobs() -> list[tuple[str, list[str]]]:
    name, n = "olmo-hybrid-8l", 16
    return [(f"{name}-c{n}-graph-abba", ["-m", "copyprof", "run", "--model", f"{MODELS}/{name}",
                                          "--concurrency", str(n), "--steps", "24",
                                          "--python", BASE, "--label", f"{name}-c{n}-graph-abba-baseline",
                                          "--python-b", DIRECT, "--label-b", f"{name}-c{n}-graph-abba-direct",
                                          "--repeat", "2", "--interleave", *COMMON, "--", *MEMORY]),
            # an A/A of the dense shape: the same code booted twice, one after the other
            ("qwen3-8l-c24-graph-aa", ["-m", "copyprof", "run", "--model", f"{MODELS}/qwen3-8l", "--concurrency", "24",
                                       "--steps", "24", "--python", BASE, "--label", "qwen3-8l-c24-graph-aa",
                                       "--repeat", "2", *COMMON, "--", *MEMORY])]


def extra_jobs() -> list[tuple[str, list[str]]]:
    """Other cohort sizes of two shapes (copy sizes and graph sizes change with N), run concurrently."""
    jobs = []
    for name, n, modes, arms in (("kimi-linear-12l", 8, ("graph", "eager"), (("baseline", BASE),)),
                                 ("deepseek-v3-6l", 32, ("graph",), (("baseline", BASE),)),
                                 ("olmo-hybrid-8l", 4, ("eager",), (("baseline", BASE), ("direct", DIRECT)))):
        for mode in modes:
            extra = ["--steps", "24"] if mode == "graph" else ["--steps", "10", "--enforce-eager"]
            for arm, py in arms:
                label = f"{name}-c{n}-{mode}-{arm}"
                jobs.append((label, ["-m", "copyprof", "run", "--model", f"{MODELS}/{name}", "--concurrency", str(n),
                                     "--python", py, "--label", label, *COMMON, *extra, "--", *MEMORY]))
    return jobs


def gpu_ab_jobs() -> list[tuple[str, list[str]]]:
    """Alone on the GPU, one after the other: the A/Bs whose saving is read on the GPU's own time.

    Jamba in graph mode with three arms in rotating order over three rounds (ABC CBA ABC): the
    stock vLLM, its mamba mixer returning its projection, and the fused-MoE reduction writing the
    layer's output buffer — both copies survive graph capture (the mixer is an opaque custom op,
    the MoE write-back happens inside the fused-MoE op). Then the mamba patch in eager mode, ABBA
    over three rounds. N = 16 is a CUDA-graph capture size, so a decode batch is not padded and
    the patched mixer returns its projection as it is.
    """
    name, n = "jamba-8l", 16
    graph = f"{name}-c{n}-graph-abc"
    eager = f"{name}-c{n}-eager-ab"
    return [(graph, ["-m", "copyprof", "run", "--model", f"{MODELS}/{name}", "--concurrency", str(n), "--steps", "24",
                     "--python", BASE, "--label", f"{graph}-baseline", "--python-b", MAMBA, "--label-b",
                     f"{graph}-mamba-direct", "--extra-arm", f"{graph}-moe-alias={MOE}", "--repeat", "3",
                     "--interleave", *COMMON, "--", *MEMORY]),
            (eager, ["-m", "copyprof", "run", "--model", f"{MODELS}/{name}", "--concurrency", str(n), "--steps", "10",
                     "--enforce-eager", "--python", BASE, "--label", f"{eager}-baseline", "--python-b", MAMBA,
                     "--label-b", f"{eager}-mamba-direct", "--repeat", "3", "--interleave", *COMMON, "--", *MEMORY])]


def olmo_round_jobs() -> list[tuple[str, list[str]]]:
    """One more round of the OLMo-hybrid graph A/B (candidate first, then stock), on the timing
    phase's settings: with the ABBA group's four boots it makes three boots per arm."""
    name, n = "olmo-hybrid-8l", 16
    label = f"{name}-c{n}-graph-round3"
    return [(label, ["-m", "copyprof", "run", "--model", f"{MODELS}/{name}", "--concurrency", str(n), "--steps", "24",
                     "--python", DIRECT, "--label", f"{label}-direct", "--python-b", BASE, "--label-b",
                     f"{label}-baseline", "--repeat", "1", "--interleave", *COMMON, "--", *MEMORY])]


def single_mixer_jobs() -> list[tuple[str, list[str]]]:
    """A Nemotron-H shape (one mixer per layer: mamba2, attention, MLP, MoE), graph and eager, at once."""
    name, n = "nemotron-h-10l", 16
    return [(f"{name}-c{n}-{mode}-baseline", ["-m", "copyprof", "run", "--model", f"{MODELS}/{name}",
                                               "--concurrency", str(n), "--python", BASE, "--label",
                                               f"{name}-c{n}-{mode}-baseline", *COMMON, *extra, "--", *MEMORY])
            for mode, extra in (("graph", ["--steps", "24"]), ("eager", ["--steps", "10", "--enforce-eager"]))]


def run(jobs: list[tuple[str, list[str]]], parallel: int, phase: str, stagger_s: float, limit_s: float) -> None:
    log = OUT / f"pool-{phase}.jsonl"
    OUT.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="4", PYTHONUNBUFFERED="1")
    pending, running = list(jobs), {}
    def note(**kw):
        with log.open("a") as fh:
            fh.write(json.dumps({"t": round(time.time(), 1), **kw}) + "\n")
    note(event="phase", phase=phase, jobs=[j[0] for j in jobs], parallel=parallel)
    while pending or running:
        while pending and len(running) < parallel:
            label, args = pending.pop(0)
            fh = open(OUT / f"{label}.console.log", "w")
            p = subprocess.Popen([BASE, *args], stdout=fh, stderr=subprocess.STDOUT, env=env)
            running[label] = (p, time.time(), fh)
            note(event="start", label=label, argv=args)
            time.sleep(stagger_s)
        for label, (p, t0, fh) in list(running.items()):
            if p.poll() is not None:
                fh.close()
                del running[label]
                note(event="end", label=label, rc=p.returncode, wall_s=round(time.time() - t0, 1))
            elif time.time() - t0 > limit_s:
                p.send_signal(signal.SIGINT)  # copyprof stops the server group and keeps what was written
                note(event="interrupt", label=label)
                running[label] = (p, t0 + 120, fh)
        time.sleep(2)
    note(event="phase-end", phase=phase)


if __name__ == "__main__":
    phase = sys.argv[1]
    if phase == "structure":
        run(structure_jobs(), parallel=int(os.environ.get("CORPUS_PARALLEL", "18")), phase=phase,
            stagger_s=4, limit_s=900)
    elif phase == "timing":
        run(timing_jobs(), parallel=1, phase=phase, stagger_s=0, limit_s=1200)
    elif phase == "extra":
        run(extra_jobs(), parallel=8, phase=phase, stagger_s=3, limit_s=600)
    elif phase == "gpu-ab":
        run(gpu_ab_jobs(), parallel=1, phase=phase, stagger_s=0, limit_s=1500)
        run(single_mixer_jobs(), parallel=2, phase="single-mixer", stagger_s=3, limit_s=600)
    elif phase == "eager-ab":  # the eager half of gpu_ab_jobs alone (its first capture lost its machine)
        run(gpu_ab_jobs()[1:], parallel=1, phase=phase, stagger_s=0, limit_s=1500)
    elif phase == "olmo-round3":  # a third boot per arm of the OLMo graph A/B, alone on the GPU
        run(olmo_round_jobs(), parallel=1, phase=phase, stagger_s=0, limit_s=900)
    elif phase == "single-mixer":
        run(single_mixer_jobs(), parallel=2, phase=phase, stagger_s=3, limit_s=600)
    elif phase == "list":
        for label, args in structure_jobs() + timing_jobs() + extra_jobs() + gpu_ab_jobs() + olmo_round_jobs() + single_mixer_jobs():
            print(label, " ".join(args))
    else:
        raise SystemExit(f"unknown phase {phase!r}: structure, timing, extra, gpu-ab, eager-ab, olmo-round3, single-mixer or list")
