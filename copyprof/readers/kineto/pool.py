"""Decode Kineto chunks in worker processes, fed through shared memory.

Why processes: decoding and columnising hold the GIL (msgspec builds Python objects, the
columns are pulled in C loops over them), so threads would not overlap. Why shared memory: a
pipe on the 2-vCPU VM this was measured on moves ~0.45 GB/s, slower than a worker decodes, so
chunk text goes through anonymous shared-memory slots mapped before the workers fork and only
``(slot, length)`` goes through a pipe. A result's arrays (the chunk's columns, ~5% of its
text) come back the same way: the worker puts them in the slot's result room and pickles the
rest (names, counts; from our own children) through a pipe of its own with room for two
results (:func:`in_room`): with a socket's ~200 KB a worker that had finished a piece sat in
``send`` until the parent came to read it (~0.5 s of its ~1.9 s on a 1 GB trace, measured)
instead of decoding the next one.

Order and correctness: pieces are handed round-robin and collected in the same order, and
every result passes through the same :class:`~copyprof.readers.kineto.stream.PieceMerger` as the
serial reader: a piece is accepted only when it starts at an accepted boundary and decodes;
after a false cut the carried text is merged with the next piece and decoded here. So the
table is the serial reader's table, chunk for chunk (tests/readers/test_parallel.py).

Needs the ``fork`` start method (Linux, macOS); elsewhere :func:`make_pool` returns None and
the caller reads serially.
"""
from __future__ import annotations

import mmap
import multiprocessing as mp
import os
import pickle
import signal
import traceback
from collections import deque
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

import msgspec

from copyprof.errors import CopyprofError
from copyprof.readers.files import BlockStream
from copyprof.readers.kineto.chunk import ChunkResult
from copyprof.readers.kineto.native import decode_columns
from copyprof.readers.kineto.state import StreamState
from copyprof.readers.kineto.stream import FAILED, Piece, PieceMerger, split_pieces

SLOT_SIZE = 64 << 20  # virtual size; only the pages a piece touches are resident
MIN_PARALLEL_BYTES = 16 << 20  # below this much (uncompressed estimate) a pool is not worth its start
# Slots beyond one per worker: with one, this process, which inflates every piece and sets the
# read's pace, waited on the oldest piece's worker while the other worker, done, had nothing to
# decode (the workers sat idle ~45 % of a read). Two let it inflate the next piece meanwhile:
# cold reports of the 1 GB trace on two cores 0.964x the time of one spare (10 alternating
# rounds, benchmarks/README.md item 36); a third gave no more. The read's 4-6 MB more resident
# is below the analysis' peak.
SPARE_SLOTS = 2
RESULT_ROOM = 16 << 20  # virtual size of a slot's result room; a 4 MB piece's columns take ~0.2 MB
RESULT_PIPE_BYTES = 1 << 20  # two pieces' results; Linux's default limit for a pipe an unprivileged process sizes


def available_cores() -> int:
    """Cores this process may run on (affinity / cgroup cpuset aware where the OS says)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def _worker(tasks: Connection, results: Connection, slots: list[mmap.mmap], rooms: list[mmap.mmap]) -> None:
    """Loop: (slot, length) in, ("room", (pickle, spans)) | ("ok", ChunkResult) | ("bad", reason)
    | ("error", tb) out (:func:`in_room`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it stops us on Ctrl-C
    _as_batch_work()
    while True:
        try:
            msg = tasks.recv()
        except EOFError:
            return
        if msg is None:
            return
        slot, length = msg
        view = memoryview(slots[slot])[:length]
        try:
            out = in_room(decode_columns(view), rooms[slot])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            out = ("bad", str(exc))
        except Exception:  # noqa: BLE001 - reported by the parent with the worker's traceback
            out = ("error", traceback.format_exc())
        finally:
            view.release()
        results.send(out)


def in_room(result: ChunkResult, room: mmap.mmap) -> tuple[str, Any]:
    """The result as a message whose arrays' bytes are in the slot's result room: ("room",
    (the pickle without them, their (offset, size) in the room)). Why: pickled whole, every column
    was copied into the pickle, through the pipe and out of it again (~50 MB per GB, both sides);
    out of band (pickle protocol 5) the arrays are copied once, into memory the parent reads them
    from, and it copies them into its table from there. The room is this slot's own, and the
    parent takes each result before it hands the slot out again (ChunkPool.read_chunks), so a
    result is never overwritten while it is read. ("ok", result) when they do not fit."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(result, protocol=5, buffer_callback=buffers.append)
    spans, at = [], 0
    for buf in buffers:
        raw = buf.raw()
        if at + raw.nbytes > len(room):
            return ("ok", result)
        room[at : at + raw.nbytes] = raw
        spans.append((at, raw.nbytes))
        at += -(-raw.nbytes // 64) * 64  # each array 64-byte aligned, as numpy allocates them
    return ("room", (head, spans))


def _as_batch_work() -> None:
    """Run this decode worker as batch work (Linux's SCHED_BATCH: the same share of the CPU,
    but its wake-ups do not preempt the running process). Where the workers and the parent
    share the cores, the parent, which inflates and hands out every piece, sets the read's
    pace: 10 and 12 alternating rounds of a cold report on the 1 GB trace, two cores, gave
    0.961 and 0.954 per round, the same CPU time. Elsewhere (no such policy) nothing changes."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        pass


def _make_room(conn: Connection) -> None:
    """Give the pipe behind ``conn`` room for RESULT_PIPE_BYTES where the system allows it
    (Linux; elsewhere, or above the system's limit, the pipe keeps its size: only speed).
    fcntl is imported here: the module must import where there is none (Windows reads serially)."""
    try:
        import fcntl

        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, RESULT_PIPE_BYTES)  # type: ignore[attr-defined]
    except (ImportError, AttributeError, OSError):
        pass


class ChunkPool:
    """``jobs`` worker processes and ``jobs + SPARE_SLOTS`` shared-memory slots (at most that
    many pieces in flight, so memory stays flat whatever the file size: each in-flight 4 MB
    piece is resident in this process)."""

    def __init__(self, jobs: int, slot_size: int = SLOT_SIZE, room_size: int = RESULT_ROOM) -> None:
        self.jobs = jobs
        self.slot_size = slot_size
        self.slots: list[mmap.mmap] = []
        self.rooms: list[mmap.mmap] = []  # each slot's result room (in_room)
        self._tasks: list[Connection] = []
        self._results: list[Connection] = []
        self._procs: list[Any] = []
        try:
            for _ in range(jobs + SPARE_SLOTS):
                self.slots.append(mmap.mmap(-1, slot_size))
                self.rooms.append(mmap.mmap(-1, room_size))
            ctx = mp.get_context("fork")
            for _ in range(jobs):
                task_in, task_out = ctx.Pipe(duplex=False)
                result_in, result_out = ctx.Pipe(duplex=False)
                self._tasks.append(task_out)
                self._results.append(result_in)
                _make_room(result_out)
                proc = ctx.Process(target=_worker, args=(task_in, result_out, self.slots, self.rooms), daemon=True,
                                   name="copyprof-decode")
                try:
                    proc.start()
                finally:
                    task_in.close()
                    result_out.close()
                self._procs.append(proc)
        except BaseException:
            self.close()  # no half-built pool: slots unmapped, started workers stopped
            raise

    def __enter__(self) -> ChunkPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._tasks:
            try:
                conn.send(None)
            except OSError:
                pass
        for proc in self._procs:
            proc.join(timeout=2)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=2)
        for conn in (*self._tasks, *self._results):
            conn.close()
        for mapping in (*self.slots, *self.rooms):
            try:
                mapping.close()
            except BufferError:  # a view survived an interrupted read; the mapping dies with us
                pass
        self._tasks, self._results, self._procs, self.slots, self.rooms = [], [], [], [], []

    def read_chunks(self, blocks: BlockStream, state: StreamState) -> Iterator[ChunkResult]:
        """The serial reader's ``stream_event_chunks(blocks, decode_columns, state)``, in parallel.

        The splitter inflates into the slots themselves (``split_pieces``' ``next_buffer``): a
        piece is decoded where it was inflated, not copied there (a copy of every byte of the
        document, ~0.1 s of this process per GB). A piece the splitter had to assemble in a
        buffer of its own (a header or an event larger than a block) is copied into a slot, or
        decoded here when no slot can hold it."""
        merger = PieceMerger(decode_columns, state)
        free = list(range(len(self.slots)))
        inflight: deque[tuple[Piece, int, int]] = deque()  # piece (its text in the slot), worker, slot
        settled: deque[ChunkResult] = deque()  # results collected while the splitter waited for a slot
        filling: list[int] = []  # the slot the splitter is inflating into

        def next_buffer() -> mmap.mmap:
            while not free:  # every other slot is in flight: the oldest piece's result frees one
                settled.extend(self._settle(merger, inflight, free))
            filling[:] = [free.pop()]
            return self.slots[filling[0]]

        turn = 0
        for piece in split_pieces(blocks, state, blocks.block_size, next_buffer):
            while settled:  # older than anything settled below: yielded first, in piece order
                yield settled.popleft()
            slot = self._slot_of(piece, filling, free)
            if slot is None and len(piece.data) > self.slot_size:
                # Only when a block had no event boundary (a giant event): drain, then decode here.
                while inflight:
                    yield from self._settle(merger, inflight, free)
                result = merger.settle(piece, lambda: decode_columns(piece.data))  # noqa: B023
                if result is not FAILED:
                    yield result
                continue
            if slot is None:
                while not free:
                    yield from self._settle(merger, inflight, free)
                slot = free.pop()
                view = memoryview(self.slots[slot])[: len(piece.data)]
                view[:] = piece.data  # the splitter reuses its own buffer; the slot keeps the text
                piece = Piece(piece.offset, view, piece.sep)
            worker = turn % self.jobs
            turn += 1
            self._tasks[worker].send((slot, len(piece.data)))
            inflight.append((piece, worker, slot))
        yield from settled
        free.extend(filling)  # the splitter's last slot held only the array's end
        while inflight:
            yield from self._settle(merger, inflight, free)
        self.release_slots()
        yield from merger.finish()

    def _slot_of(self, piece: Piece, filling: list[int], free: list[int]) -> int | None:
        """The slot ``piece`` was inflated into (it is the piece's now), or None when the
        splitter assembled it in a buffer of its own, which it does after copying the text out
        of its slot: that slot is free again."""
        if not filling:
            return None
        slot = filling.pop()
        if isinstance(piece.data, memoryview) and piece.data.obj is self.slots[slot]:
            return slot
        free.append(slot)
        return None

    def release_slots(self) -> None:
        """Give the slots' pages back once a file is read (16 MB at --jobs 2, while the file's
        table is built); the next file's pieces fault them in again. Best effort: without
        MADV_REMOVE (not Linux) the pages stay until the pool closes."""
        for mapping in (*self.slots, *self.rooms):
            try:
                mapping.madvise(mmap.MADV_REMOVE)
            except (AttributeError, OSError, ValueError):
                return

    def _settle(self, merger: PieceMerger, inflight: deque[tuple[Piece, int, int]],
                free: list[int]) -> Iterator[ChunkResult]:
        """Collect the oldest piece's result and pass it through the merger."""
        piece, worker, slot = inflight.popleft()
        try:
            status, payload = self._results[worker].recv()
        except (EOFError, OSError) as exc:
            raise CopyprofError(f"a decode worker process died ({exc}); try --jobs 1") from exc
        if status == "error":
            raise CopyprofError(f"a decode worker failed:\n{payload}")
        if status == "room":  # the arrays are views of the room until the reader has taken them
            head, spans = payload
            status, payload = "ok", pickle.loads(head, buffers=[memoryview(self.rooms[slot])[a : a + n] for a, n in spans])
        result = merger.settle(piece, lambda: _payload(status, payload))  # copies the text if it failed
        piece.data.release()  # type: ignore[union-attr]
        free.append(slot)
        if result is not FAILED:
            yield result


def _payload(status: str, payload: Any) -> ChunkResult:
    if status != "ok":
        raise msgspec.DecodeError(payload)
    return payload


def make_pool(jobs: int) -> ChunkPool | None:
    """A pool of ``jobs`` workers, or None when ``jobs`` < 2, ``fork`` is unavailable or the
    system refuses the pool's memory or processes."""
    if jobs < 2 or "fork" not in mp.get_all_start_methods():
        return None
    try:
        return ChunkPool(jobs)
    except OSError:
        # No room for the slots or the workers (an address-space limit, many cores and little
        # memory, a process limit): a pool only makes reading faster, so read serially — the
        # table is the same. Found by the reader fuzzer: 16 cores x 2 slots x 64 MB under a
        # 3 GiB RLIMIT_AS.
        return None
