"""Words a report may use are the ones its trace supports, and bad input is named, not guessed.

Each test pins one defect a new user met (public samples from ../shared/sample_traces, the
real vLLM captures in corpus/, the shipped replica pair in traces/) to its fixed behaviour:
- a training trace's ProfilerSteps are "steps", and its DDP world size is no TP degree;
- the launch-bound note names kineto's rocprofiler-sdk cost only for a kineto trace;
- --all-steps is suggested only where steps other than decode steps exist;
- a cut GPU trace is "partly read" with exit 2, never "a CPU-only trace" with exit 0;
- a folder with a pyproject.toml and no trace is "no trace found", not "invalid JSON";
- an empty --model is refused; --plot never replaces a file without --force;
- piped inspect output has no console-wide rule; help texts are whole and current;
- the shipped replica pair's report opens with its headline, no warning first, and no verdict key
  leaks as words; an eager capture's estimate counts no dispatch gap.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES, cli_json, run_cli

A100 = SAMPLES / "kineto_cupti_a100_cudagraph_rank0.json.gz"  # HTA's DLRM-style training trace, 16 ranks
B200 = SAMPLES / "kineto_cupti_b200_eager.json.gz"  # a vLLM prefill step: one step, not a decode one
ROCPROF_908 = SAMPLES / "rocprofv3_json_gfx950_mi350x_908_results.json.gz"  # training, no step marks
T = REPO / "traces"
C16 = (str(T / "replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261130T042336Z"),
       str(T / "replica-kimi-k3-tp8-c16-cuda-graph-candidate-20261130T042336Z"))
CORPUS = REPO / "corpus"


def _needs(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path.name} is not here (../shared is not checked out)")


def _one_line_error(proc, fragment: str) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("copyprof: error:") and "Traceback" not in proc.stderr, proc.stderr
    assert fragment in lines[0], lines[0]
    return lines[0]


def test_a_training_trace_has_steps_and_a_world_size_not_decode_steps_and_tp():
    _needs(A100)
    text = run_cli("report", str(A100), check=True).stdout
    # ProfilerStep#N ranges of a training loop: no serving engine marked them as decode steps
    assert "per step" in text.splitlines()[0] and "decode step" not in text
    # the trace's distributedInfo says world_size 16 (a DDP job): that is no tensor-parallel degree
    assert "world size 16" in text and "TP 16" not in text
    d = cli_json("report", str(A100))
    assert d["runs"][0]["setup"]["tp"] is None and d["runs"][0]["setup"]["world_size"] == 16


def test_a_rocprofv3_csv_is_not_warned_about_kineto():
    # the launch-bound note's clause on kineto over rocprofiler-sdk applies to kineto traces only
    text = run_cli("report", str(REPO / "tests" / "data" / "rocprofv3" / "gen3"), check=True).stdout
    assert "graph-launch calls hold up the GPU" in text  # the note itself applies (launch-bound steps)
    assert "kineto" not in text.lower()
    # each message once: the inferred-steps warning is not repeated as a note
    assert text.count("graph launches is taken as one step") == 1


def test_all_steps_is_suggested_only_where_other_steps_exist():
    _needs(B200)
    # one prefill step and no decode step: --all-steps would count that one step, so it is offered
    assert "--all-steps counts the 1 other step(s)" in run_cli("report", str(B200), check=True).stdout
    _needs(ROCPROF_908)
    # no step at all: --all-steps cannot help and is not suggested
    text = run_cli("report", str(ROCPROF_908), check=True).stdout
    assert "no steps were found" in text and "--all-steps" not in text


def test_a_cut_gpu_trace_is_partly_read_not_cpu_only(tmp_path):
    _needs(B200)
    cut = tmp_path / "cut.json"
    whole = gzip.decompress(B200.read_bytes())
    # 5 KB into the event array: the device properties, then a few CPU events and no GPU one
    cut.write_bytes(whole[:whole.index(b'"traceEvents"') + 5_000])
    line = _one_line_error(run_cli("report", str(cut)), "partly read (the JSON document ends before its event array")
    assert "holds no GPU event" in line and "CPU-only" not in line


def test_a_folder_without_a_trace_says_so(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    line = _one_line_error(run_cli("report", str(tmp_path)), f"no trace found in {tmp_path} (looked at 1 file(s)")
    assert "JSON" not in line.split("(looked at", 1)[0]  # not "invalid JSON in the event array"


def test_an_empty_model_is_refused():
    _one_line_error(run_cli("report", C16[0], "--model", ""), "--model")


def test_plot_never_replaces_a_file_without_force(tmp_path):
    plot = tmp_path / "mine.png"
    plot.write_bytes(b"a user's own figure")
    _one_line_error(run_cli("report", *C16, "--plot", str(plot)), "exists; give another --plot file or --force")
    assert plot.read_bytes() == b"a user's own figure"
    run_cli("report", *C16, "--plot", str(plot), "--force", check=True)
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_piped_inspect_has_no_console_wide_rule():
    _needs(A100)
    text = run_cli("inspect", str(A100), check=True).stdout
    # a rule as wide as the widest kernel name was 29,830 characters; rules now fit a terminal
    rules = [ln for ln in text.splitlines() if ln and set(ln.strip()) <= set("─━═-")]
    assert all(len(ln) <= 200 for ln in rules), max(map(len, rules))


def test_help_texts_are_whole_and_current():
    top = run_cli("--help", check=True).stdout.split("Commands:", 1)[1]
    assert "..." not in top  # click cuts a short help at 45 characters with "..."
    report = run_cli("report", "--help", check=True).stdout
    flat = " ".join(report.split())
    assert "MLA/KDA attribution" not in flat
    assert "kimi-k3" in flat and "run.json" in flat  # the presets and the default layout are named
    for cmd in ("inspect", "report", "models", "annotate", "run"):
        text = run_cli(cmd, "--help", check=True).stdout.split("Options:")[0]
        assert "..." not in text.split("\n", 1)[1], cmd  # the usage line's "[ARGS]..." is click's own


def test_the_quick_start_report_opens_with_its_headline_and_no_verdict_key_leaks():
    text = run_cli("report", *C16, check=True).stdout
    head = text.splitlines()[0]
    assert len(head) <= 300 and head.count(". ") <= 1
    # the arm sections do not open with a launch-bound warning: it is a note about step periods
    for arm in ("baseline", "candidate"):
        section = text.split(f"== {arm}", 1)[1].splitlines()[1:4]
        assert not any(ln.startswith("warning:") for ln in section), section
    md = run_cli("report", *C16, "--format", "markdown", check=True).stdout
    for key in ("none none", "none-none", "not-resolvable", "none-measured"):
        assert key not in text and key not in md, key
    # the headline's copy count is the tables' count: 93 post-projection copies per step gone
    assert "all 93 post-projection copies gone" in head
    d = cli_json("report", *C16)
    assert sum(v for k, v in d["runs"][0]["per_step"]["post_proj"].items() if k != "total") == 93


def test_an_eager_estimate_counts_no_dispatch_gap():
    runs = {r["name"]: r for r in json.loads((CORPUS / "runs.json").read_text())["runs"]}
    base = next(n for n in runs if n.startswith("kimi-linear-12l-c16-eager-baseline"))
    cand = next(n for n in runs if n.startswith("kimi-linear-12l-c16-eager-direct"))
    d = cli_json("report", str(CORPUS / "runs" / base), str(CORPUS / "runs" / cand),
                 "--model", str(CORPUS / "models" / runs[base]["model"]))
    est = d["comparison"]["estimate_ms"]
    # eager: the gap before a copy is host launch latency, which a removal does not give the GPU
    assert est["kernel"] > 0 and est["kernel_plus_gap"] == est["kernel"]
    assert all(not c["gap_counts"] for c in d["runs"][0]["candidates"])


def test_steps_of_copies_alone_are_counted_with_a_layout():
    # the replica's copies-only capture: steps hold copies and no kernel, so no copy has a
    # structural op after it; with a model layout that is a step without layers, not a crash
    run = str(T / "copies-cuda-graph-20261130T042751Z")
    proc = run_cli("report", run, "--model", "kimi-k3")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "no post-projection copies in this capture" in proc.stdout.splitlines()[0]
