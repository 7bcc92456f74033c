"""The package type-checks clean under mypy (configured in pyproject.toml's [tool.mypy]).

Why a test: CI runs the README's test command and nothing else, so the type checker runs as
part of it; a type error fails CI like any failing test. mypy is a test dependency (pinned in
pyproject's ``test`` extra, since another version reads the same code differently).
"""
from __future__ import annotations

import pytest

from tests import type_check


def test_the_package_type_checks() -> None:
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    code, output = type_check.result()  # started with the run (tests/type_check.py)
    assert code == 0, output[-8000:]
