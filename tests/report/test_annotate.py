"""``copyprof annotate``: the census on the timeline, read back by copyprof's own readers.

The H200 Qwen3-Next partial capture (traces/README.md: 36 post-projection + 36 placement copies
per step over 32 steps, 48 layers) is annotated; the file must open as a Kineto trace whose
copies, steps and census are those of the original, with each copy's layer and site in its
args and one slice per layer on the layers track.
"""
from __future__ import annotations

import gzip
import json
from collections import Counter

from tests.conftest import REPO, cli_json, run_cli

RUN = next((REPO / "traces").glob("replica-qwen3-next-80b-a3b-tp4-c16-cuda-graph-partial-*"))


def test_annotated_trace_round_trips(tmp_path):
    out = tmp_path / "annotated.json.gz"
    proc = run_cli("annotate", str(RUN), "--model", "qwen3-next-80b-a3b", "-o", str(out), check=True)
    assert proc.stdout.strip() == str(out)
    doc = json.loads(gzip.decompress(out.read_bytes()))
    events = doc["traceEvents"]
    copies = [e for e in events if "copyprof.site" in e.get("args", {})]
    assert len(copies) == 32 * 72
    sites = Counter((e["args"]["copyprof.site"], e["args"]["copyprof.kind"]) for e in copies)
    assert sites == {("linear_attention", "linear_attention"): 32 * 36, ("placement", "linear_attention"): 32 * 36}
    layers = [e for e in events if e.get("name", "").startswith("layer ")]
    assert len(layers) == 32 * 48 and {e["args"]["copyprof.layer"] for e in layers} == set(range(1, 49))
    assert Counter(e["name"].split(" (")[1] for e in layers) == {"linear-attention)": 32 * 36, "full-attention)": 32 * 12}
    # copyprof reads it back: same copies, same steps, same census.
    inspect = cli_json("inspect", str(out))["files"][0]
    assert inspect["d2d_copies"] == 32 * 72 and inspect["annotations"]["execute_context_0(0)_generation_16(16)"] == 32
    [run] = cli_json("report", str(out), "--model", "qwen3-next-80b-a3b")["runs"]
    assert run["steps"]["decode"] == 32
    assert run["per_step"]["post_proj"] == {"full_attention": 0, "linear_attention": 36, "total": 36}


def test_annotate_never_overwrites_and_names_the_problem(tmp_path):
    out = tmp_path / "a.json.gz"
    out.write_bytes(b"precious")
    proc = run_cli("annotate", str(RUN), "-o", str(out))
    assert proc.returncode == 2 and "exists" in proc.stderr and out.read_bytes() == b"precious"
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    proc = run_cli("annotate", str(RUN), "-o", str(tmp_path / "missing" / "a.json.gz"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    proc = run_cli("annotate", str(RUN), "-o", str(tmp_path / "a.txt"))
    assert proc.returncode == 2 and ".json" in proc.stderr
