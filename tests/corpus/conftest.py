"""The real-vLLM corpus (corpus/): each run analysed once per test session, and its truth.

Truth files are written by corpus/truth/label.py from a standard-library reading of each trace
(corpus/truth/extract.py) and rules taken from the vLLM source; nothing here derives an
expectation from copyprof's own output.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
RUNS: list[dict[str, Any]] = json.loads((CORPUS / "runs.json").read_text())["runs"]


def run_named(part: str) -> dict[str, Any]:
    found = [r for r in RUNS if part in r["name"]]
    assert len(found) == 1, f"{part!r} names {len(found)} corpus runs"
    return found[0]


def truth(run: dict[str, Any]) -> dict[str, Any]:
    return json.loads((CORPUS / "truth" / f"{run['name']}.json").read_text())


def run_path(run: dict[str, Any]) -> str:
    return str(CORPUS / "runs" / run["name"])


def model_path(run: dict[str, Any]) -> str:
    return str(CORPUS / "models" / run["model"])


@dataclass
class Analysed:
    run: dict[str, Any]
    rank: Any  # copyprof.analysis.rank_figures.RankAnalysis
    layout: Any


@lru_cache(maxsize=None)
def _analyse(name: str) -> Analysed:
    from copyprof.analysis.rank_figures import analyze_rank
    from copyprof.models.from_config import layout_from_config
    from copyprof.reading import read_runs

    run = run_named(name)
    layout = layout_from_config(json.loads((CORPUS / "models" / run["model"] / "config.json").read_text()),
                                name=run["model"])
    trace = next(t for t in read_runs([run_path(run)]) if t.meta.role == "rank")
    return Analysed(run, analyze_rank(trace, layout), layout)


@pytest.fixture
def analysed():
    """name -> the run's rank-0 analysis (read and analysed once per session and worker)."""
    return _analyse
