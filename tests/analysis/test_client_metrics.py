"""Client TPOT in an A/B: requests are the observations, so few requests resolve little.

The vLLM PR #50847 A/B had 8 requests per arm (median TPOT 25.53 vs 25.75 ms) against an
estimated 0.13 ms/step. With request-to-request noise of ~0.3 ms, 8 requests cannot resolve
0.13 ms: the verdict must say so and say how many requests would.
"""
from __future__ import annotations

import json

import numpy as np

from copyprof.analysis.ab.client_metrics import client_comparison


def _run_dir(path, tpots):
    path.mkdir()
    per_request = [{"index": i, "tpot_ms": float(t), "itl_ms": []} for i, t in enumerate(tpots)]
    (path / "client_metrics.json").write_text(json.dumps({"unit": "ms", "per_request": per_request}))
    return str(path)


def test_eight_requests_cannot_resolve_a_tenth_of_a_millisecond(tmp_path):
    rng = np.random.default_rng(7)
    base = _run_dir(tmp_path / "a", 25.53 + rng.normal(0, 0.3, 8))
    cand = _run_dir(tmp_path / "b", 25.40 + rng.normal(0, 0.3, 8))
    result = client_comparison([base, cand], estimate_ms=0.13)
    assert result is not None
    shift, out = result
    assert (shift.n_baseline, shift.n_candidate) == (8, 8)
    assert out["requests"] == {"baseline": 8, "candidate": 8}
    assert out["mde_ms"] > 0.13  # noise 0.3 ms with 8 per arm: MDE ~0.45 ms
    assert out["requests_needed"] > 8
    assert out["verdict"].startswith("not resolvable with this sample")
    assert "requests" in out["verdict"]


def test_missing_metrics_means_no_client_comparison(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    assert client_comparison([str(a), str(a)], 0.1) is None
