"""Baseline vs candidate: what copies the candidate removed, and what an A/B measured.

Sign convention (matches analysis/stats.py): savings are baseline − candidate, positive when
the candidate is faster. ``estimate_ms`` comes from the baseline's census for the scope the
candidate actually removed (24 MLA copies gone and 69 KDA left → scope "mla"); the measured
effect is the Hodges–Lehmann shift of the per-step periods with a rank-based 95 % interval.
"""
from __future__ import annotations

import math
from itertools import combinations
from typing import Any

import numpy as np

from copyprof.analysis.client_metrics import client_comparison
from copyprof.analysis.stats import ShiftResult, shift_estimate
from copyprof.analysis.verdict import estimator_check, verdict
from copyprof.models.layout import kind_label

UNATTRIBUTED = "post-proj"


def is_post_site(s: dict[str, Any]) -> bool:
    return s.get("role") == "post-projection" or s["site"] == UNATTRIBUTED


def site_key(s: dict[str, Any]) -> tuple[int, str]:
    """Identity of a copy site across arms: measured size, or place (next kernel) when the
    trace gave no size (a layout-implied size is not a measurement and is not compared)."""
    nbytes = -1 if s.get("bytes_src") == "layout" else int(s["bytes"])
    return nbytes, str(s.get("neighbour", ""))


def _site_counts(run: dict[str, Any], post_keys: set[tuple[int, str]] | None = None) -> dict[tuple[str, int, str], float]:
    """Per-step copies by (family, bytes, neighbour). Post-projection sites pool into one family;
    with ``post_keys`` (the baseline's post-projection sizes/neighbours) a candidate's
    unattributed copies of the same size and place count as post-projection too."""
    out: dict[tuple[str, int, str], float] = {}
    for s in run["sites"]:
        post = is_post_site(s) or (post_keys is not None and s["site"] == "other" and site_key(s) in post_keys)
        key = (UNATTRIBUTED if post else s["site"], *site_key(s))
        out[key] = out.get(key, 0.0) + float(s["per_step"])
    return out


def post_keys(base: dict[str, Any]) -> set[tuple[int, str]]:
    return {site_key(s) for s in base["sites"] if is_post_site(s)}


def _kinds(run: dict[str, Any]) -> list[str]:
    return [k for k in run["per_step"]["post_proj"] if k != "total"]


def removed_scope(base: dict[str, Any], cand: dict[str, Any]) -> tuple[str | None, str]:
    """Which layer kinds' post-projection copies the candidate no longer makes: a kind, several
    joined by "+", "all", or None (none removed, or a change no patch scope explains)."""
    b = base["per_step"]["post_proj"]
    hb, hc = base["per_step"].get("host_copies"), cand["per_step"].get("host_copies")
    if hb is not None and hc is not None:
        return None, (f"CPU-only traces: {hb} → {hc} `aten::copy_` ops per step ({hb - hc} fewer in the candidate); "
                      "device copies need a GPU trace")
    if not base.get("layout") or b["total"] == 0:
        return None, "the baseline has no attributed post-projection copies (give --model, or check the baseline build)"
    kinds = [k for k in _kinds(base) if b[k] > 0]
    c = cand["per_step"]["post_proj"]
    pooled = round(sum(v for (fam, _, _), v in _site_counts(cand, post_keys(base)).items() if fam == UNATTRIBUTED))
    if _kinds(cand) != _kinds(base) or any(s["site"] == UNATTRIBUTED for s in cand["sites"]):
        return _scope_from_total(b, kinds, pooled)  # the candidate's copies are not all placed in layers
    left = {k: int(c.get(k, 0)) for k in kinds}
    if all(left[k] == b[k] for k in kinds) and pooled == b["total"]:
        return None, f"all {b['total']} post-projection copies still there: the candidate removed none"
    removed = [k for k in kinds if left[k] == 0]
    if any(0 < left[k] != b[k] for k in kinds) or not removed or pooled != sum(left.values()):
        now = ", ".join(f"{left[k]} {kind_label(k)}" for k in kinds)
        return None, f"post-projection copies per step changed from {b['total']} to {pooled} ({now}): matches no patch scope"
    return _scope_text(b, kinds, removed)


def _scope_from_total(b: dict[str, int], kinds: list[str], left: int) -> tuple[str | None, str]:
    """Scope from the candidate's pooled count alone: the kinds whose counts add up to what left."""
    if left == b["total"]:
        return None, f"all {b['total']} post-projection copies still there: the candidate removed none"
    for r in range(len(kinds), 0, -1):
        for removed in combinations(kinds, r):
            if sum(b[k] for k in kinds if k not in removed) == left:
                return _scope_text(b, kinds, list(removed))
    return None, f"post-projection copies per step changed from {b['total']} to {left}: matches no patch scope"


def _scope_text(b: dict[str, int], kinds: list[str], removed: list[str]) -> tuple[str, str]:
    kept = [k for k in kinds if k not in removed]
    if not kept:
        detail = " + ".join(f"{b[k]} {kind_label(k)}" for k in kinds)
        return "all", f"all {b['total']} post-projection copies gone ({detail})"
    gone = " + ".join(f"{b[k]} {kind_label(k)}" for k in removed)
    still = " + ".join(f"{b[k]} {kind_label(k)}" for k in kept)
    return "+".join(removed), f"{gone} post-projection copies gone, {still} still there"


def scope_kinds(scope: str | None, base: dict[str, Any]) -> tuple[str, ...]:
    if scope is None:
        return ()
    return tuple(_kinds(base)) if scope == "all" else tuple(scope.split("+"))


def site_changes(base: dict[str, Any], cand: dict[str, Any]) -> list[dict[str, Any]]:
    """Copy sites whose per-step count differs between the arms (post-projection sites pooled)."""
    keys = post_keys(base)
    b, c = _site_counts(base, keys), _site_counts(cand, keys)
    rows = []
    for key in sorted(set(b) | set(c)):
        nb, nc = b.get(key, 0.0), c.get(key, 0.0)
        if abs(nb - nc) < 1e-9:
            continue
        status = "removed" if nc == 0 else ("appeared" if nb == 0 else "changed")
        rows.append({"site": key[0], "bytes": key[1], "neighbour": key[2], "baseline_per_step": nb,
                     "candidate_per_step": nc, "status": status})
    return rows


def _removed_sites(base: dict[str, Any], kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    return [{"bytes": int(s["bytes"]), "layer_kind": s["site"], "per_step": int(round(s["per_step"]))}
            for s in base["sites"] if s["site"] in kinds]


def scope_estimate(base: dict[str, Any], scope: str | None) -> tuple[float, float]:
    """The baseline's removable ms (kernel, kernel + gap) for ``scope``: its estimate entry, or,
    for several kinds of a layout with more, the median over steps of their summed copies."""
    est = {e["scope"]: e for e in base.get("estimate", [])}
    if scope is None:
        return 0.0, 0.0
    if scope in est:
        return float(est[scope]["removable_ms"]), float(est[scope]["removable_with_gap_ms"])
    series = base.get("step_series", {})
    kinds = scope_kinds(scope, base)
    kernel = [np.asarray(series.get(f"post_{k}_ms", []), dtype=float) for k in kinds]
    gap = [np.asarray(series.get(f"post_{k}_gap_ms", []), dtype=float) for k in kinds]
    if not kernel or any(len(x) != len(kernel[0]) or not len(x) for x in kernel + gap):
        return 0.0, 0.0
    total = np.sum(kernel, axis=0)
    return float(np.median(total)), float(np.median(total + np.sum(gap, axis=0)))


def _series(run: dict[str, Any], key: str) -> np.ndarray:
    vals = np.asarray(run.get("step_series", {}).get(key, []), dtype=float)
    return vals[np.isfinite(vals)]


def correlation_time(x: np.ndarray) -> float:
    """Integrated autocorrelation time (in steps): 1 + 2 Σ ρ_k over the initial positive lags.

    Consecutive decode steps drift together (clocks, caches), so they are not independent;
    with a correlation time τ the series holds about n/τ independent values."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    if n < 8 or np.std(x) == 0:
        return 1.0
    d = x - x.mean()
    var = float(d @ d)
    tau = 1.0
    for k in range(1, n // 4):
        rho = float(d[:-k] @ d[k:]) / var
        if rho <= 0.05:
            break
        tau += 2.0 * rho
    return tau


def batch_size(*series: np.ndarray) -> int:
    """Batch length for batch means so that batches are close to independent (≥ τ)."""
    tau = max(correlation_time(s) for s in series)
    return 1 if tau < 1.5 else int(math.ceil(tau))


def measure(base: dict[str, Any], cand: dict[str, Any], key: str = "period_ms") -> ShiftResult | None:
    a, b = _series(base, key), _series(cand, key)
    if len(a) < 2 or len(b) < 2:
        return None
    block = batch_size(a, b)
    if min(len(a), len(b)) // block < 2:
        block = max(1, min(len(a), len(b)) // 2)
    return shift_estimate(a, b, block=block)


def _estimator_note(check: dict[str, Any] | None, with_gap: float) -> str:
    """A sentence when the kernel + dispatch-gap estimate fits the measurement better."""
    if not check or check["supported"] != "kernel_plus_gap":
        return ""
    rel = check["estimates"]["kernel_plus_gap"]["rel_error"]
    where = "lies in the CI" if check["estimates"]["kernel_plus_gap"]["in_ci"] else "is the closer one"
    off = f", {rel:+.1%} off the measured saving" if rel is not None else ""
    return (f" The kernel + dispatch-gap estimate ({with_gap:.3f} ms{off}) {where}: in graph replay a "
            "removed copy also takes its dispatch gap with it.")


def _timing_comparison(paths: tuple[str, ...] | list[str], kernel: float, with_gap: float) -> dict[str, Any] | None:
    """The replica's interleaved timing of this very pair, when both run dirs carry it."""
    from copyprof.analysis.replica_timing import load_timing, timing_shift, timing_summary

    tb, tc = load_timing(paths[0]), load_timing(paths[1])
    if tb is None or tc is None or not np.array_equal(tb["_base"], tc["_base"]):
        return None  # not the same timed pair
    shift = timing_shift(tb)
    out = timing_summary(tb)
    mde = shift.mde_ms()
    out["mde_ms"] = mde if math.isfinite(mde) else None
    if kernel > 0:
        out["estimator"] = estimator_check(kernel, with_gap, shift)
        out["verdict"] = (verdict(kernel, shift, mde, shift.steps_needed(kernel), unit="blocks")
                          + _estimator_note(out["estimator"], with_gap))
    return out


def compare_runs(base: dict[str, Any], cand: dict[str, Any], paths: tuple[str, ...] | list[str]) -> dict[str, Any]:
    scope, scope_text = removed_scope(base, cand)
    kernel, with_gap = scope_estimate(base, scope)
    shift = measure(base, cand, "period_ms")
    span = measure(base, cand, "span_ms")
    timing = _timing_comparison(paths, kernel, with_gap)
    client = client_comparison(paths, kernel)
    out: dict[str, Any] = {
        "baseline": 0, "candidate": 1,
        "scope": scope, "scope_text": scope_text,
        "estimate_ms": {"kernel": kernel, "kernel_plus_gap": with_gap},
        "site_changes": site_changes(base, cand),
        "removed_sites": _removed_sites(base, scope_kinds(scope, base)),
        "timing": timing,
        "client": client,
    }
    if shift is None:
        out.update(measured_ms=None, ci95_ms=None, noise_ms=None, mde_ms=None, steps_needed=None,
                   verdict="not measurable: each arm needs at least 2 decode steps with a period")
        return out
    mde = shift.mde_ms()
    need = shift.steps_needed(kernel) if kernel > 0 else None
    lo, hi = shift.saving_ci95_ms
    out.update(
        measured_ms=shift.saving_ms,
        ci95_ms=[lo, hi],
        noise_ms=shift.noise_ms,
        mde_ms=mde if math.isfinite(mde) else None,
        steps_needed=need,
        n_steps={"baseline": shift.n_baseline, "candidate": shift.n_candidate},
        method=shift.method,
        verdict=verdict(kernel, shift, mde, need),
        estimator=estimator_check(kernel, with_gap, shift) if kernel > 0 else None,
    )
    out["verdict"] += _estimator_note(out["estimator"], with_gap)
    if span is not None:
        out["gpu_span"] = {"measured_ms": span.saving_ms, "ci95_ms": list(span.saving_ci95_ms),
                           "noise_ms": span.noise_ms}
        if kernel > 0:
            out["gpu_span"]["estimator"] = estimator_check(kernel, with_gap, span)
    return out
