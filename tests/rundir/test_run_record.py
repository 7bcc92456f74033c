"""run.json as the typed run record: both shapes in the field read, a record round-trips, a bad
file is a one-line error naming it, and keys from a newer copyprof are tolerated.

The expected values are read from the JSON text itself (``json.loads``), not from the loader, so
the loader is checked against the file rather than against itself.
"""
from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from copyprof.analysis.setup import run_setup
from copyprof.errors import CopyprofError
from copyprof.readers.discover import discover
from copyprof.rundir.layout import recorded_model, recorded_model_name, update_run_json, write_run_json
from copyprof.rundir.record import (
    UNSET,
    AbTag,
    Model,
    ReplicaProfiler,
    RunRecord,
    Torch,
    given,
    load_run_record,
    record_json,
)
from tests.conftest import REPO

VLLM_RUN = REPO / "corpus" / "runs" / "olmo-hybrid-8l-c16-eager-baseline-20261201T193456Z"
REPLICA_RUN = REPO / "traces" / "replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261130T042336Z"
SHIPPED = sorted(p.parent for p in [*(REPO / "corpus" / "runs").glob("*/run.json"), *(REPO / "traces").glob("*/run.json")])


def _raw(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text(encoding="utf-8"))


def test_a_vllm_run_of_the_corpus_loads() -> None:
    raw = _raw(VLLM_RUN)
    rec = load_run_record(VLLM_RUN)
    assert rec.engine == raw["engine"] == "vllm" and rec.status == raw["status"] == "complete"
    assert rec.label == raw["label"] and rec.command == raw["command"]
    assert (rec.tp, rec.concurrency, rec.steps, rec.profiler) == (raw["tp"], raw["concurrency"], raw["steps"],
                                                                 raw["profiler"])
    assert isinstance(rec.model, Model) and rec.model.name == raw["model"]["name"] == "olmo-hybrid-8l"
    assert rec.model.kind == raw["model"]["kind"] and rec.model.hidden_size == raw["model"]["hidden_size"]
    assert isinstance(rec.torch, Torch)
    assert (rec.torch.version, rec.torch.hip, rec.torch.cuda) == (raw["torch"]["version"], raw["torch"]["hip"],
                                                                 raw["torch"]["cuda"])
    assert rec.vllm is not UNSET and rec.vllm.version == raw["vllm"]["version"]
    assert rec.gpu is not UNSET and rec.gpu is not None and rec.gpu.name == raw["gpu"]["name"]
    assert rec.ab is None and raw["ab"] is None  # not an A/B: null, and not absent
    assert rec.server is not UNSET and rec.server.argv == raw["server"]["argv"]
    assert rec.window is not UNSET and rec.window.tokens_at_stop_profile == raw["window"]["tokens_at_stop_profile"]
    assert rec.workload is not UNSET and rec.workload.max_tokens == raw["workload"]["max_tokens"]
    assert rec.completeness == raw["completeness"] and rec.env == raw["env"] and rec.probe == raw["probe"]
    assert rec.device is UNSET and given(rec.device) is None  # a replica field: this record does not have it


def test_a_replica_run_of_traces_loads_with_its_flat_torch_fields_normalised() -> None:
    raw = _raw(REPLICA_RUN)
    assert "torch" not in raw and raw["torch_version"]  # the replica's own shape
    rec = load_run_record(REPLICA_RUN)
    assert rec.engine == raw["engine"] == "replica" and rec.arm == raw["arm"] == "baseline"
    assert rec.torch == Torch(version=raw["torch_version"], hip=None, cuda=raw["cuda_version"])
    assert rec.torch_version == raw["torch_version"] and rec.cuda_version == raw["cuda_version"]  # kept as written
    assert rec.profiler == ReplicaProfiler(**raw["profiler"])
    assert rec.device is not UNSET and rec.device.name == raw["device"]["name"]
    assert rec.device.capability == raw["device"]["capability"] and rec.device.cpu_count is UNSET
    assert rec.model is not UNSET and rec.model.layers == raw["model"]["layers"]
    assert rec.model.mla_layers == raw["model"]["mla_layers"] and rec.model.kda_layers == raw["model"]["kda_layers"]
    assert rec.model.layer_kinds == raw["model"]["layer_kinds"] and rec.model.hf_id == raw["model"]["hf_id"]
    assert "kinds" not in raw["model"] and rec.model.kinds is UNSET  # written by later replicas only
    assert rec.pair == raw["pair"] and given(rec.arms) == raw.get("arms")
    assert rec.expected_copies_per_step == raw["expected_copies_per_step"]
    assert rec.rank_shapes == raw["rank_shapes"] and rec.replica_bytes == raw["replica_bytes"]
    setup = run_setup({"run": raw}, device="H200", tokens=16, graph_launches=32, layout_name=None, dtype_bytes=2)
    assert setup.torch_version == raw["torch_version"] and setup.cuda_runtime == raw["cuda_version"]
    assert setup.engine == "replica" and setup.graph_mode == "graph" and setup.arm == "baseline"


@pytest.mark.parametrize("run_dir", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_run_round_trips(tmp_path: Path, run_dir: Path) -> None:
    """Read, write, read: the same record, and the file keeps every key and value it had."""
    rec = load_run_record(run_dir)
    write_run_json(tmp_path, rec)
    assert load_run_record(tmp_path) == rec
    raw, again = _raw(run_dir), _raw(tmp_path)
    assert {k: again[k] for k in raw} == raw
    assert set(again) - set(raw) <= {"torch"}  # the flat shape gains the nested torch versions


def test_a_written_record_keeps_its_nulls_and_leaves_out_what_it_lacks(tmp_path: Path) -> None:
    rec = RunRecord(engine="vllm", status="starting", finished=None, ab=None, pair=None,
                    model=Model(name="m", hf_id=None))
    write_run_json(tmp_path, rec)
    assert _raw(tmp_path) == {"engine": "vllm", "status": "starting", "model": {"name": "m", "hf_id": None},
                              "ab": None, "finished": None, "pair": None}
    assert record_json(rec) == _raw(tmp_path)
    tag = AbTag(group="g", arm="baseline", repeat=1, position=2, runs=4, arms={"baseline": "/p"},
                order=["baseline", "candidate"], interleaved=True)
    update_run_json(tmp_path, ab=tag, status="capturing")
    assert load_run_record(tmp_path) == msgspec.structs.replace(rec, ab=tag, status="capturing")
    assert _raw(tmp_path)["ab"] == {"group": "g", "arm": "baseline", "repeat": 1, "position": 2, "runs": 4,
                                    "arms": {"baseline": "/p"}, "order": ["baseline", "candidate"],
                                    "interleaved": True}


@pytest.mark.parametrize("doc, field", [({"tp": "eight"}, "tp"), ({"model": {"name": 3}}, "model.name"),
                                        ({"window": {"cohort_retries": [{"attempt": "1"}]}},
                                         "window.cohort_retries[0].attempt"),
                                        ({"ab": {"group": "g", "position": [1]}}, "ab.position")])
def test_a_field_of_the_wrong_type_is_one_line_naming_the_file_and_the_field(tmp_path: Path, doc: dict,
                                                                               field: str) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"status": "complete", **doc}))
    with pytest.raises(CopyprofError) as err:
        load_run_record(tmp_path)
    text = str(err.value)
    assert "\n" not in text and str(tmp_path / "run.json") in text and f"`{field}`" in text, text


@pytest.mark.parametrize("content, words", [("{", "not valid JSON"), ("[1, 2]", "does not hold a JSON object"),
                                            ('"complete"', "does not hold a JSON object")])
def test_a_file_that_is_no_record_is_one_line_naming_it(tmp_path: Path, content: str, words: str) -> None:
    (tmp_path / "run.json").write_text(content)
    with pytest.raises(CopyprofError) as err:
        load_run_record(tmp_path)
    text = str(err.value)
    assert "\n" not in text and str(tmp_path / "run.json") in text and words in text, text


def test_a_missing_file_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(CopyprofError, match="no run.json"):
        load_run_record(tmp_path)


def test_unknown_keys_of_a_newer_copyprof_are_tolerated(tmp_path: Path) -> None:
    raw = _raw(VLLM_RUN)
    raw["from_the_future"] = {"anything": [1, 2]}
    raw["model"]["new_model_fact"] = "x"
    raw["server"]["new_server_fact"] = 1
    (tmp_path / "run.json").write_text(json.dumps(raw))
    assert load_run_record(tmp_path) == load_run_record(VLLM_RUN)


def test_the_readers_take_the_record(tmp_path: Path) -> None:
    """The default --model, and the words for a run directory that holds no trace."""
    assert recorded_model_name(str(REPLICA_RUN)) == "kimi-k3" and recorded_model(str(REPLICA_RUN)) == "kimi-k3"
    failed = tmp_path / "failed"
    failed.mkdir()
    (failed / "run.json").write_text(json.dumps({"status": "failed: server exited\n  during boot"}))
    with pytest.raises(CopyprofError, match=r"the capture did not complete \(run.json: failed: server exited during"):
        discover([str(failed)])
    (failed / "run.json").write_text(json.dumps({"status": 3}))  # unreadable as a record: the plain message
    with pytest.raises(CopyprofError, match="no trace found in"):
        discover([str(failed)])
    assert recorded_model(str(failed)) is None and recorded_model_name(str(failed)) is None
