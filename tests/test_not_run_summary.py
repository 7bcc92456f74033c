"""The end-of-run summary names every test that did not run, and why (tests/conftest.py).

Why: on a fresh clone without ../shared dozens of tests skip; `pytest -q` alone prints only a
count, so a reader cannot tell what was not checked. The summary groups skips and expected
failures by reason and lists each test id, then the inputs that helpers noted as missing.
"""
from __future__ import annotations

import pytest

import tests.conftest as shared_conftest

pytest_plugins = ["pytester"]

INNER = '''
import pytest
from tests.conftest import note_missing

note_missing("fuzz seed a.json.gz", "not in ../shared/sample_traces")


def test_runs():
    pass


def test_needs_the_samples():
    pytest.skip("shared sample traces not found at /nowhere")


@pytest.mark.parametrize("name", ["present", "absent"])
def test_each_sample(name):
    if name == "absent":
        pytest.skip("sample absent not found (../shared/sample_traces is not next to this checkout)")


@pytest.mark.xfail(strict=True, reason="batch too short: 87 % coverage")
def test_known_defect():
    assert False
'''


def test_summary_names_each_skip_xfail_and_missing_input(pytester: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_conftest, "_MISSING", [])  # the inner run's notes stay out of ours
    pytester.makeconftest("from tests.conftest import pytest_terminal_summary  # noqa: F401\n")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=2, xfailed=1)
    result.stdout.fnmatch_lines([
        "*- not run (skipped): 2 -*",
        "sample absent not found (../shared/sample_traces is not next to this checkout)  [[]1[]]",
        "    test_inner.py::test_each_sample[[]absent[]]",
        "shared sample traces not found at /nowhere  [[]1[]]",
        "    test_inner.py::test_needs_the_samples",
        "*- expected failures (known defects): 1 -*",
        "batch too short: 87 % coverage  [[]1[]]",
        "    test_inner.py::test_known_defect",
        "*- inputs not found: 1 -*",
        "fuzz seed a.json.gz: not in ../shared/sample_traces",
    ])
