"""CI smoke set of the reader fuzzer: every seed reads cleanly, then a fixed sample of mutated inputs.

What it expects, and why: each input goes through ``copyprof inspect --format json`` and
``copyprof report --format json`` exactly as a user would run them (tests/fuzz/harness.py), in
worker processes with a per-input timer and an address-space limit. The only acceptable
outcomes are a result (possibly with warnings or ``partial``) or copyprof's own one-line error
with exit code 2; a traceback, a hang, a MemoryError, non-strict JSON or a multi-line error
fails the test, which prints each failing input's key for
``python benchmarks/fuzz_readers.py --replay KEY``.

Bounded: 45 inputs per format (270 in all) from a fixed base seed, so CI sees the same inputs
every time; about 30 s on two cores. The on-demand run (benchmarks/fuzz_readers.py) does
10,000 per format.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import note_missing
from tests.fuzz.harness import FAILURES, Job, Pool, Result, make_jobs
from tests.fuzz.seeds import FORMATS, Seed, build_seeds, missing_samples

PER_FORMAT = 45
CI_SEED = 8  # fixed: the same inputs on every CI run


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Seed]]:
    for name in missing_samples():  # the mutated inputs then differ from CI's: say so at the end
        note_missing(f"fuzz seed {name}", "not in ../shared/sample_traces: only the hand-made seeds are mutated")
    return build_seeds(tmp_path_factory.mktemp("fuzz") / "seeds")


def _run(seeds: dict[str, list[Seed]], jobs: list[Job], scratch: Path) -> list[Result]:
    return list(Pool(seeds, scratch, workers=2, timeout_s=30.0, hard_timeout_s=90.0).run(jobs))


def _explain(results: list[Result]) -> str:
    return "\n".join(f"{r.job.key} ({r.seed_name}, {r.job.op}): inspect {r.inspect}, report {r.report}: {r.detail}"
                     for r in results)


def test_every_seed_reads_cleanly(seeds: dict[str, list[Seed]], tmp_path: Path) -> None:
    # A failure after mutation must be the mutation's doing: unmutated, every seed is read
    # without warnings and its report either works or says why in one line (a seed without
    # decode steps, e.g. the nsys samples, has nothing to report).
    jobs = [Job(i, fmt, k, "identity", 0) for i, (fmt, k) in
            enumerate((f, k) for f in FORMATS for k in range(len(seeds[f])))]
    results = _run(seeds, jobs, tmp_path)
    assert {r.job.fmt for r in results} == set(FORMATS)
    bad = [r for r in results if r.inspect not in ("ok", "warned") or r.report in FAILURES]
    assert not bad, _explain(bad)


def test_mutated_inputs_give_results_or_one_line_errors(seeds: dict[str, list[Seed]], tmp_path: Path) -> None:
    jobs = make_jobs(seeds, PER_FORMAT, base_seed=CI_SEED)
    results = _run(seeds, jobs, tmp_path)
    assert len(results) == PER_FORMAT * len(FORMATS)
    failed = [r for r in results if r.outcome in FAILURES]
    assert not failed, f"{len(failed)} of {len(results)} inputs failed:\n{_explain(failed)}"
    # The sample must exercise both sides of the contract in every format, or it proves little:
    # some one-line refusals, and enough inputs read (a reader that refuses nearly everything
    # fails). Read at CI_SEED: kineto 37, rocprofv3-csv 27, rocprofv3-json 11, rocpd 36,
    # nsys-sqlite 37, rocprof-v1 26 of 45; the floor is 7 of 45 (15 %).
    for fmt in FORMATS:
        outcomes = [r.outcome for r in results if r.job.fmt == fmt]
        read = sum(o in ("ok", "warned", "partial") for o in outcomes)
        assert "error" in outcomes and read >= 0.15 * len(outcomes), (fmt, sorted(outcomes))
