"""Build large Kineto traces for the parse benchmark by replicating a REAL captured trace.

Why replicate instead of generating: the bytes a parser sees (field order, whitespace, arg
sets, the mix of categories) must be those a profiler writes, or the MB/s means nothing. So
the events of a captured trace are copied K times, verbatim except for the numbers that must
stay unique along the timeline:

* ``"ts"`` is shifted by ``k * period`` (period = the source's span + 1 ms); the integer part
  is shifted as an integer and any fraction is kept as written, so no float rounding;
* ``"correlation"``, ``"External id"`` and the flow ``"id"`` are offset by ``k * stride``
  (stride > the largest id in the source), so launches still pair with their GPU work.

Metadata events (``ph: "M"``) are written once. The output is gzip level 1 (``gzip -1``, as
in peer-tools.md §6). Usage::

    python benchmarks/make_trace.py SRC.json.gz OUT.json.gz --mb 1000 [--rank R]
"""
from __future__ import annotations

import argparse
import gzip
import math
import re
from typing import Any

import msgspec

_TS = re.compile(rb'("ts"\s*:\s*)(-?\d+)')
_IDS = re.compile(rb'("correlation"\s*:\s*|"External id"\s*:\s*|"id"\s*:\s*)(\d+)')
_META = re.compile(rb'"ph"\s*:\s*"M"')


class _Times(msgspec.Struct):
    ts: float | None = None
    dur: float | None = None
    id: int | str | None = None
    args: dict[str, Any] | None = None


def _split(data: bytes) -> tuple[bytes, list[bytes], bytes]:
    """Header text (up to and including '['), the raw text of each event, and the tail."""
    doc = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    raw_events = bytes(doc["traceEvents"])
    start = data.index(raw_events)
    events = [bytes(r) for r in msgspec.json.decode(raw_events, type=list[msgspec.Raw])]
    open_at = raw_events.index(b"[") + 1
    close_at = raw_events.rindex(b"]")
    return data[: start + open_at], events, data[start + close_at :]


def _period_and_stride(events: list[bytes]) -> tuple[int, int]:
    decoder = msgspec.json.Decoder(_Times)
    lo, hi, top = math.inf, -math.inf, 0
    for raw in events:
        try:
            e = decoder.decode(raw)
        except msgspec.ValidationError:
            continue
        if e.ts is not None:
            lo = min(lo, e.ts)
            hi = max(hi, e.ts + (e.dur or 0))
        for v in (e.id, *((e.args or {}).get(k) for k in ("correlation", "External id"))):
            if isinstance(v, int):
                top = max(top, v)
    span = int(math.ceil(hi - lo)) if hi > lo else 0
    return span + 1000, 10 ** len(str(top + 1))


def _time_prefix(body: list[bytes], room: float, sep_len: int) -> list[bytes]:
    """The events, in file order, that start before the time at which ``room`` bytes are used."""
    decoder = msgspec.json.Decoder(_Times)
    ts = []
    for raw in body:
        try:
            t = decoder.decode(raw).ts
        except msgspec.ValidationError:
            t = None
        ts.append(float("-inf") if t is None else t)
    used, cutoff = 0, float("-inf")
    for i in sorted(range(len(body)), key=ts.__getitem__):
        if used + len(body[i]) + sep_len > room:
            break
        used += len(body[i]) + sep_len
        cutoff = ts[i]
    return [raw for raw, t in zip(body, ts) if t <= cutoff]


def _shifted(blob: bytes, dt: int, did: int) -> bytes:
    if dt == 0 and did == 0:
        return blob
    blob = _TS.sub(lambda m: m.group(1) + str(int(m.group(2)) + dt).encode(), blob)
    return _IDS.sub(lambda m: m.group(1) + str(int(m.group(2)) + did).encode(), blob)


def _set_rank(header: bytes, rank: int) -> bytes:
    out, n = re.subn(rb'("distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*)\d+', rb"\g<1>%d" % rank, header)
    if n:
        return out
    return header.replace(b"{", b'{\n  "distributedInfo": {"rank": %d},' % rank, 1)


def build_trace(src: str, dest: str, target_mb: float, rank: int | None = None) -> dict[str, Any]:
    """Write ``dest``; returns what was written (copies, events, uncompressed bytes)."""
    with gzip.open(src, "rb") if _is_gzip(src) else open(src, "rb") as fh:
        data = fh.read()
    header, events, tail = _split(data)
    if rank is not None:
        header = _set_rank(header, rank)
    meta = [e for e in events if _META.search(e)]
    body = [e for e in events if not _META.search(e)]
    period, stride = _period_and_stride(body)
    sep = b",\n  "
    blob = sep.join(body)
    target = target_mb * 1e6
    copies = max(1, int(target // (len(blob) + len(sep))))
    # The rest of the target as the first part (in time) of one more copy, so rank files reach
    # their size even when the source is large: the events that start before a cutoff, in
    # file order (at most the step that straddles the cutoff is partial).
    room = target - copies * (len(blob) + len(sep))
    extra = _time_prefix(body, room, len(sep)) if room > 0.05 * len(blob) else []
    written = 0
    with gzip.open(dest, "wb", compresslevel=1) as out:
        first = b"\n  " + (sep.join(meta) + sep if meta else b"")
        for part in (header, first):
            out.write(part)
            written += len(part)
        for k in range(copies + (1 if extra else 0)):
            text = blob if k < copies else sep.join(extra)
            chunk = (sep if k else b"") + _shifted(text, k * period, k * stride)
            out.write(chunk)
            written += len(chunk)
        end = b"\n" + tail
        out.write(end)
        written += len(end)
    return {"source": src, "copies": copies, "partial_copy_events": len(extra),
            "events": len(meta) + copies * len(body) + len(extra),
            "json_bytes": written, "period_us": period, "id_stride": stride}


def _is_gzip(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("dest")
    ap.add_argument("--mb", type=float, default=1000.0, help="uncompressed size to reach (MB)")
    ap.add_argument("--rank", type=int, default=None, help="set distributedInfo.rank")
    args = ap.parse_args()
    print(build_trace(args.src, args.dest, args.mb, args.rank))


if __name__ == "__main__":
    main()
