"""The report facade: one run (a run directory or trace files) → the figures every renderer shows.

Stateless analyzers (steps → census → estimate) run per rank; the headline comes from one
rank (rank 0 unless asked), and per-rank counts are compared so disagreement is said aloud.
The returned dict is the ``runs[i]`` object of the ``report --format json`` contract (README),
plus extra keys renderers use.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from copyprof.analysis.census import Census, take_census
from copyprof.analysis.estimate import copy_speed, estimate
from copyprof.analysis.replica_timing import load_timing, timing_summary
from copyprof.analysis.steps import Steps, segment, step_warnings
from copyprof.errors import CopyprofError
from copyprof.events import Trace, name_array
from copyprof.models import ModelLayout
from copyprof.taxonomy.devices import device_cus, device_label, peak_gbps


@dataclass
class RankAnalysis:
    rank: int
    trace: Trace
    steps: Steps
    census: Census


def analyze_rank(trace: Trace, layout: ModelLayout | None, all_steps: bool = False) -> RankAnalysis:
    steps = segment(trace.events)
    census = take_census(trace.events, steps, layout, cus=device_cus(trace.meta.devices), all_steps=all_steps)
    return RankAnalysis(trace.meta.ranks[0] if trace.meta.ranks else 0, trace, steps, census)


def _median(values: pd.Series | np.ndarray) -> float | None:
    arr = pd.to_numeric(pd.Series(values), errors="coerce").dropna().to_numpy(dtype=float)
    return float(np.median(arr)) if len(arr) else None


def _int_median(values: pd.Series) -> int:
    m = _median(values)
    return int(round(m)) if m is not None else 0


def per_step_medians(ra: RankAnalysis) -> dict[str, Any]:
    ps = ra.census.per_step
    decode = ra.steps.decode
    host = _host_copies(ra)
    if ps.empty:
        tokens = _median(decode["tokens"]) if len(decode) else None
        return {
            "tokens": int(tokens) if tokens is not None else None,
            "period_ms": _ms(_median(decode["period_ns"])) if len(decode) else None,
            "gpu_span_ms": _ms(_median(decode["span_ns"])) if len(decode) else None,
            "copies": 0, "other": 0, "post_proj": {"mla": 0, "kda": 0, "total": 0},
            "post_proj_ms": {"mla": 0.0, "kda": 0.0, "total": 0.0}, "other_ms": 0.0, "host_copies": host,
            "host_copies_by_name": _host_copies_by_name(ra),
        }
    tokens = _median(ps["tokens"])
    return {
        "tokens": int(tokens) if tokens is not None else None,
        "period_ms": _ms(_median(ps["period_ns"])),
        "gpu_span_ms": _ms(_median(ps["span_ns"])),
        "copies": _int_median(ps["copies"]),
        "other": _int_median(ps["other"]),
        "post_proj": {"mla": _int_median(ps["post_mla"]), "kda": _int_median(ps["post_kda"]),
                      "total": _int_median(ps["post_total"])},
        "post_proj_ms": {"mla": _median(ps["post_mla_ms"]), "kda": _median(ps["post_kda_ms"]),
                         "total": _median(ps["post_total_ms"])},
        "other_ms": _median(ps["other_ms"]),
        "post_proj_gap_ms": {"mla": _median(ps["post_mla_gap_ms"]), "kda": _median(ps["post_kda_gap_ms"])},
        "host_copies": host,
    }


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def _host_copies(ra: RankAnalysis) -> int | None:
    """Median `aten::copy_` ops per counted step (CPU-only traces; None when there is a GPU).

    Only `aten::copy_` is counted: `aten::to` / `_to_copy` / `clone` nest a `copy_` inside,
    so counting them too would count one copy several times (they are listed by name)."""
    by_name = _host_copies_by_name(ra)
    return None if by_name is None else by_name.get("aten::copy_", 0)


def _host_copies_by_name(ra: RankAnalysis) -> dict[str, int] | None:
    if ra.steps.device >= 0:
        return None
    ev = ra.trace.events
    steps = list(ra.steps.decode["step"])
    mask = (ev["kind"] == "cpu_op").to_numpy() & np.isin(ra.steps.step_of, steps)
    if not steps:
        return {}
    frame = pd.DataFrame({"step": ra.steps.step_of[mask], "name": name_array(ev)[mask]})
    counts = frame.groupby(["name", "step"]).size().unstack(fill_value=0).reindex(columns=steps, fill_value=0)
    return {str(name): int(np.median(row)) for name, row in counts.iterrows()}


def analyze_run(traces: list[Trace], path: str, layout: ModelLayout | None, *, rank: int | None = None,
                all_steps: bool = False) -> dict[str, Any]:
    rank_traces = [t for t in traces if t.meta.role == "rank"]
    if not rank_traces:
        raise CopyprofError("no per-rank trace found (only the vLLM API-process trace?)", path=path)
    analyses = sorted((analyze_rank(t, layout, all_steps) for t in rank_traces), key=lambda a: a.rank)
    ranks = sorted({a.rank for a in analyses})
    head_rank = rank if rank is not None else ranks[0]
    heads = [a for a in analyses if a.rank == head_rank]
    if not heads:
        raise CopyprofError(f"rank {head_rank} is not in this run (ranks: {ranks})", path=path)
    head = heads[0]
    meta = head.trace.meta
    decode_n = len(head.census.per_step) if not head.census.per_step.empty else len(head.steps.decode)
    out: dict[str, Any] = {
        "path": path,
        "format": meta.format,
        "flavour": meta.flavour,
        "ranks": ranks,
        "layout": _layout_json(layout),
        "steps": {"decode": int(decode_n), "excluded": int(len(head.steps.table) - decode_n), "rule": head.steps.rule},
        "per_step": per_step_medians(head),
        "estimate": estimate(head.census) if layout is not None else [],
        "headline_rank": head_rank,
        "device": device_label(meta.devices),
        "peak_gbps": peak_gbps(meta.devices),
        "sites": copy_speed(head.census, peak_gbps(meta.devices)),
        "attribution": head.census.attribution,
        "notes": head.steps.notes + head.census.notes,
        "rank_agreement": _rank_agreement(analyses),
        "by_rank": {str(a.rank): per_step_medians(a) for a in analyses},
        "metadata": _run_metadata(path, meta.metadata),
        "step_series": _step_series(head),
        "timeline": _timeline(head),
        "warnings": [w for t in rank_traces for w in t.meta.warnings] + [f"{t.meta.path}: partly read: {t.meta.partial}" for t in rank_traces if t.meta.partial]
        + step_warnings([(a.rank, a.steps) for a in analyses]),
    }
    if decode_n == 0:
        out["notes"].append("no pure-decode steps found: figures are empty (try --all-steps)")
    run = out["metadata"].get("run")
    status = run.get("status") if isinstance(run, dict) else None
    if isinstance(status, str) and status != "complete":  # a crashed or interrupted capture: say so first
        out["warnings"].insert(0, f"run.json: this capture did not complete ({status[:300]})")
    timing = load_timing(path)
    if timing is not None:
        out["timing"] = timing_summary(timing)
    return out


def _step_series(ra: RankAnalysis) -> dict[str, list[float]]:
    """Per-step values of the headline rank (for A/B statistics and plots; not in the JSON contract)."""
    ps = ra.census.per_step
    if ps.empty:
        dec = ra.steps.decode
        return {"period_ms": (dec["period_ns"].astype(float) / 1e6).tolist(), "span_ms": (dec["span_ns"].astype(float) / 1e6).tolist()}
    return {
        "period_ms": (ps["period_ns"].astype(float) / 1e6).tolist(),
        "span_ms": (ps["span_ns"].astype(float) / 1e6).tolist(),
        "post_proj_ms": ps["post_total_ms"].tolist(),
    }


def _timeline(ra: RankAnalysis) -> pd.DataFrame | None:
    """GPU ops of the first counted step with a `site` column (plots)."""
    if ra.census.per_step.empty:
        return None
    step = int(ra.census.per_step["step"].iloc[0])
    ev = ra.trace.events
    mask = (ra.steps.step_of == step) & ev["on_gpu"].to_numpy()
    ops = ev.loc[mask, ["start_ns", "dur_ns", "name"]].copy()
    ops["name"] = ops["name"].astype(str)
    cp = ra.census.copies[ra.census.copies["step"] == step]
    site = dict(zip(cp["start_ns"], cp["site"].map(lambda s: s if s in ("mla", "kda") else "other-copy")))
    ops["site"] = [site.get(t, "") for t in ops["start_ns"].tolist()]  # (map+fillna("") warns: float dtype)
    return ops.sort_values("start_ns").reset_index(drop=True)


def _rank_agreement(analyses: list[RankAnalysis]) -> dict[str, Any]:
    if len(analyses) < 2:
        return {"agree": True, "message": "one rank"}
    keys = ("copies", "post_total", "post_mla", "post_kda")
    sig = {}
    for a in analyses:
        ps = a.census.per_step
        sig[a.rank] = tuple(_int_median(ps[k]) if not ps.empty else 0 for k in keys)
    distinct = set(sig.values())
    if len(distinct) == 1:
        return {"agree": True, "message": f"per-step copy counts agree on all {len(analyses)} ranks"}
    detail = "; ".join(f"rank {r}: {dict(zip(keys, s))}" for r, s in sorted(sig.items()))
    return {"agree": False, "message": f"per-step copy counts differ between ranks — {detail}"}


def _layout_json(layout: ModelLayout | None) -> dict[str, Any] | None:
    if layout is None:
        return None
    return {"name": layout.name, "layers": layout.layers, "mla_layers": len(layout.mla_layers),
            "kda_layers": len(layout.kda_layers), "hidden": layout.hidden, "dtype_bytes": layout.dtype_bytes}


def _run_metadata(path: str, trace_meta: dict[str, Any]) -> dict[str, Any]:
    """run.json (when the run is a copyprof run directory) merged over the trace's metadata."""
    out = {k: v for k, v in trace_meta.items() if isinstance(v, (str, int, float, bool)) or k == "distributedInfo"}
    run_json = os.path.join(path, "run.json") if os.path.isdir(path) else None
    if run_json and os.path.isfile(run_json):
        try:
            with open(run_json, encoding="utf-8") as fh:
                out["run"] = json.load(fh)
        except (OSError, ValueError) as exc:
            out["run_json_error"] = str(exc)
    return out
