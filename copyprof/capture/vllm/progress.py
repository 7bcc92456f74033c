"""A capture in progress: what its stages share with the failure path, and the files beside
run.json that both the finished and the failed capture write.

Why a module of its own: the stages (run.py) and the failure record (failure.py) both act on
the same capture state (its run directory, server, cohort, window and trace folder) and both
write client_metrics.json and the file list; holding them here lets each of those modules
import it without importing the other.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import msgspec

from copyprof.capture.vllm.client import Cohort
from copyprof.capture.vllm.port import PortReservation
from copyprof.capture.vllm.server import ServerProcess
from copyprof.capture.vllm.traces import list_files
from copyprof.rundir.layout import write_error
from copyprof.rundir.record import Window

CLIENT_METRICS = "client_metrics.json"


class Reporter(Protocol):
    def stage(self, name: str) -> None: ...
    def detail(self, text: str) -> None: ...
    def info(self, text: str) -> None: ...


class QuietReporter:
    def stage(self, name: str) -> None: ...
    def detail(self, text: str) -> None: ...
    def info(self, text: str) -> None: ...


@dataclass
class Capture:
    """A capture in progress: what its stages share with the failure path that must clean up after them."""

    run_dir: Path
    rep: Reporter
    stage_now: str = "starting"
    server: ServerProcess | None = None
    cohort: Cohort | None = None
    trace_dir: Path | None = None
    window: Window | None = None  # the cohort's attempts, and the window's token counts once it got that far
    port: PortReservation | None = None  # the server's port, held against other copyprof runs until the end

    def stage(self, name: str) -> None:
        self.stage_now = name
        self.rep.stage(name)


def rel_files(run_dir: Path) -> list[str]:
    return [str(p.relative_to(run_dir)) for p in list_files(run_dir) if p.name != "run.json"]


def write_metrics(run_dir: Path, cohort: Cohort | None, extra: dict[str, Any]) -> None:
    if cohort is None:
        return
    per_request = cohort.metrics()
    ttfts = [m["ttft_ms"] for m in per_request if m["ttft_ms"] is not None]
    tpots = [m["tpot_ms"] for m in per_request if m["tpot_ms"] is not None]
    data = {"unit": "ms", "clock": "time.perf_counter (client side, includes HTTP/SSE latency)",
            "requests": len(per_request), "ttft_ms_max": max(ttfts) if ttfts else None,
            "tpot_ms_mean": sum(tpots) / len(tpots) if tpots else None, **extra, "per_request": per_request}
    path = run_dir / CLIENT_METRICS
    try:
        with open(path, "x" if not path.exists() else "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)
    except OSError as exc:
        raise write_error(path, exc) from exc


def window_json(window: Window | None) -> dict[str, Any]:
    """The window as client_metrics.json holds it, as in run.json ({} before the cohort stage)."""
    out: dict[str, Any] = msgspec.to_builtins(window) if window is not None else {}
    return out
