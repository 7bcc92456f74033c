"""The chunk-parallel Kineto reader gives the serial reader's table, byte for byte.

Small blocks force hundreds of pieces through the worker processes; names holding "}, {"
plant candidate cuts inside strings, so false cuts (a piece that fails to decode and must be
merged with the next one) happen in the workers too. Rank directories read with a pool must
give the per-rank tables and the report of a serial read.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from copyprof.events import make_table
from copyprof.readers import files as source
from copyprof.readers.discover import discover
from copyprof.readers.kineto import read_kineto
from copyprof.readers.kineto.pool import ChunkPool, available_cores, in_room, make_pool
from copyprof.readers.kineto.reader import table_frame
from copyprof.reading import decode_pool, read_sources
from tests.conftest import run_cli

SAMPLES = ["kineto_cupti_a100_cudagraph_rank0.json.gz", "kineto_cupti_b200_eager.json.gz",
           "kineto_roctracer_mi300x_sglang_qwen3_8b_decode.json.gz",
           "kineto_roctracer_mi300x_vllm_decode_fullgraph.json.gz", "kineto_roctracer_mi250_rocm6_2_minitoy.json.gz"]


@pytest.fixture(scope="module")
def pool():
    p = ChunkPool(2)
    yield p
    p.close()


def _same(a, b) -> None:
    assert len(a) == len(b)
    for ta, tb in zip(a, b):
        pd.testing.assert_frame_equal(ta.events, tb.events)
        assert ta.meta == tb.meta


def _x(name: str, ts: float, corr: int, **args) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 1.5,
            "args": {"device": 0, "stream": 7, "correlation": corr, **args}}


def _tricky_trace(path: Path, n: int = 20000, rank: int = 3) -> Path:
    """Pretty-printed like Kineto; every 7th name holds '}, {' (a candidate cut in a string),
    args hold lists of objects (candidate cuts inside nested values), flows and runtime rows
    interleave; a vLLM decode-step annotation every 300 kernels."""
    events = []
    for i in range(n):
        if i % 300 == 0:
            events.append({"ph": "X", "cat": "user_annotation", "name": "execute_context_0(0)_generation_16(16)",
                           "pid": 0, "tid": 1, "ts": 8.5 + i, "dur": 299.0, "args": {"External id": i}})
        name = f"k{i} weird }}, {{ name" if i % 7 == 0 else f"kernel_{i % 50}"
        events.append(_x(name, 10.0 + i, i, grid=[i % 9 + 1, 1, 1], block=[128, 1, 1],
                         nested={"a": [{"b": 1}, {"c": 2}]}))
        if i % 3 == 0:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 0, "tid": 1,
                           "ts": 9.0 + i, "dur": 0.5, "args": {"correlation": i, "External id": i}})
            events.append({"ph": "f", "id": i, "pid": 0, "tid": 7, "ts": 10.0 + i, "cat": "ac2g", "name": "ac2g", "bp": "e"})
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": rank}, "traceEvents": events, "traceName": "t"}
    path.write_bytes(gzip.compress(json.dumps(doc, indent=2).encode(), compresslevel=1))
    return path


def test_table_frame_is_make_table(samples):
    # table_frame builds the frame without make_table's copies; the result must be the same.
    [t] = read_kineto(str(samples / "kineto_cupti_b200_eager.json.gz"))
    ev = t.events
    cols = {c: ev[c].to_numpy() for c in ev.columns if c not in ("kind", "name", "rank", "bytes_src", "copy_dir")}
    cols["kind_idx"] = ev["kind"].cat.codes.to_numpy()
    dirs = ev["copy_dir"]
    ours = table_frame(ev["name"].cat.codes.to_numpy(), list(ev["name"].cat.categories), dict(cols), 0,
                       (dirs.cat.codes.to_numpy(), list(dirs.cat.categories)))
    theirs = make_table(ev["name"].cat.codes.to_numpy(), list(ev["name"].cat.categories),
                        {**{k: v for k, v in cols.items() if k != "kind_idx"}, "kind": ev["kind"].astype(str).tolist(),
                         "copy_dir": dirs.astype(str).tolist(),
                         "bytes_src": np.where(ev["bytes"] >= 0, "event", "none")})
    pd.testing.assert_frame_equal(ours.to_pandas(), theirs.to_pandas())  # dtypes, categories, values


@pytest.mark.parametrize("name", SAMPLES)
def test_parallel_equals_serial_on_public_samples(samples, pool, monkeypatch, name):
    serial = read_kineto(str(samples / name))
    monkeypatch.setattr(source, "BLOCK_SIZE", 64 << 10)  # hundreds of pieces through the workers
    _same(serial, read_kineto(str(samples / name), pool))


def test_false_cuts_in_workers_give_the_serial_table(tmp_path, pool, monkeypatch):
    path = str(_tricky_trace(tmp_path / "tricky.pt.trace.json.gz"))
    whole = read_kineto(path)  # one 8 MiB piece holds the file: no cut at all
    monkeypatch.setattr(source, "BLOCK_SIZE", 16 << 10)
    serial = read_kineto(path)
    parallel = read_kineto(path, pool)
    _same(whole, serial)
    _same(serial, parallel)
    ev = parallel[0].events
    assert len(ev) == 20000 + 6667 + 67 and parallel[0].meta.ranks == [3]
    assert ev.loc[ev["kind"] == "kernel", "correlation"].tolist() == list(range(20000))
    assert (ev["name"].astype(str).str.contains("}, {", regex=False)).sum() == len(range(0, 20000, 7))


def test_pieces_larger_than_a_slot_are_decoded_in_the_parent(tmp_path, monkeypatch):
    path = str(_tricky_trace(tmp_path / "big.pt.trace.json.gz", n=3000))
    serial = read_kineto(path)
    monkeypatch.setattr(source, "BLOCK_SIZE", 32 << 10)
    with ChunkPool(2, slot_size=40 << 10) as small:  # some pieces (block + leftover) exceed a slot
        _same(serial, read_kineto(path, small))


def test_large_documents_are_cut_into_larger_pieces_with_the_same_table(tmp_path, pool, monkeypatch):
    path = str(_tricky_trace(tmp_path / "large.pt.trace.json.gz", n=3000))
    serial = read_kineto(path)
    sizes = []
    real = source.BlockStream.__init__

    def spy(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - BlockStream's own signature
        real(self, *args, **kwargs)
        sizes.append(self.block_size)

    monkeypatch.setattr(source.BlockStream, "__init__", spy)
    monkeypatch.setattr(source, "BLOCK_SIZE", 16 << 10)
    monkeypatch.setattr(source, "LARGE_BLOCK_SIZE", 48 << 10)
    assert source.piece_size(source.LARGE_DOCUMENT - 1) == 16 << 10
    assert source.piece_size(source.LARGE_DOCUMENT) == 48 << 10
    monkeypatch.setattr(source, "LARGE_DOCUMENT", 0)  # every document counts as large here
    _same(serial, read_kineto(path, pool))
    assert sizes == [48 << 10]


def test_results_too_large_for_their_room_come_whole_through_the_pipe(tmp_path, monkeypatch):
    path = str(_tricky_trace(tmp_path / "rooms.pt.trace.json.gz", n=3000))
    serial = read_kineto(path)
    monkeypatch.setattr(source, "BLOCK_SIZE", 32 << 10)
    with ChunkPool(2, room_size=4 << 10) as cramped:  # a piece's columns need more than 4 KB
        _same(serial, read_kineto(path, cramped))


def test_a_result_in_its_room_reads_back_the_same(tmp_path):
    """What a worker sends: the pickle without the arrays, and where their bytes are in the room;
    loaded with views of the room, the result is the one decoded. Too small a room: sent whole."""
    import mmap
    import pickle

    from copyprof.readers.kineto.native import decode_columns

    text = json.dumps([_x(f"kernel_{i % 5}", 10.0 + i, i, grid=[i % 9 + 1, 1, 1]) for i in range(500)]).encode()
    result = decode_columns(text)
    room = mmap.mmap(-1, 1 << 20)
    status, (head, spans) = in_room(result, room)
    assert status == "room" and spans and all(at % 64 == 0 for at, _ in spans)
    back = pickle.loads(head, buffers=[memoryview(room)[at : at + n] for at, n in spans])
    assert back.names == result.names and back.cols.keys() == result.cols.keys()
    for key, col in result.cols.items():
        assert back.cols[key].dtype == col.dtype and back.cols[key].tolist() == col.tolist()
    assert back.counts.tolist() == result.counts.tolist() and back.name_codes.tolist() == result.name_codes.tolist()
    assert in_room(result, mmap.mmap(-1, 256)) == ("ok", result)


def test_a_header_larger_than_a_slot_leaves_the_slots_to_the_pieces(tmp_path, monkeypatch):
    # The splitter inflates into the pool's slots; a header longer than a slot is assembled in
    # a buffer of its own, so the first piece is copied into a slot and the slot the splitter
    # left is handed out again. Every later piece is decoded in the slot it was inflated into.
    events = json.loads(gzip.decompress(_tricky_trace(tmp_path / "t.json.gz", n=4000).read_bytes()))["traceEvents"]
    header = {"schemaVersion": 1, "distributedInfo": {"rank": 1},
              "deviceProperties": [{"id": i, "name": "NVIDIA H200", "note": "x" * 200} for i in range(400)]}
    path = tmp_path / "header.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({**header, "traceEvents": events}, indent=2).encode(), compresslevel=1))
    monkeypatch.setattr(source, "BLOCK_SIZE", 16 << 10)  # the header is ~100 KB: six blocks
    serial = read_kineto(str(path))
    with ChunkPool(2, slot_size=48 << 10) as small:
        parallel = read_kineto(str(path), small)
    _same(serial, parallel)
    # every complete event is a row (flow events link rows, they are not rows)
    assert len(parallel[0].events) == sum(e["ph"] == "X" for e in events) > 5000 and parallel[0].meta.ranks == [1]


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux's scheduling policies only")
def test_decode_workers_run_as_batch_work(tmp_path, pool, monkeypatch):
    # Batch work: the workers' wake-ups do not preempt the parent, which sets the read's pace.
    # A read first, so that every worker has started and taken pieces.
    monkeypatch.setattr(source, "BLOCK_SIZE", 16 << 10)
    read_kineto(str(_tricky_trace(tmp_path / "t.pt.trace.json.gz", n=2000)), pool)
    assert pool._procs and all(os.sched_getscheduler(p.pid) == os.SCHED_BATCH for p in pool._procs)


def test_truncated_file_reads_the_same_prefix(tmp_path, pool, monkeypatch):
    full = _tricky_trace(tmp_path / "full.json.gz").read_bytes()
    cut = tmp_path / "cut.pt.trace.json.gz"
    cut.write_bytes(full[: len(full) * 2 // 3])
    monkeypatch.setattr(source, "BLOCK_SIZE", 32 << 10)
    serial = read_kineto(str(cut))
    assert serial[0].meta.partial and "gzip stream ends" in serial[0].meta.partial
    _same(serial, read_kineto(str(cut), pool))


def test_rank_directory_parallel_equals_serial_and_report_matches(tmp_path, monkeypatch):
    d = tmp_path / "run"
    d.mkdir()
    for r in range(3):
        _tricky_trace(d / f"rank{r}.{r}.pt.trace.json.gz", n=4000 + 500 * r, rank=r)
    sources = discover([str(d)])
    serial = read_sources(sources)
    monkeypatch.setattr(source, "BLOCK_SIZE", 32 << 10)
    with make_pool(2) as p:
        _same(serial, read_sources(sources, pool=p))
    monkeypatch.setenv("COPYPROF_CACHE_DIR", str(tmp_path / "cache"))
    one = run_cli("report", str(d), "--format", "json", "--jobs", "1", "--no-cache", check=True).stdout
    two = run_cli("report", str(d), "--format", "json", "--jobs", "2", "--no-cache", check=True).stdout
    run = json.loads(one)["runs"][0]
    assert one == two and run["ranks"] == [0, 1, 2] and run["steps"]["decode"] > 0


def test_decode_pool_only_for_big_kineto_sources(tmp_path, samples):
    small = discover([str(samples / "kineto_cupti_b200_eager.json.gz")])
    assert decode_pool(small, 2) is None and decode_pool(small, 1) is None
    assert available_cores() >= 1


def test_phases_missing_null_and_unknown(tmp_path):
    # "ph" missing or null counts as a complete event (legacy writers); an unknown phase is
    # neither a row nor counted, and does not cost the other events of its chunk.
    events = [_x("k0", 1.0, 0), {**_x("k1", 2.0, 1), "ph": None}, {"ph": "Z", "name": "odd", "ts": 3},
              {k: v for k, v in _x("k2", 4.0, 2).items() if k != "ph"},
              {"ph": "f", "id": 1, "ts": 5, "cat": "ac2g", "name": "ac2g"}, {"ph": "M", "name": "process_name", "args": {}}]
    path = tmp_path / "phases.json"
    path.write_text(json.dumps({"traceEvents": events}))
    [t] = read_kineto(str(path))
    assert t.events["name"].astype(str).tolist() == ["k0", "k1", "k2"]
    assert t.meta.kind_counts["kernel"] == 3 and sum(t.meta.kind_counts.values()) == 3


def test_pool_that_cannot_be_built_means_a_serial_read(monkeypatch):
    """An address-space limit can refuse the pool's memory (16 cores x 2 slots x 64 MB do not
    fit in 3 GiB, a limit the fuzzer runs under), and mmap's ENOMEM must not escape as a
    traceback: a refused slot (or worker) means no pool — the caller reads serially — and
    nothing half-built is left behind."""
    import mmap as mmap_mod

    from copyprof.readers.kineto import pool as parallel

    made: list[object] = []
    real = mmap_mod.mmap

    def refuse_third(*args: object, **kw: object) -> object:
        if len(made) == 2:
            raise OSError(12, "Cannot allocate memory")
        m = real(*args, **kw)
        made.append(m)
        return m

    monkeypatch.setattr(parallel.mmap, "mmap", refuse_third)
    assert make_pool(4) is None
    assert all(m.closed for m in made)  # the two slots it did map are unmapped again


def test_report_under_an_address_space_limit_with_many_jobs(tmp_path, samples):
    """End to end: --jobs 64 (128 slots of 64 MB) under a 3 GiB RLIMIT_AS gives the report of
    --jobs 1, exit 0, nothing on stderr."""
    import os
    import resource
    import subprocess
    import sys

    trace = samples / "kineto_cupti_a100_cudagraph_rank0.json.gz"  # 25.7 MB of JSON: big enough for a pool
    env = {**os.environ, "COPYPROF_CACHE_DIR": str(tmp_path / "c")}

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    base = [sys.executable, "-m", "copyprof", "report", "--format", "json", "--no-cache"]
    many = subprocess.run([*base, "--jobs", "64", str(trace)], capture_output=True, text=True, env=env,
                          preexec_fn=limited)
    one = subprocess.run([*base, "--jobs", "1", str(trace)], capture_output=True, text=True, env=env)
    assert many.returncode == 0 and many.stderr == "", many.stderr
    assert many.stdout == one.stdout and json.loads(one.stdout)["runs"][0]["steps"]["decode"] > 0
