"""Shared fixtures: where the public sample traces live, and a CLI runner."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO.parent / "shared" / "sample_traces"


@pytest.fixture
def samples() -> Path:
    if not SAMPLES.is_dir():
        pytest.skip(f"shared sample traces not found at {SAMPLES}")
    return SAMPLES


def run_cli(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run `python -m copyprof ARGS` in a fresh process, as a user would."""
    proc = subprocess.run([sys.executable, "-m", "copyprof", *args], capture_output=True, text=True, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"copyprof {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def cli_json(*args: str) -> dict:
    return json.loads(run_cli(*args, "--format", "json", check=True).stdout)
