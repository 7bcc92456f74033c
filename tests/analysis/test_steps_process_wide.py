"""A step owns the GPU work its process launched inside the step window.

Real shape: the A100 sample (HTA ``negative_queue_length_values_check/rank0.json.gz``) has
``ProfilerStep#550..554`` on thread 4515 while thread 25556 (autograd's backward thread)
issues ~2,500 runtime calls inside each window; counting only the annotating thread gave 61
copies per step where 228 were launched. The small traces below are written here: a training
step whose backward copies run on another thread, a 2-rank run where only one rank's
backward runs on a helper thread (which used to give a false "per-step copy counts differ
between ranks"), and a vLLM-style trace (one range per engine step on the worker thread) that
must keep its result.
"""
from __future__ import annotations

import json
from pathlib import Path

from copyprof.analysis.report import analyze_run
from copyprof.analysis.steps.segment import segment
from copyprof.readers.kineto import read_kineto

MAIN, BACKWARD = 100, 200


class _Trace:
    """Kineto events of one process, written as a trace file."""

    def __init__(self, first_corr: int = 0) -> None:
        self.events: list[dict] = []
        self.corr = first_corr

    def span(self, name: str, tid: int, ts: float, dur: float, cat: str = "user_annotation") -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur})

    def launch(self, tid: int, ts: float, copy: bool) -> None:
        self.corr += 1
        runtime = "cudaMemcpyAsync" if copy else "cudaLaunchKernel"
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": runtime, "pid": 1, "tid": tid, "ts": ts,
                            "dur": 1.0, "args": {"correlation": self.corr}})
        gpu = ({"cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "args": {"bytes": 4096}} if copy
               else {"cat": "kernel", "name": "gemm", "args": {}})
        gpu["args"] = {**gpu["args"], "correlation": self.corr, "device": 0, "stream": 7}
        self.events.append({"ph": "X", "pid": 0, "tid": 7, "ts": ts + 5.0, "dur": 2.0, **gpu})

    def write(self, path: Path, rank: int = 0) -> str:
        path.write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": self.events}))
        return str(path)


def _training(backward_tid: int, steps: int = 3, first_corr: int = 0) -> _Trace:
    """Each step: forward kernels on the main thread, then backward copies on ``backward_tid``."""
    t = _Trace(first_corr)
    for s in range(steps):
        t0 = 1000.0 * s
        t.span(f"ProfilerStep#{s}", MAIN, t0, 900.0)
        for i in range(4):
            t.launch(MAIN, t0 + 10 + 10 * i, copy=False)
        for i in range(3):
            t.launch(backward_tid, t0 + 100 + 10 * i, copy=True)
    t.launch(BACKWARD, 5000.0, copy=True)  # after the last step: no step owns it
    return t


def test_backward_thread_work_belongs_to_the_step(tmp_path):
    [trace] = read_kineto(_training(BACKWARD).write(tmp_path / "train.json"))
    steps = segment(trace.table)
    assert steps.rule == "annotation (profiler-step)"
    assert steps.table["n_events"].tolist() == [7, 7, 7]  # 4 kernels + 3 copies per step
    late = trace.table["start_ns"] == 5_005_000
    assert (steps.step_of[late] == -1).all()  # launched outside every window
    note = next(n for n in steps.notes if "other threads" in n)
    assert note.startswith("9 of the 21 GPU ops in the steps (9 device-to-device copies)")  # what the thread alone misses
    assert "The annotating thread alone launched 12 ops" in note


def test_sparse_correlation_ids_give_the_same_steps(tmp_path):
    # Ids that count from 0 are looked up in a dense index; ids far above the table's row count
    # (here from 10**12) are searched: the GPU ops' steps, counts and notes are the same.
    dense = segment(read_kineto(_training(BACKWARD).write(tmp_path / "dense.json"))[0].table)
    sparse = segment(read_kineto(_training(BACKWARD, first_corr=10**12).write(tmp_path / "sparse.json"))[0].table)
    assert dense.step_of.tolist() == sparse.step_of.tolist()
    assert sparse.table["n_events"].tolist() == [7, 7, 7] and sparse.notes == dense.notes


def test_one_thread_traces_keep_their_steps_and_say_nothing(tmp_path):
    # vLLM: one execute_context range per engine step on the worker thread, which launches it all
    t = _Trace()
    for s in range(3):
        t.span("execute_context_0(0)_generation_4(4)", MAIN, 1000.0 * s, 900.0)
        for i in range(5):
            t.launch(MAIN, 1000.0 * s + 10 * (i + 1), copy=i == 2)
    [trace] = read_kineto(t.write(tmp_path / "vllm.json"))
    steps = segment(trace.table)
    assert steps.rule == "annotation (vllm)" and steps.table["n_events"].tolist() == [5, 5, 5]
    assert not any("other threads" in n for n in steps.notes)


def test_a_threads_own_ranges_win_over_anothers(tmp_path):
    # Two threads each annotate their own steps, and the windows overlap: each thread's calls
    # stay with its own ranges (the earlier rule), not with the other thread's window.
    t = _Trace()
    t.span("ProfilerStep#0", MAIN, 0.0, 500.0)
    t.span("ProfilerStep#1", BACKWARD, 100.0, 500.0)
    t.launch(MAIN, 150.0, copy=False)
    t.launch(BACKWARD, 200.0, copy=True)
    [trace] = read_kineto(t.write(tmp_path / "two.json"))
    steps = segment(trace.table)
    ev = trace.table
    kernel, copy = ev["kind"] == "kernel", ev["kind"] == "memcpy"
    labels = steps.table.to_pandas().set_index("step")["label"]
    assert labels[steps.step_of[kernel][0]] == "ProfilerStep#0"
    assert labels[steps.step_of[copy][0]] == "ProfilerStep#1"
    assert not any("other threads" in n for n in steps.notes)


def test_ranks_agree_when_one_rank_runs_backward_on_a_helper_thread(tmp_path):
    traces = [read_kineto(_training(MAIN).write(tmp_path / "rank0.json", rank=0))[0],
              read_kineto(_training(BACKWARD).write(tmp_path / "rank1.json", rank=1))[0]]
    run = analyze_run(traces, str(tmp_path), None)
    assert run.rank_agreement.agree, run.rank_agreement.message
    assert run.by_rank["0"].copies == run.by_rank["1"].copies == 3
