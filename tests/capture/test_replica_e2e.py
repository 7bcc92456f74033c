"""The replica on the CPU end to end, `copyprof run --engine replica` → `report`.

Kimi-Linear-48B has 27 layers, so the baseline makes exactly 27 more `aten::copy_` host ops per
step than the candidate (one post-projection copy per layer; the KDA placement copies are in
both arms). A CPU trace has no device timeline, so the report counts host copy ops and says so.
"""
from __future__ import annotations

import pytest

from tests.conftest import run_cli


@pytest.mark.slow
def test_replica_cpu_run_then_report(tmp_path):
    pytest.importorskip("torch")  # here, not at the top: importing torch costs every xdist worker 2.4 s at collection
    # The smallest window and timing that still exercise everything below (several steps, >= 2
    # timing blocks, the pair's timing.json), over a 32-token context: what is counted (copies per
    # layer) does not depend on the context's length, and a CPU step over the default 4,096 tokens
    # of MLA context costs seconds.
    proc = run_cli("run", "--engine", "replica", "--model", "kimi-linear-48b-a3b", "--tp", "8",
                   "--concurrency", "4", "--device", "cpu", "--arm", "both", "--steps", "3",
                   "--timing-blocks", "2", "--timing-replays", "1", "--warmup", "1", "--context", "32", "--out", str(tmp_path), check=True)
    dirs = [line for line in proc.stdout.splitlines() if line.strip()]
    base = next(d for d in dirs if "-baseline-" in d)
    cand = next(d for d in dirs if "-candidate-" in d)
    import json

    out = json.loads(run_cli("report", base, cand, "--model", "kimi-linear-48b-a3b", "--format", "json",
                             check=True).stdout)
    b, c = out["runs"]
    assert b["steps"]["decode"] == 3 and c["steps"]["decode"] == 3
    assert b["steps"]["rule"].startswith("cpu-annotation")
    assert b["per_step"]["host_copies"] - c["per_step"]["host_copies"] == 27
    assert any("no device copies can exist" in n for n in b["notes"])
    assert "27 fewer in the candidate" in out["comparison"]["scope_text"]
    assert out["comparison"]["timing"]["blocks"] == 2  # the interleaved timing travelled with the pair
