"""Mutations of seed traces: byte damage, gzip damage, and structure-aware edits per format.

Why structure-aware as well as bytes: random byte flips mostly produce invalid JSON or CSV,
which the first parser rejects; the bugs live one layer down, where the document parses and a
field has the wrong type, a number is huge or NaN, an array is empty, events are duplicated
or out of order, a name is not UTF-8, or a SQLite column holds text. Each operator below
makes one such class of damage; ``make_input`` applies one operator to one seed, driven by a
``random.Random`` so that every input is reproducible from ``(seed, op, rng_seed)``.
"""
from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path
from typing import Any

from tests.fuzz.mutate_tables import csv_op, sql_op
from tests.fuzz.seeds import Seed

NON_UTF8 = "\u0001NONUTF8\u0001"  # replaced by raw invalid UTF-8 bytes after serialising
_NON_UTF8_JSON = json.dumps(NON_UTF8)[1:-1].encode()
_BAD_BYTES = (b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\x80", b"\xf8\x88\x80\x80\x80", b"\x00")
WEIRD: tuple[Any, ...] = (
    None, True, False, 0, -1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**30, 1e308, -1e308,
    float("nan"), float("inf"), -float("inf"), 1.5, -0.0, "", "x", "12", "1e3", "nan", "-1", "NaN",
    "stream 7", [], [1, 2, 3], [None], {}, {"a": 1}, "../../evil", "/tmp/evil", NON_UTF8, "a" * 5000,
    '}, {"ph": "X"}, {', "]", "\\",
)
EVENT_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id")
ARG_FIELDS = ("device", "stream", "correlation", "bytes", "grid", "block", "External id", "external id",
              "graph id", "graph node id", "kind", "size", "fromDevice", "rank")
BYTE_OPS = ("truncate", "flip", "insert", "delete", "dup_span", "non_utf8", "zero_fill")
GZIP_OPS = ("gz_truncate", "gz_flip", "gz_trailer", "gz_garbage_after", "gz_multi")
OPS: dict[str, tuple[str, ...]] = {
    "kineto": BYTE_OPS + GZIP_OPS + ("json_tree", "json_events", "json_events", "json_events", "json_layout"),
    "rocprofv3-json": BYTE_OPS + GZIP_OPS + ("json_tree", "json_tree", "json_tree", "json_records"),
    "rocprofv3-csv": BYTE_OPS + ("gz_truncate", "gz_flip") + ("csv_cells", "csv_cells", "csv_header", "csv_rows",
                                                               "dir_files"),
    "rocprof-v1": BYTE_OPS + GZIP_OPS + ("csv_cells", "csv_cells", "csv_header", "csv_rows"),
    "rocpd": ("truncate", "flip", "sql_values", "sql_values", "sql_values", "sql_schema", "sql_rows", "sql_pages"),
    "nsys-sqlite": ("truncate", "flip", "sql_values", "sql_values", "sql_values", "sql_schema", "sql_rows",
                    "sql_pages"),
}

_docs: dict[Path, Any] = {}  # parsed JSON seeds, kept per worker (the big ones take ~1 s to parse)


def _plain(path: Path) -> tuple[bytes, bool]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        return gzip.decompress(raw), True
    return raw, False


def _size_class(n: int, rng: random.Random, page: int | None = None) -> int:
    """A cut point: tiny, around a power of two or a page boundary, a fraction, or one short."""
    marks = [0, 1, 2, 15, 16, 17, 100, 511, 512, 4095, 4096, 4097, 65535, 65536, 65537, n // 2, n - 1, n - 2]
    if page:
        k = rng.randrange(1, max(2, n // page + 1))
        marks += [k * page - 1, k * page, k * page + 1]
    marks.append(rng.randrange(max(1, n)))
    return max(0, min(n - 1 if n else 0, rng.choice(marks)))


# ------------------------------------------------------------------------ bytes and gzip
def byte_op(data: bytes, op: str, rng: random.Random, page: int | None = None) -> bytes:
    n = len(data)
    if n == 0:
        return data
    b = bytearray(data)
    if op == "truncate":
        return bytes(b[: _size_class(n, rng, page)])
    if op == "flip":
        lo = 100 if page and n > 200 else 0  # SQLite: mostly past the header
        for _ in range(rng.choice((1, 1, 2, 4, 16))):
            b[rng.randrange(lo, n)] ^= rng.randrange(1, 256)
        return bytes(b)
    if op == "insert":
        at = rng.randrange(n + 1)
        blob = bytes(rng.randrange(256) for _ in range(rng.choice((1, 3, 17, 200))))
        return bytes(b[:at]) + blob + bytes(b[at:])
    if op == "delete":
        at = rng.randrange(n)
        return bytes(b[:at]) + bytes(b[at + rng.choice((1, 2, 10, 300, 5000)):])
    if op == "dup_span":
        at, ln = rng.randrange(n), rng.choice((1, 40, 400, 4000))
        return bytes(b[:at]) + bytes(b[at:at + ln]) * rng.choice((2, 3)) + bytes(b[at + ln:])
    if op == "non_utf8":
        for _ in range(rng.choice((1, 2, 8))):
            at = rng.randrange(n)
            b[at:at] = rng.choice(_BAD_BYTES)
        return bytes(b)
    if op == "zero_fill":
        at = rng.randrange(n)
        ln = rng.choice((1, 64, 4096))
        b[at:at + ln] = bytes(len(b[at:at + ln]))
        return bytes(b)
    raise ValueError(op)


def gzip_op(plain: bytes, op: str, rng: random.Random) -> bytes:
    comp = gzip.compress(plain, compresslevel=rng.choice((1, 6, 9)), mtime=0)
    n = len(comp)
    if op == "gz_truncate":
        return comp[: rng.choice((2, 10, 11, 20, n // 3, n // 2, n - 8, n - 4, n - 1, max(2, rng.randrange(n))))]
    if op == "gz_flip":
        b = bytearray(comp)
        for _ in range(rng.choice((1, 2, 5))):
            b[rng.randrange(10, n) if n > 10 else 0] ^= rng.randrange(1, 256)
        return bytes(b)
    if op == "gz_trailer":  # CRC or length wrong
        b = bytearray(comp)
        b[n - rng.randrange(1, 9)] ^= 0xFF
        return bytes(b)
    if op == "gz_garbage_after":
        return comp + rng.choice((b"\x00" * 512, b"garbage", b"\x1f\x8b\x08\x00", comp[: n // 2]))
    if op == "gz_multi":  # two members: valid gzip, content concatenated
        cut = rng.randrange(len(plain) + 1)
        return gzip.compress(plain[:cut], mtime=0) + gzip.compress(plain[cut:], mtime=0)
    raise ValueError(op)


# ------------------------------------------------------------------------ JSON
def _dumps(doc: Any, rng: random.Random) -> bytes:
    text = json.dumps(doc, allow_nan=True, indent=rng.choice((None, None, 1)), ensure_ascii=rng.random() < 0.5)
    data = text.encode("utf-8", "surrogatepass")
    if _NON_UTF8_JSON in data:
        data = data.replace(_NON_UTF8_JSON, rng.choice(_BAD_BYTES[:4]))
    return data.replace(NON_UTF8.encode(), rng.choice(_BAD_BYTES[:4]))


def _copy_path(doc: Any, path: list[Any]) -> tuple[Any, Any]:
    """Shallow-copy the containers along ``path``; return (new root, copied parent of the last key)."""
    root = _shallow(doc)
    node = root
    for key in path[:-1]:
        node[key] = _shallow(node[key])
        node = node[key]
    return root, node


def _shallow(x: Any) -> Any:
    return dict(x) if isinstance(x, dict) else list(x) if isinstance(x, list) else x


def _valid(doc: Any, path: list[Any]) -> bool:
    node = doc
    for key in path:
        if isinstance(node, dict) and key in node or isinstance(node, list) and isinstance(key, int) \
                and 0 <= key < len(node):
            node = node[key]
        else:
            return False
    return True


def _random_path(doc: Any, rng: random.Random, stop: float = 0.25) -> list[Any]:
    path: list[Any] = []
    node = doc
    while isinstance(node, (dict, list)) and node:
        if path and rng.random() < stop:
            break
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        path.append(key)
        node = node[key]
    return path


def _edit(doc: Any, path: list[Any], rng: random.Random) -> Any:
    """One edit at ``path``: wrong-typed value, deletion, empty container, duplicate, shuffle."""
    if not path:
        return rng.choice(([], {}, None, doc))
    if not _valid(doc, path):  # an earlier edit removed part of the path
        path = _random_path(doc, rng)
        if not path:
            return doc
    root, parent = _copy_path(doc, path)
    key = path[-1]
    value = parent[key]
    r = rng.random()
    if r < 0.45:
        parent[key] = rng.choice(WEIRD)
    elif r < 0.6 and isinstance(parent, dict):
        del parent[key]
    elif r < 0.7 and isinstance(value, (list, dict)):
        parent[key] = type(value)()
    elif isinstance(value, list) and value:
        v = list(value)
        choice = rng.random()
        if choice < 0.4:
            i = rng.randrange(len(v))
            v[i:i] = [v[i]] * rng.choice((1, 2, 50))  # duplicates
        elif choice < 0.7:
            rng.shuffle(v)  # out of order
        else:
            v.reverse()
        parent[key] = v
    elif isinstance(parent, list):
        parent.insert(rng.randrange(len(parent) + 1), rng.choice(WEIRD))
    else:
        parent[rng.choice(("traceName", "x", "", NON_UTF8))] = rng.choice(WEIRD)
    return root


def _events_path(doc: Any) -> list[Any]:
    if isinstance(doc, list):
        return []
    return ["traceEvents"] if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list) else []


def json_events(doc: Any, rng: random.Random) -> Any:
    """Kineto event-level damage: fields wrong or missing, NaN/negative/huge times, duplicates, disorder."""
    base = _events_path(doc)
    events = doc if isinstance(doc, list) else doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list) or not events:
        return _edit(doc, _random_path(doc, rng), rng)
    events = list(events)
    r = rng.random()
    if r < 0.6:
        for _ in range(rng.choice((1, 2, 5, 20))):
            i = rng.randrange(len(events))
            ev = dict(events[i]) if isinstance(events[i], dict) else {}
            if rng.random() < 0.4 and isinstance(ev.get("args"), dict):
                args = dict(ev["args"])
                f = rng.choice(ARG_FIELDS)
                args[f] = rng.choice(WEIRD)
                if rng.random() < 0.2:
                    args.pop(f, None)
                ev["args"] = args
            else:
                f = rng.choice(EVENT_FIELDS)
                if rng.random() < 0.2:
                    ev.pop(f, None)
                else:
                    ev[f] = rng.choice(WEIRD + (float("nan"), -5.0, 1e19, "X", "i", "B", "E"))
            events[i] = ev
    elif r < 0.7:
        i = rng.randrange(len(events))
        events[i:i] = [events[i]] * rng.choice((1, 2, 100))
    elif r < 0.8:
        rng.shuffle(events)
    elif r < 0.85:
        events = []
    elif r < 0.93:  # NaN / reversed durations on a run of events
        for i in rng.sample(range(len(events)), min(len(events), rng.choice((1, 10, 1000)))):
            if isinstance(events[i], dict):
                events[i] = {**events[i], "dur": rng.choice((float("nan"), -1.0, float("inf"), "nan"))}
    else:
        events.append({"ph": "X", "cat": "kernel", "name": NON_UTF8, "ts": rng.choice(WEIRD), "dur": 1,
                       "args": {"device": 0, "stream": 7}})
    if not base:
        return events
    return {**doc, "traceEvents": events}


def json_records(doc: Any, rng: random.Random) -> Any:
    """rocprofv3 JSON: damage inside ``buffer_records``/``strings``/``kernel_symbols`` of a process."""
    try:
        proc = doc["rocprofiler-sdk-tool"][0]
    except (KeyError, IndexError, TypeError):
        return _edit(doc, _random_path(doc, rng), rng)
    section = rng.choice([k for k in ("buffer_records", "strings", "kernel_symbols", "agents", "metadata")
                          if k in proc] or ["metadata"])
    sub = proc.get(section)
    path = ["rocprofiler-sdk-tool", 0, section] + _random_path(sub, rng, stop=0.15)
    out = doc
    for _ in range(rng.choice((1, 2, 4))):
        out = _edit(out, path, rng)
    return out


def json_op(seed: Seed, op: str, rng: random.Random) -> bytes:
    doc = _docs.get(seed.path)
    if doc is None:
        doc = _docs[seed.path] = json.loads(_plain(seed.path)[0])
    if op == "json_events":
        doc = json_events(doc, rng)
    elif op == "json_records":
        doc = json_records(doc, rng)
    elif op == "json_layout":  # same events, other spellings: bare list, dict of lists, whitespace
        events = doc if isinstance(doc, list) else doc.get("traceEvents", [])
        doc = rng.choice(([*events] if isinstance(events, list) else events, {"traceEvents": {"0,0": events}},
                          {"traceEvents": events, "tail": [1] * 10}, {"x": {"traceEvents": events}}))
    else:
        for _ in range(rng.choice((1, 1, 2, 4))):
            doc = _edit(doc, _random_path(doc, rng), rng)
    return _dumps(doc, rng)


# ------------------------------------------------------------------------ entry point
def make_input(seed: Seed, op: str, rng: random.Random, out_dir: Path) -> Path:
    """Write one mutated copy of ``seed`` (op applied) under ``out_dir``; return its path."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    if op == "identity":  # the seed as it is (checks that every seed reads cleanly)
        dest = out_dir / seed.path.name
        (shutil.copytree if seed.path.is_dir() else shutil.copyfile)(seed.path, dest)
        return dest
    if seed.path.is_dir():  # rocprofv3 CSV directory: damage one file (or the set of files)
        dest = out_dir / seed.path.name
        shutil.copytree(seed.path, dest)
        files = sorted(dest.iterdir())
        if op == "dir_files":
            victim = rng.choice(files)
            if rng.random() < 0.5 and len(files) > 1:
                victim.unlink()
            else:
                victim.write_bytes(rng.choice((b"", b"\n", victim.read_bytes().split(b"\n", 1)[0])))
            return dest
        kernel = [f for f in files if "kernel_trace" in f.name]
        target = kernel[0] if kernel and rng.random() < 0.6 else rng.choice(files)
        data = target.read_bytes()
        if op.startswith("gz_"):
            target.rename(target.with_name(target.name + ".gz"))
            target = target.with_name(target.name + ".gz")
            target.write_bytes(gzip_op(data, op, rng))
        else:
            target.write_bytes(csv_op(data, op, rng) if op.startswith("csv_") else byte_op(data, op, rng))
        return dest
    dest = out_dir / seed.path.name
    if op.startswith("sql_") or (seed.fmt in ("rocpd", "nsys-sqlite")):
        shutil.copyfile(seed.path, dest)
        if op.startswith("sql_"):
            sql_op(dest, op, rng)
        else:
            data = dest.read_bytes()
            dest.write_bytes(byte_op(data, op, rng, page=int.from_bytes(data[16:18], "big") or 4096))
        return dest
    plain, was_gz = _plain(seed.path)
    if op.startswith("gz_"):
        dest.write_bytes(gzip_op(plain, op, rng))
        return dest
    if op.startswith("json_"):
        mutated = json_op(seed, op, rng)
    elif op.startswith("csv_"):
        mutated = csv_op(plain, op, rng)
    else:
        mutated = byte_op(plain, op, rng)
    dest.write_bytes(gzip.compress(mutated, compresslevel=1, mtime=0) if was_gz else mutated)
    return dest
