"""Baseline vs candidate: what copies the candidate removed, and what an A/B measured.

Sign convention (matches analysis/stats.py): savings are baseline − candidate, positive when
the candidate is faster. ``estimate_ms`` comes from the baseline's census for the scope the
candidate actually removed (24 MLA copies gone and 69 KDA left → scope "mla"); the measured
effect is the Hodges–Lehmann shift of the per-step periods with a rank-based 95 % interval.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from copyprof.analysis.client_metrics import client_comparison
from copyprof.analysis.stats import ShiftResult, shift_estimate
from copyprof.analysis.verdict import estimator_check, verdict

POST_SITES = ("mla", "kda", "post-proj")


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
        post = s["site"] in POST_SITES or (post_keys is not None and site_key(s) in post_keys)
        key = ("post-proj" if post else s["site"], *site_key(s))
        out[key] = out.get(key, 0.0) + float(s["per_step"])
    return out


def post_keys(base: dict[str, Any]) -> set[tuple[int, str]]:
    return {site_key(s) for s in base["sites"] if s["site"] in POST_SITES}


def removed_scope(base: dict[str, Any], cand: dict[str, Any]) -> tuple[str | None, str]:
    """Which post-projection copies the candidate no longer makes: "all", "mla", "kda", None."""
    b = base["per_step"]["post_proj"]
    hb, hc = base["per_step"].get("host_copies"), cand["per_step"].get("host_copies")
    if hb is not None and hc is not None:
        return None, (f"CPU-only traces: {hb} → {hc} `aten::copy_` ops per step ({hb - hc} fewer in the candidate); "
                      "device copies need a GPU trace")
    if not base.get("layout") or b["total"] == 0:
        return None, "the baseline has no attributed post-projection copies (give --model, or check the baseline build)"
    left = round(sum(v for (fam, _, _), v in _site_counts(cand, post_keys(base)).items() if fam == "post-proj"))
    if left == b["total"]:
        return None, f"all {b['total']} post-projection copies still there: the candidate removed none"
    if left == 0:
        return "all", f"all {b['total']} post-projection copies gone ({b['mla']} MLA + {b['kda']} KDA)"
    if left == b["kda"]:
        return "mla", f"{b['mla']} MLA post-projection copies gone, {b['kda']} KDA still there"
    if left == b["mla"]:
        return "kda", f"{b['kda']} KDA post-projection copies gone, {b['mla']} MLA still there"
    return None, f"post-projection copies per step changed from {b['total']} to {left}: matches no patch scope"


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


def _removed_sites(base: dict[str, Any], scope: str | None) -> list[dict[str, Any]]:
    if scope is None:
        return []
    kinds = ("mla", "kda") if scope == "all" else (scope,)
    out = []
    for s in base["sites"]:
        if s["site"] in kinds:
            out.append({"bytes": int(s["bytes"]), "layer_kind": s["site"], "per_step": int(round(s["per_step"]))})
    return out


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
    est = {e["scope"]: e for e in base.get("estimate", [])}
    kernel = float(est[scope]["removable_ms"]) if scope in est else 0.0
    with_gap = float(est[scope]["removable_with_gap_ms"]) if scope in est else 0.0
    shift = measure(base, cand, "period_ms")
    span = measure(base, cand, "span_ms")
    timing = _timing_comparison(paths, kernel, with_gap)
    client = client_comparison(paths, kernel)
    out: dict[str, Any] = {
        "baseline": 0, "candidate": 1,
        "scope": scope, "scope_text": scope_text,
        "estimate_ms": {"kernel": kernel, "kernel_plus_gap": with_gap},
        "site_changes": site_changes(base, cand),
        "removed_sites": _removed_sites(base, scope),
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
