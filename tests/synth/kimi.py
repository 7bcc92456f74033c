"""Generated Kimi-K3 decode traces with known ground truth (the generator knows every copy it wrote).

Modelled on the published TP8 MI355X fixed-cohort profile (vLLM PR #50847 review, #50654):
full HIP-graph replay, one `__amd_rocclr_copyBuffer` post-projection copy per layer
(69 KDA + 24 MLA, [N, 7168] bf16), a KDA recurrent-output placement copy ([N, 12*128] bf16)
in every KDA layer, an eager prefill step with same-size all-reduce staging copies, and
sampler kernels between steps. Per-layer kernel order follows vllm-and-kimi.md §4.3:
_attn_res → attention → o_proj GEMM → all-reduce → copy → _attn_res → MoE → all-reduce.

Published figures the durations are set from: 0.495 ms/step of post-projection copies at
C16 and 0.563 ms at C24; the MLA share ~0.13 ms = 0.39 % of a 32.82 ms step (C16) and
~0.15 ms = 0.40 % of 35.98 ms (C24). Per-copy means below reproduce those to the printed
precision; the generator adds ±2 % noise per copy and ±0.1 % per step period.

Formats: rocprofiler-sdk-flavoured Kineto JSON (graph-replayed blit kernels carry neither
bytes nor grid, vllm-and-kimi.md §5.2) and a rocprofv3 CSV directory without markers or API
rows (grid in work-items; sizes only through the blit grid formula).
"""
from __future__ import annotations

import csv
import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.synth.published import K3_KINDS

K3_HIDDEN = 7168  # hidden_size of the published config (vllm-and-kimi.md §2.4)

COPY = "__amd_rocclr_copyBuffer.kd"
ATTN_RES = "_attn_res_kernel"
ALLREDUCE = "_ZN5aiter26cross_device_reduce_1stageI14__hip_bfloat16Li8EEEvP8RankDataPKvS4_PT_i"
GEMM_MLA = "Cijk_Alik_Bljk_BBS_BH_MT64x16x128_MI16x16x1_SN_1LDSB1_GRVW8"
GEMM_KDA = "Cijk_Alik_Bljk_BBS_BH_MT32x16x256_MI16x16x1_SN_1LDSB1_GRVW4"
MLA_ANCHOR = "_ZN5aiter36mla_a8w8_qh16_qseqlen1_gqaratio16_psE"
KDA_ANCHOR = "fused_kda_decode_kernel"
SAMPLER = ("softmax_warp_forward", "argmax_kernel", "index_select_kernel")


@dataclass(frozen=True)
class Profile:
    tokens: int
    period_ms: float
    mla_copy_us: float
    kda_copy_us: float


# Chosen so that 24 MLA copies sum to the published MLA share and all 93 to the total.
C16 = Profile(tokens=16, period_ms=32.82, mla_copy_us=5.33, kda_copy_us=(495.0 - 24 * 5.33) / 69)
C24 = Profile(tokens=24, period_ms=35.98, mla_copy_us=6.06, kda_copy_us=(563.0 - 24 * 6.06) / 69)


def blit_grid(nbytes: int, cus: int = 256) -> int:
    """ROCclr aligned copyBuffer grid in work-items (vllm-and-kimi.md §5.2)."""
    items = min(cus * 512, -(-nbytes // 16))
    return -(-items // 512) * 512


def decode_step_kernels(p: Profile, rng: np.random.Generator, removed: tuple[str, ...] = ()) -> list[tuple[str, float, int]]:
    """(name, duration µs, bytes or -1) for one decode step's graph, in order.

    ``removed``: layer kinds whose post-projection copy the direct-return patch removed."""
    post_bytes = p.tokens * K3_HIDDEN * 2
    placement_bytes = p.tokens * 12 * 128 * 2
    out: list[tuple[str, float, int]] = []
    for kind in K3_KINDS:  # the published layer kinds, not copyprof's preset (the thing under test)
        out.append((ATTN_RES, 2.0, -1))
        if kind == "mla":
            out += [(MLA_ANCHOR, 22.0, -1), ("kn_mla_reduce_v1_ps", 4.0, -1), (GEMM_MLA, 14.0, -1)]
            copy_us = p.mla_copy_us
        else:
            out += [(KDA_ANCHOR, 18.0, -1), (COPY, 5.6, placement_bytes), (GEMM_KDA, 12.0, -1)]
            copy_us = p.kda_copy_us
        noisy_us = copy_us * rng.uniform(0.98, 1.02)
        out.append((ALLREDUCE, 8.0, -1))
        if kind not in removed:
            out.append((COPY, noisy_us, post_bytes))
        out.append((ATTN_RES, 2.0, -1))
        out += [("MoeSortingKernel", 6.0, -1), ("fused_moe_mxfp4_kernel", 180.0, -1), (ALLREDUCE, 8.0, -1)]
    return out


def prefill_step_kernels(tokens: int) -> list[tuple[str, float, int]]:
    """An eager prefill step: staging copy before every all-reduce, same size as the post copy."""
    size = tokens * K3_HIDDEN * 2
    out: list[tuple[str, float, int]] = []
    for kind in K3_KINDS:
        out += [(ATTN_RES, 4.0, -1), (MLA_ANCHOR if kind == "mla" else "chunk_kda_fwd_kernel", 200.0, -1),
                (GEMM_MLA, 60.0, -1), (COPY, 30.0, size), (ALLREDUCE, 40.0, -1), (COPY, 30.0, size),
                (ATTN_RES, 4.0, -1), (COPY, 30.0, size), (ALLREDUCE, 40.0, -1)]
    return out


def _timeline(p: Profile, steps: int, seed: int, removed: tuple[str, ...] = ()) -> list[dict]:
    """Ops in time order: dicts with step, phase (prefill|decode|sampler|meta), name, ts/dur µs, bytes."""
    rng = np.random.default_rng(seed)
    ops: list[dict] = []
    t = 1000.0
    pre = prefill_step_kernels(512)
    for name, dur, nbytes in pre:
        ops.append({"step": 0, "phase": "prefill", "name": name, "ts": t, "dur": dur, "bytes": nbytes})
        t += dur + 3.0
    t += 5000.0
    for s in range(1, steps + 1):
        start = t
        for i, nbytes in enumerate((64, 4 * p.tokens, 8 * p.tokens)):  # metadata copies (eager, before replay)
            ops.append({"step": s, "phase": "meta", "name": COPY, "ts": t, "dur": 2.5, "bytes": nbytes})
            t += 6.0
        t += 20.0
        for name, dur, nbytes in decode_step_kernels(p, rng, removed):
            ops.append({"step": s, "phase": "decode", "name": name, "ts": t, "dur": dur, "bytes": nbytes})
            t += dur + 0.9
        t += 40.0
        for name in SAMPLER:
            ops.append({"step": s, "phase": "sampler", "name": name, "ts": t, "dur": 3.0, "bytes": -1})
            t += 12.0
        # The period shrinks by what was removed: the copies and their dispatch gaps (0.9 µs).
        saved = sum((p.mla_copy_us if k == "mla" else p.kda_copy_us) + 0.9
                    for k in K3_KINDS if k in removed)
        t = start + (p.period_ms * 1000.0 - saved) * rng.uniform(0.999, 1.001)
    return ops


def write_kineto(path: Path, p: Profile, steps: int = 12, seed: int = 0, removed: tuple[str, ...] = (),
                 rank: int = 0) -> Path:
    """rocprofiler-sdk-flavoured Kineto trace of one prefill and `steps` decode steps."""
    ops = _timeline(p, steps, seed, removed)
    events: list[dict] = []
    corr = 100
    tid, pid = 4242, 4242
    by_step: dict[int, list[dict]] = {}
    for op in ops:
        by_step.setdefault(op["step"], []).append(op)
    for s, group in sorted(by_step.items()):
        first = group[0]["ts"]
        decode = s > 0
        label = f"execute_context_0(0)_generation_{p.tokens}({p.tokens})" if decode else "execute_context_16(512)_generation_0(0)"
        body = [o for o in group if o["phase"] != "sampler"]
        cpu_start = first - 300.0
        events.append({"ph": "X", "cat": "user_annotation", "name": label, "pid": pid, "tid": tid,
                       "ts": cpu_start, "dur": body[-1]["ts"] - cpu_start, "args": {}})
        graph_corr = None
        cpu_t = cpu_start + 5.0
        for op in group:
            gpu_args = {"device": 0, "stream": 1, "kind": "Dispatch Kernel"}
            in_graph = decode and op["phase"] == "decode"
            if in_graph:
                if graph_corr is None:
                    corr += 1
                    graph_corr = corr
                    events.append({"ph": "X", "cat": "cuda_runtime", "name": "hipGraphLaunch", "pid": pid, "tid": tid,
                                   "ts": cpu_t, "dur": 40.0, "args": {"correlation": graph_corr}})
                    cpu_t += 41.0
                gpu_args.update(correlation=graph_corr, kind="Dispatch Task")
            else:
                corr += 1
                api = "hipMemcpyAsync" if op["name"] == COPY else "hipLaunchKernel"
                rt_args = {"correlation": corr}
                if op["name"] == COPY:
                    rt_args.update(bytes=str(op["bytes"]), kind="3")
                    gpu_args["bytes"] = op["bytes"]
                # Sampler kernels run after the annotated range (vLLM samples outside it).
                api_ts = cpu_t if op["phase"] != "sampler" else body[-1]["ts"] + 5.0
                events.append({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": pid, "tid": tid,
                               "ts": api_ts, "dur": 4.0, "args": rt_args})
                cpu_t += 5.0
                gpu_args["correlation"] = corr
            events.append({"ph": "X", "cat": "kernel", "name": op["name"], "pid": 0, "tid": 1,
                           "ts": op["ts"], "dur": op["dur"], "args": gpu_args})
    doc = {"schemaVersion": 1, "rocprofiler-sdk_version": "1.0.0",
           "deviceProperties": [{"id": 0, "name": "AMD Instinct MI355X", "warpSize": 64, "numSms": 256,
                                 "computeMajor": 9, "computeMinor": 5, "totalGlobalMem": 309237645312}],
           "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 8},
           "vllm_version": "0.30.0",
           "traceEvents": events}
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


KERNEL_HEADER = ["Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
                 "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size", "Scratch_Size", "VGPR_Count",
                 "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z",
                 "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z"]


def write_rocprofv3_csv(directory: Path, p: Profile, steps: int = 12, seed: int = 0,
                        removed: tuple[str, ...] = ()) -> Path:
    """A rocprofv3 `--kernel-trace` CSV directory (no markers, no API trace) of the same timeline."""
    directory.mkdir(parents=True, exist_ok=True)
    ops = _timeline(p, steps, seed, removed)
    names: dict[str, int] = {}
    with open(directory / "4242_kernel_trace.csv", "w", newline="") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_ALL)
        w.writerow(KERNEL_HEADER)
        for i, op in enumerate(ops):
            kid = names.setdefault(op["name"], len(names) + 1)
            name = op["name"].removesuffix(".kd")  # rocprofv3 formats names without .kd
            grid = blit_grid(op["bytes"]) if op["bytes"] >= 0 else 256 * 64
            start = int(round(op["ts"] * 1000))
            w.writerow(["KERNEL_DISPATCH", "Agent 2", 1, 1, 4242, i + 1, kid, name, i + 1, start,
                        start + int(round(op["dur"] * 1000)), 0, 0, 32, 0, 16, 512 if op["bytes"] >= 0 else 256, 1, 1,
                        grid, 1, 1])
    return directory
