"""The environment probe reads vLLM's version, commit, ProfilerConfig's fields and the profiler
variables from the installed source, and imports vLLM only for what the source does not say.

Each case runs the real probe (``probe_vllm``: a subprocess of this interpreter) against a small
``vllm`` package (and a stand-in ``torch``) written here and put on PYTHONPATH. Its ``__init__`` records that it ran in a
file: importing any part of a real vLLM runs that ``__init__`` (5-10 s of torch's compiler stack),
so "read from the source" is checked as "the package was never executed", not by a timing.
"""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from copyprof.capture.vllm.probe import probe_vllm

VERSION = "__version__ = version = '0.26.0'\n__commit_id__ = commit_id = 'f00dcafe1234'\n"
PROFILER = """
from typing import ClassVar

from vllm.config.utils import config

@config
class ProfilerConfig:
    \"\"\"As vLLM >= 0.13 writes it: a decorated class of annotated fields.\"\"\"
    profiler: str | None = None
    torch_profiler_dir: str = ""
    max_iterations: int = 0
    registry: ClassVar[dict] = {}

    def compute_hash(self) -> str:
        return ""
"""
ENVS = """
import os
environment_variables: dict = {
    "VLLM_TORCH_PROFILER_DIR": lambda: os.getenv("VLLM_TORCH_PROFILER_DIR"),
    "VLLM_PROFILER_MAX_ITERS": lambda: int(os.getenv("VLLM_PROFILER_MAX_ITERS", "0")),
    "VLLM_HOST_IP": lambda: os.getenv("VLLM_HOST_IP", ""),
}
"""
# What importing the package gives, for the cases the source cannot answer: the same fields as
# above through dataclasses, and a version computed at import time.
IMPORTED = {
    "vllm/__init__.py": "import pathlib, os\npathlib.Path(os.environ['PROBE_MARK']).write_text('imported')\n",
    "vllm/version.py": "from vllm._version import __version__\n",
    "vllm/config/__init__.py": "",
    "vllm/config/utils.py": "import dataclasses\nconfig = dataclasses.dataclass\n",
    # The probe also asks torch; a stand-in answers at once (the real one takes seconds to import).
    "torch/__init__.py": "__version__ = '2.13.0+cpu'\nfrom torch import cuda, version\n",
    "torch/version.py": "hip = None\ncuda = None\n",
    "torch/cuda.py": "def is_available():\n    return False\n",
}


def _package(root: Path, files: dict[str, str]) -> None:
    for name, text in {**IMPORTED, **{f"vllm/{k}": v for k, v in files.items()}}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def make(files: dict[str, str]) -> Path:
        _package(tmp_path / "site", files)
        monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
        monkeypatch.setenv("PROBE_MARK", str(tmp_path / "mark"))
        return tmp_path / "mark"
    return make


def test_plain_literals_are_read_without_importing_vllm(fake_vllm) -> None:
    mark = fake_vllm({"_version.py": VERSION, "config/profiler.py": PROFILER, "envs.py": ENVS})
    info = probe_vllm(sys.executable)
    assert not mark.exists(), "the probe executed the vllm package"
    assert info.vllm_read_from == "source" and info.errors == {}, info.errors
    assert info.vllm_importable and info.vllm_version == "0.26.0" and info.commit == "f00dcafe1234"
    assert info.torch_version == "2.13.0+cpu" and info.gpus == []
    # ClassVar annotations are not dataclass fields; methods are not fields either.
    assert info.profiler_config_fields == ["profiler", "torch_profiler_dir", "max_iterations"]
    assert info.profiler_env_vars == ["VLLM_PROFILER_MAX_ITERS", "VLLM_TORCH_PROFILER_DIR"]


def test_what_the_source_does_not_say_is_asked_of_the_import(fake_vllm) -> None:
    # A version computed at import (not a literal) and a ProfilerConfig with a base class (whose
    # fields the class body alone does not list): both are asked of the imported vLLM.
    computed = "import os\n__version__ = os.environ.get('FAKE_V', '0.31.0')\n"
    based = PROFILER.replace("class ProfilerConfig:", "class Base:\n    inherited: int = 0\n\n@config\n"
                             "class ProfilerConfig(Base):")
    mark = fake_vllm({"_version.py": computed, "config/profiler.py": based, "envs.py": ENVS})
    info = probe_vllm(sys.executable)
    assert mark.exists() and info.vllm_read_from == "source and import", info
    assert info.vllm_version == "0.31.0" and info.errors == {}, info.errors
    assert info.profiler_config_fields == ["inherited", "profiler", "torch_profiler_dir", "max_iterations"]
    assert info.profiler_env_vars == ["VLLM_PROFILER_MAX_ITERS", "VLLM_TORCH_PROFILER_DIR"]  # still the source's


def test_an_old_vllm_without_profiler_config_records_the_import_error(fake_vllm) -> None:
    # vLLM < 0.13 has no vllm/config/profiler.py: the import is asked, fails, and the error is
    # recorded (the command then picks the environment-variable style from the version).
    mark = fake_vllm({"_version.py": "__version__ = '0.11.2'\n", "envs.py": ENVS})
    info = probe_vllm(sys.executable)
    assert mark.exists() and info.vllm_version == "0.11.2" and info.profiler_config_fields is None
    assert "profiler_config" in info.errors and info.vllm_read_from == "source and import"


@pytest.mark.parametrize(("version_py", "from_source"), [
    # the CPU wheels' torch/version.py, as torch 2.13.0+cpu writes it
    ("__version__ = '2.13.0+cpu'\ndebug = False\ncuda: Optional[str] = None\nhip: Optional[str] = None\n", True),
    ("__version__ = '2.9.1+cu128'\ncuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n", False),  # a CUDA build
    ("__version__ = '2.9.1+rocm6.4'\ncuda: Optional[str] = None\nhip: Optional[str] = '6.4.43482'\n", False),  # ROCm
    ("cuda = None\nhip = None\n", False),  # no version literal: the import says
])
def test_a_torch_that_can_see_no_gpu_is_read_without_importing_it(fake_vllm, tmp_path: Path, version_py: str,
                                                                   from_source: bool) -> None:
    # A torch built for neither CUDA nor HIP cannot see a GPU, so its facts come from version.py
    # (importing torch costs ~2 s of CPU at every run); any other build is imported, for its GPUs.
    fake_vllm({"_version.py": VERSION, "config/profiler.py": PROFILER, "envs.py": ENVS})
    torch_mark = tmp_path / "torch-imported"
    site = tmp_path / "site" / "torch"
    (site / "version.py").write_text("from typing import Optional\n" + version_py)
    (site / "__init__.py").write_text(
        f"import pathlib\npathlib.Path({str(torch_mark)!r}).write_text('imported')\n"
        "__version__ = 'imported'\nfrom torch import cuda, version\n")
    info = probe_vllm(sys.executable)
    assert info.errors == {}, info.errors
    assert torch_mark.exists() is not from_source and info.torch_read_from == ("source" if from_source else "import")
    assert info.gpus == [] and info.torch_lib == str(site / "lib")  # the stand-in's cuda sees no GPU either way
    if from_source:
        assert (info.torch_version, info.torch_cuda, info.torch_hip) == ("2.13.0+cpu", None, None)
    else:
        assert info.torch_version == "imported"  # what torch.__version__ says once imported
