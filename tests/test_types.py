"""The package type-checks clean under mypy (configured in pyproject.toml's [tool.mypy]).

Why a test: CI runs the README's test command and nothing else, so the type checker runs as
part of it; a type error fails CI like any failing test. mypy is a test dependency (pinned in
pyproject's ``test`` extra, since another version reads the same code differently).
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_the_package_type_checks() -> None:
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--config-file",
                           str(REPO / "pyproject.toml")], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
