"""Runs as the unit of replication on the corpus's real boots (corpus/runs.json "timing" phase).

Expectations come from what the runs are, not from copyprof: the A/A pairs are boots of
identical code (run.json: same A/B group and arm), so no format may call their difference a
change; the ABBA set has two boots per arm, so its intervals are finite."""
from __future__ import annotations

import csv
import io
import json

from click.testing import CliRunner

from copyprof.cli.main import cli
from tests.corpus.conftest import RUNS, model_path, run_path

AA_QWEN = [r for r in RUNS if "qwen3-8l-c24-graph-aa" in r["name"]]
ABBA = [r for r in RUNS if "olmo-hybrid-8l-c16-graph-abba" in r["name"]]


def _out(*args: str, fmt: str) -> str:
    res = CliRunner().invoke(cli, ["report", *args, "--format", fmt], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def test_the_aa_pairs_are_boots_of_one_arm():
    for group in (AA_QWEN, [r for r in ABBA if r["arm"] == "baseline"]):
        abs_ = [json.loads((__import__("pathlib").Path(run_path(r)) / "run.json").read_text())["ab"] for r in group]
        assert len(group) == 2 and len({a["group"] for a in abs_}) == 1 and len({a["arm"] for a in abs_}) == 1


def test_an_aa_compared_as_an_ab_is_never_a_change_in_any_format():
    for group in (AA_QWEN, [r for r in ABBA if r["arm"] == "baseline"]):
        args = (run_path(group[0]), run_path(group[1]), "--model", model_path(group[0]))
        d = json.loads(_out(*args, fmt="json"))
        cmp = d["comparison"]
        assert cmp["replication"] == "boots" and not any(m["resolved"] for m in cmp["measures"])
        assert "Not resolved" in d["headline"] and "saving" not in d["headline"].split(". ", 1)[1][:20]
        rows = list(csv.reader(io.StringIO(_out(*args, fmt="csv"))))
        assert [r[3] for r in rows if r[0] == "ab" and r[1].endswith(".resolved")] and \
            all(r[3] == "false" for r in rows if r[0] == "ab" and r[1].endswith(".resolved"))
        for fmt in ("markdown", "table"):
            text = _out(*args, fmt=fmt)
            assert d["headline"] in text.replace("\n", " ") or d["headline"][:80] in text


def test_an_aa_given_as_such_is_the_setups_noise_floor():
    d = json.loads(_out("--aa", *[run_path(r) for r in AA_QWEN], "--model", model_path(AA_QWEN[0]), fmt="json"))
    cmp = d["comparison"]
    assert cmp["is_aa"] and d["headline"].startswith("A/A (2 boots of the same code): two boots differ by")
    assert "not a change" in d["headline"] and cmp["aa"]["runs"] == 2 and cmp["aa"]["between_runs_sd_ms"] > 0


def test_two_boots_per_arm_give_finite_intervals_on_runs():
    base = [run_path(r) for r in ABBA if r["arm"] == "baseline"]
    cand = [run_path(r) for r in ABBA if r["arm"] == "direct"]
    d = json.loads(_out("--baseline", *base, "--candidate", *cand, "--model", model_path(ABBA[0]), fmt="json"))
    cmp = d["comparison"]
    assert cmp["runs_per_arm"] == {"baseline": 2, "candidate": 2, "aa": 0}
    for m in cmp["measures"]:
        assert m["unit"] == "runs" and None not in m["ci95_ms"] and m["between_runs_sd_ms"] > 0
        assert len(m["run_values_ms"]["baseline"]) == len(m["run_values_ms"]["candidate"]) == 2
    # 6 GDN copies of ~1 µs against boots that differ by a fraction of a millisecond: unresolved
    assert not any(m["resolved"] for m in cmp["measures"]) and "runs per arm would" in d["headline"]


def test_a_folder_of_grouped_runs_is_read_as_its_arms(tmp_path):
    """`copyprof run --repeat 2 --interleave` leaves its runs side by side, each run.json saying
    group and arm; `report FOLDER` takes them as the arms (links: the runs are not copied)."""
    import os

    abba = tmp_path / "abba"
    abba.mkdir()
    for r in ABBA:
        os.symlink(run_path(r), abba / r["name"])
    d = json.loads(_out(str(abba), "--model", model_path(ABBA[0]), fmt="json"))
    assert d["comparison"]["runs_per_arm"]["baseline"] == 2 and d["comparison"]["runs_per_arm"]["candidate"] == 2
    assert any("runs grouped by run.json's ab field" in n for n in d["runs"][0]["notes"])
    aa = tmp_path / "aa"
    aa.mkdir()
    for r in AA_QWEN:
        os.symlink(run_path(r), aa / r["name"])
    assert json.loads(_out(str(aa), "--model", model_path(AA_QWEN[0]), fmt="json"))["headline"].startswith("A/A (2 boots")
