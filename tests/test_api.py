"""copyprof.api: the commands' pipeline from Python, on real vLLM captures of the corpus.

What is pinned: ``analyze`` gives the report the CLI's JSON shows (the same object, field by
field), with the roles the ground truth (corpus/truth, read without copyprof) states;
``compare`` is a pure function of two arms' reports and agrees with ``copyprof report A B``;
bad input raises the one error type with the message the CLI shows.
"""
from __future__ import annotations

import json

import pytest

from copyprof import api
from tests.conftest import cli_json
from tests.corpus.conftest import model_path, run_named, run_path, truth

BASE = run_named("olmo-hybrid-8l-c16-eager-baseline")
DIRECT = run_named("olmo-hybrid-8l-c16-eager-direct")


@pytest.fixture(scope="module")
def reports():
    return api.analyze(run_path(BASE), model=model_path(BASE)), api.analyze(run_path(DIRECT), model=model_path(DIRECT))


def test_analyze_counts_what_the_truth_says(reports):
    base, _ = reports
    want = sum(truth(BASE)["by_role"]["post-projection"].values())  # 6 GDN output copies per step
    assert base.per_step.post_proj["total"] == want
    assert base.per_step.copies == truth(BASE)["copies_per_step"]
    # the same object the CLI writes as runs[0] (the CLI adds nothing to a single run's analysis)
    cli = cli_json("report", run_path(BASE), "--model", model_path(BASE))["runs"][0]
    mine = json.loads(json.dumps(base.to_json()))
    assert {k: mine[k] for k in ("per_step", "sites", "candidates", "steps")} == \
        {k: cli[k] for k in ("per_step", "sites", "candidates", "steps")}


def test_compare_is_the_cli_ab(reports):
    base, cand = reports
    ab = api.compare([base], [cand])
    cli = cli_json("report", run_path(BASE), run_path(DIRECT), "--model", model_path(BASE))["comparison"]
    assert ab.to_json()["estimate_ms"] == cli["estimate_ms"]
    assert [m.name for m in ab.measures] == [m["name"] for m in cli["measures"]]
    # the direct-return patch removed the 6 post-projection copies: one group, gone
    gone = [g for g in ab.group_changes if g.role == "post-projection"]
    assert len(gone) == 1 and gone[0].status == "gone" and gone[0].baseline_per_step == 6
    # one boot per arm: no interval between boots is claimed
    assert ab.replication == "boots" and all(m.key in ("unmeasured", "descriptive") for m in ab.measures)


def test_a_layout_can_be_given_as_an_object_and_bad_input_raises(reports):
    layout = api.layout(model_path(BASE))
    again = api.analyze(run_path(BASE), model=layout)
    assert again.per_step.post_proj == reports[0].per_step.post_proj
    with pytest.raises(api.CopyprofError, match="at least one run in each arm"):
        api.compare([], [reports[1]])
    with pytest.raises(api.CopyprofError, match="no such file"):
        api.read("/nonexistent/trace.json")


def test_read_gives_the_event_table_as_a_dataframe_and_as_columns():
    """The documented contract of ``api.read``: ``trace.events`` is a pandas DataFrame (for a
    library user), ``trace.table`` the Columns the analysis reads; they hold the same rows."""
    import numpy as np
    import pandas as pd

    from copyprof.columns import Categorical, Columns
    from copyprof.events import COLUMNS

    trace = next(t for t in api.read(run_path(BASE)) if t.meta.role == "rank")
    frame, table = trace.events, trace.table
    assert isinstance(frame, pd.DataFrame) and isinstance(table, Columns)
    assert list(frame.columns) == list(table.names) == list(COLUMNS) and len(frame) == len(table) > 0
    assert isinstance(frame["name"].dtype, pd.CategoricalDtype) and isinstance(table["name"], Categorical)
    assert frame["name"].astype(str).tolist() == table["name"].strings().tolist()
    assert np.array_equal(frame["start_ns"].to_numpy(), table["start_ns"])
