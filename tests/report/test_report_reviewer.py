"""Reports a reviewer can trust at a glance, on the real H200 captures in traces/.

What is pinned, and why:
- every format opens with the same headline, which names the measure that resolves the
  effect best (the shipped replica pair: replica timing, MDE ~0.003 ms, resolves what the step
  period cannot) and the verdict's words;
- arms that differ in more than the patch (C16 vs C24) are called not comparable, first;
- text output never cuts a number, however it is piped;
- markdown is a self-contained PR attachment read in ten seconds (a summary, the rest folded); CSV is tidy and plain; JSON carries the setup;
- ``--model`` defaults to the model run.json records, ``--debug`` works after the subcommand.
"""
from __future__ import annotations

import csv
import io
import json
import re

import pytest

from copyprof import __version__
from tests.conftest import REPO, cli_json, run_cli

T = REPO / "traces"
C16 = (str(T / "replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261130T042336Z"),
       str(T / "replica-kimi-k3-tp8-c16-cuda-graph-candidate-20261130T042336Z"))
C24_CANDIDATE = str(T / "replica-kimi-k3-tp8-c24-cuda-graph-candidate-20261130T042519Z")


def report(*args: str, fmt: str) -> str:
    return run_cli("report", *args, "--format", fmt, check=True).stdout


@pytest.fixture(scope="module")
def pair_json() -> dict:
    return cli_json("report", *C16)


def test_headline_names_the_best_measure_and_opens_every_format(pair_json):
    head = pair_json["headline"]
    cmp = pair_json["comparison"]
    # replica timing: 40 interleaved blocks per arm, MDE in microseconds; the step period (31 steps
    # of ~1 ms noise) cannot resolve 0.1 ms — the headline must quote the one that can
    assert cmp["best_measure"] == "replica timing"
    best = next(m for m in cmp["measures"] if m["name"] == "replica timing")
    period = next(m for m in cmp["measures"] if m["name"] == "step period")
    assert best["mde_ms"] < 0.01 < period["mde_ms"] and best["resolved"] and not period["resolved"]
    assert head.startswith("candidate vs baseline: all 93 post-projection copies gone (24 MLA + 69 KDA).")
    # two sentences: what changed, then the one measure the verdict rests on with its share of the step
    assert f"Replica timing saving {best['measured_ms']:.3f}"[:-1] in head and "% of the step" in head
    assert head.count(". ") == 1 and len(head) <= 300
    assert cmp["comparable"] is True and cmp["mismatch"] == []
    table = report(*C16, fmt="table")
    markdown = report(*C16, fmt="markdown")
    rows = list(csv.reader(io.StringIO(report(*C16, fmt="csv"))))
    assert table.splitlines()[0] == head
    assert markdown.splitlines()[2] == f"**{head}**"
    assert rows[1] == ["headline", "headline", "", head, ""]


def test_arms_with_different_tokens_per_step_are_not_comparable():
    out = cli_json("report", C16[0], C24_CANDIDATE)
    cmp = out["comparison"]
    assert cmp["comparable"] is False
    assert "tokens per step: 16 vs 24" in cmp["mismatch"]
    assert cmp["verdict"].startswith("not comparable (")
    assert all(m["verdict"].startswith("not comparable (") for m in cmp["measures"])
    assert "NOT COMPARABLE (tokens per step: 16 vs 24)" in out["headline"]
    table = report(C16[0], C24_CANDIDATE, fmt="table")
    assert "NOT COMPARABLE" in table.splitlines()[0]


def test_piped_text_never_cuts_a_number():
    text = report(*C16, fmt="table")
    assert "…" not in text
    # numbers that used to end in "…" at 80 columns: sizes, p10-p90 ranges, bounds
    assert "229,376" in text and "(0.028–0.029)" in text and "launch/latency" in text
    for line in text.splitlines():
        assert not line.rstrip().endswith(("…", "...")), line
    inspected = run_cli("inspect", C16[0], check=True).stdout
    assert "…" not in inspected  # not even in kernel names when piped


def test_markdown_is_a_self_contained_attachment():
    md = report(*C16, fmt="markdown")
    assert md.startswith("## copyprof: candidate vs baseline\n")
    # a reviewer's ten seconds: title, headline, one summary table, then everything else folded
    summary, details = md.split("<details>", 1)
    lines = summary.strip().splitlines()
    assert len(lines) <= 25, summary
    rows = {ln.split(" | ")[0].strip("| "): ln for ln in lines if ln.startswith("|")}
    # the summary's rows are the report's own figures: 93 post-projection copies per step gone
    assert rows["post-projection copies / step"].replace(" ", "") == "|post-projectioncopies/step|93|0|"
    # and agree with the headline: the kernel-time estimate and the replica timing's saving it quotes
    head = md.splitlines()[2]
    est = rows["estimated saving, ms/step"].split("|")[3].split()[0]
    timed = next(v for k, v in rows.items() if k.startswith("saving measured by replica timing"))
    assert f"({est} ms estimated)" in head
    assert f"saving {timed.split('|')[3].split(',')[0].strip()} ms" in head
    assert details.rstrip().endswith("</details>")
    setup = md.split("**Setup.**", 1)[1].split("### ", 1)[0]
    # the setup once: what the arms share in one line each, what differs marked; paths relative
    # to the runs' common folder (traces/), never this machine's absolute path
    for fact in ("- device: NVIDIA H200", "- torch: 2.11.0+cu130", "- CUDA runtime: 13.0", "- TP: 8",
                 "- concurrency: 16", "- graph mode: graph", "`replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261130T042336Z`"):
        assert fact in setup, fact
    assert "**(differs)**" in setup.split("- run:", 1)[1].splitlines()[0]
    assert str(T) not in md
    assert f"copyprof {__version__}" in md and "`copyprof report " in md
    assert all(len(ln) <= 200 for ln in md.splitlines()[3:]), "a PR comment is read, not scrolled"
    # the candidate removed every copy: its all-zero estimate table says nothing and is left out
    candidate = md.split("### candidate", 1)[1].split("### A/B", 1)[0]
    assert "Direct-return patch" not in candidate
    assert "Direct-return patch" in md.split("### candidate", 1)[0]
    single = report(C16[0], fmt="markdown")
    # one run: titled by its name (the folder, as no --labels was given), no A/B section
    assert single.startswith("## copyprof: replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261130T042336Z\n")
    assert "### A/B" not in single and "estimated saving" not in single


def test_csv_is_tidy_with_plain_numbers_and_the_ab():
    rows = list(csv.DictReader(io.StringIO(report(*C16, fmt="csv"))))
    assert set(rows[0]) == {"section", "name", "arm", "value", "unit"}
    for r in rows:
        if r["unit"] in ("ms", "copies", "steps", "us", "percent") and r["value"] != "":
            float(r["value"])  # a plain number: no "229,376", no "0.44 %"
    ab = {r["name"]: r["value"] for r in rows if r["section"] == "ab"}
    saving, lo, hi = (float(ab[f"replica_timing.{k}"]) for k in ("saving", "ci95_low", "ci95_high"))
    assert lo < saving < hi and ab["best_measure"] == "replica timing" and ab["comparable"] == "true"
    assert ab["step_period.verdict"].startswith("not resolvable")
    setup = {(r["arm"], r["name"]): r["value"] for r in rows if r["section"] == "setup"}
    assert setup[("baseline", "tp")] == "8" and setup[("candidate", "concurrency")] == "16"


def test_json_run_setup_carries_what_the_text_prints(pair_json):
    setup = pair_json["runs"][0]["setup"]
    assert setup["engine"] == "replica" and setup["tp"] == 8 and setup["concurrency"] == 16
    assert setup["tokens_per_step"] == 16 and setup["graph_mode"] == "graph"
    assert setup["torch_version"] == "2.11.0+cu130" and setup["cuda_runtime"] == "13.0"
    assert setup["device"].startswith("NVIDIA H200") and setup["arm"] == "baseline"


def test_model_defaults_to_the_one_run_json_records(pair_json):
    run = pair_json["runs"][0]
    assert run["layout"]["name"] == "kimi-k3" and run["layout"]["kinds"] == {"mla": 24, "kda": 69}
    assert any("layout kimi-k3 from" in n and "no --model given" in n for n in run["notes"])


def test_debug_is_accepted_after_the_subcommand():
    plain = run_cli("report", "/no/such/trace")
    debug = run_cli("report", "/no/such/trace", "--debug")
    assert plain.returncode == 2 and plain.stderr.strip().count("\n") == 0
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "no such option" not in debug.stderr


def test_grammar_of_counts():
    from copyprof.render.headline import plural

    assert plural(1, "decode step") == "1 decode step" and plural(2, "decode step") == "2 decode steps"
    assert plural(1, "copy") == "1 copy" and plural(3, "copy") == "3 copies"


def test_inspect_says_when_a_list_is_cut(tmp_path):
    # 15 annotation names, 15 copy sizes: the terminal shows 12 of each and says so
    events = [{"ph": "X", "cat": "user_annotation", "name": f"region_{i}", "pid": 1, "tid": 1,
               "ts": 10.0 * i, "dur": 5.0} for i in range(15)]
    events += [{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7,
                "ts": 10.0 * i + 1, "dur": 1.0, "args": {"bytes": 1024 * (i + 1), "device": 0}}
               for i in range(15)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    text = run_cli("inspect", str(path), check=True).stdout
    assert re.search(r"… 3 more copy sizes \(the first 12 shown; --format json lists all\)", text), text
    assert "… 3 more annotation names" in text
    files = cli_json("inspect", str(path))["files"]
    assert len(files[0]["annotations"]) == 15
