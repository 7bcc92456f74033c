"""A merged multi-rank Kineto file is read as several ranks, not as one rank of mixed events.

The two merged layouts below follow the tools' code (copyprof/readers/kineto/merged.py names the
files and commits): TraceLens' TraceFusion marks each event with ``args.rank`` and offsets int
pids and correlation ids per rank; SGLang's ProfileMerger prefixes every pid with
``"[TP0r] "``, leaves correlation ids as they were (they repeat across ranks) and writes the
header keys and all ranks' ``deviceProperties`` after ``traceEvents``. The rank files are small
vLLM-style traces written here, so each rank's expected census is known. (A real TraceFusion
output of HTA's two ``trace_filter/sampled_rank-*`` traces was checked the same way:
benchmarks/REAL_TRACES.md.)
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from copyprof.analysis.report import analyze_run
from copyprof.readers.kineto import native as kineto_native
from copyprof.readers.kineto import read_kineto

DEVICE = {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320, "computeMajor": 9, "computeMinor": 0,
          "numSms": 132, "warpSize": 32}


def _rank_doc(rank: int, steps: int = 3) -> dict:
    """One rank's trace: vLLM decode steps on the worker thread; rank r launches r + 1 copies per step."""
    events, corr = [], 0
    for s in range(steps):
        t0 = 1000.0 * s
        events.append({"ph": "X", "cat": "user_annotation", "name": "execute_context_0(0)_generation_4(4)",
                       "pid": 4000 + rank, "tid": 4000 + rank, "ts": t0, "dur": 900.0})
        for i in range(6):
            corr += 1
            copy_ = i <= rank
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync" if copy_ else "cudaLaunchKernel",
                           "pid": 4000 + rank, "tid": 4000 + rank, "ts": t0 + 10 + 20 * i, "dur": 3.0,
                           "args": {"correlation": corr, "External id": corr}})
            gpu = ({"cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "args": {"bytes": 8192}} if copy_
                   else {"cat": "kernel", "name": "gemm", "args": {"grid": [4, 1, 1], "block": [128, 1, 1]}})
            gpu["args"] = {**gpu["args"], "correlation": corr, "device": rank, "stream": 7}
            events.append({"ph": "X", "pid": rank, "tid": 7, "ts": t0 + 15 + 20 * i, "dur": 5.0, **gpu})
    events.append({"ph": "M", "name": "process_name", "pid": 4000 + rank, "tid": 0, "args": {"name": "python"}})
    return {"schemaVersion": 1, "deviceProperties": [dict(DEVICE, id=rank)],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}, "traceEvents": events}


def _tracelens_fuse(docs: list[dict]) -> dict:
    """TraceFusion's rules: args.rank on every event, int pid and correlation offset by rank * 10**k
    (k from the first rank's largest value), process_name metadata dropped and rewritten."""
    first = docs[0]["traceEvents"]
    mult = {f: 10 ** (len(str(max(int(e.get(f, -1)) if f == "pid" else int(e.get("args", {}).get(f, -1))
                                   for e in first))) + 1) for f in ("pid", "correlation")}
    merged = []
    for rank, doc in enumerate(docs):
        for ev in copy.deepcopy(doc["traceEvents"]):
            if ev["ph"] == "M":
                continue
            ev.setdefault("args", {})["rank"] = rank
            if "correlation" in ev["args"]:
                ev["args"]["correlation_raw"] = ev["args"]["correlation"]
                ev["args"]["correlation"] += rank * mult["correlation"]
            ev["args"]["pid_raw"] = ev["pid"]
            ev["pid"] += rank * mult["pid"]
            merged.append(ev)
    merged += [{"name": "process_name", "ph": "M", "pid": p, "tid": 0, "args": {"name": f"RANK {r} - CPU"}}
               for r, p in ((0, 4000), (1, 4001 + mult["pid"]))]
    return {"traceEvents": merged}


def _sglang_merge(docs: list[dict]) -> dict:
    """ProfileMerger's rules: pid -> "[TP0r] pid"; traceEvents first, then the first rank's other
    keys and every rank's deviceProperties."""
    merged: dict = {"traceEvents": []}
    devices = []
    for rank, doc in enumerate(docs):
        for ev in copy.deepcopy(doc["traceEvents"]):
            ev["pid"] = f"[TP{rank:02d}] {ev['pid']}"
            merged["traceEvents"].append(ev)
        devices += doc["deviceProperties"]
        for k, v in doc.items():
            if k not in ("traceEvents", "deviceProperties") and k not in merged:
                merged[k] = v
    merged["deviceProperties"] = devices
    return merged


def _write(path: Path, doc: dict) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
@pytest.mark.parametrize("merge", [_tracelens_fuse, _sglang_merge], ids=["tracelens", "sglang"])
def test_merged_file_reads_as_its_ranks(tmp_path, monkeypatch, merge, native):
    monkeypatch.setattr(kineto_native, "_NATIVE", native)
    docs = [_rank_doc(0), _rank_doc(1)]
    singles = [read_kineto(_write(tmp_path / f"rank{r}.json", d))[0] for r, d in enumerate(docs)]
    traces = read_kineto(_write(tmp_path / "merged.json", merge(docs)))
    assert [t.meta.ranks for t in traces] == [[0], [1]]
    for t, single in zip(traces, singles):
        assert t.meta.kind_counts == single.meta.kind_counts  # the file's counts split by rank
        assert len(t.events) == len(single.events)
        assert (t.events["rank"] == t.meta.ranks[0]).all()
        assert "merged_by" in t.meta.metadata and "rank" not in t.meta.metadata.get("distributedInfo", {})
    run = analyze_run(traces, str(tmp_path), None)
    assert run.ranks == [0, 1]
    # rank r launches r + 1 copies per step; SGLang's repeated correlation ids do not mix the ranks
    assert (run.by_rank["0"].copies, run.by_rank["1"].copies) == (1, 2)
    assert run.steps.decode == 3


def test_a_few_rank_args_do_not_split_a_file(tmp_path):
    # One rank's own file where some events carry a peer "rank" (a send/recv, say): not merged.
    doc = _rank_doc(0)
    for ev in doc["traceEvents"][:4]:
        ev.setdefault("args", {})["rank"] = 1
    traces = read_kineto(_write(tmp_path / "one.json", doc))
    assert len(traces) == 1 and traces[0].meta.ranks == [0]


def test_unmarked_events_go_to_the_first_rank_and_are_said(tmp_path):
    doc = _tracelens_fuse([_rank_doc(0, steps=100), _rank_doc(1, steps=100)])  # 2,600 marked events, 1 not
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 1.0,
                               "dur": 1.0})
    traces = read_kineto(_write(tmp_path / "m.json", doc))
    assert [t.meta.ranks for t in traces] == [[0], [1]]
    assert any(w.startswith("1 events of the merged file carry no rank mark") for w in traces[0].meta.warnings)
    assert traces[0].meta.kind_counts["cpu_op"] == 1 and traces[1].meta.kind_counts["cpu_op"] == 0


def test_a_chunk_without_rank_marks_still_counts_its_events_as_unmarked():
    # A merged file is read in pieces; a piece whose events carry no rank mark (the file's tail,
    # say) must hand its kind counts to the unmarked key (-1), which split_ranks gives to the
    # first rank. They were dropped, so the counts depended on where the pieces were cut.
    import numpy as np

    from copyprof.events import KINDS
    from copyprof.readers.kineto.chunk import kept_rows

    kinds = np.array([KINDS.index("kernel"), KINDS.index("runtime"), KINDS.index("kernel")])
    res, _ = kept_rows(kinds, np.zeros(3, dtype=np.int32), ["k"], np.full(3, -1))
    assert list(res.rank_counts) == [-1]
    assert res.rank_counts[-1][KINDS.index("kernel")] == 2 and res.rank_counts[-1][KINDS.index("runtime")] == 1
