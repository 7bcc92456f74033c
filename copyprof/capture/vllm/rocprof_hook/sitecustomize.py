"""Open and close rocprofv3's recording window where vLLM starts and stops its CUDA profiler.

Why: rocprofv3 ``--selected-regions`` records only between ``roctxProfilerResume(0)`` and
``roctxProfilerPause(0)`` (rocprofiler-sdk ``source/lib/rocprofiler-sdk-tool/tool.cpp``,
``cntrl_tracing_callback``); it does not act on ``hipProfilerStart/Stop``, which is what vLLM's
``profiler: "cuda"`` reaches through ``torch.cuda.profiler.start()/stop()``
(``vllm/profiler/wrapper.py``, ``CudaProfilerWrapper``). vLLM has no roctx hook of its own, so
copyprof puts this folder first on PYTHONPATH of the server it starts; Python imports
``sitecustomize`` in every process, including vLLM's spawned workers, and this module wraps
``torch.cuda.profiler.start/stop`` (lazily, when that module is first imported) so that
each also calls roctx resume/pause. Nothing happens unless ``COPYPROF_ROCTX_HOOK=1``.

Unverified on hardware (no ROCm GPU was available when this was written): that
``torch.cuda.profiler.start()`` succeeds on ROCm torch builds, and the roctx library file name
on a given ROCm install (``librocprofiler-sdk-roctx.so[.1]``; override with COPYPROF_ROCTX_LIB).
Diagnostics go to stderr (the server log) prefixed ``copyprof-roctx-hook:``.
"""
import os
import sys

_TARGET = "torch.cuda.profiler"


def _say(msg):
    sys.stderr.write("copyprof-roctx-hook: %s (pid %d)\n" % (msg, os.getpid()))
    sys.stderr.flush()


def _roctx():
    import ctypes
    rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
    names = [os.environ["COPYPROF_ROCTX_LIB"]] if os.environ.get("COPYPROF_ROCTX_LIB") else [
        "librocprofiler-sdk-roctx.so.1", "librocprofiler-sdk-roctx.so",
        os.path.join(rocm, "lib", "librocprofiler-sdk-roctx.so.1"),
        os.path.join(rocm, "lib", "librocprofiler-sdk-roctx.so")]
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        for fn in (lib.roctxProfilerResume, lib.roctxProfilerPause):
            fn.argtypes = [ctypes.c_uint64]  # roctx_thread_id_t; 0 = every thread of the process
            fn.restype = ctypes.c_int
        return lib
    raise OSError("no rocprofiler-sdk roctx library found (tried %s)" % ", ".join(names))


def _patch(module):
    orig_start, orig_stop = module.start, module.stop
    state = {"lib": None}

    def start():
        orig_start()
        if state["lib"] is None:
            state["lib"] = _roctx()
        rc = state["lib"].roctxProfilerResume(0)
        _say("roctxProfilerResume(0) -> %d" % rc)

    def stop():
        try:
            if state["lib"] is not None:
                rc = state["lib"].roctxProfilerPause(0)
                _say("roctxProfilerPause(0) -> %d" % rc)
        finally:
            orig_stop()

    module.start, module.stop = start, stop
    _say("wrapped torch.cuda.profiler.start/stop")


class _Finder:
    """Meta-path finder that patches ``torch.cuda.profiler`` right after it is executed."""

    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        import importlib.util
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        real_exec = loader.exec_module

        def exec_module(module):
            real_exec(module)
            try:
                _patch(module)
            except Exception as exc:  # never break the server's import of torch
                _say("could not wrap torch.cuda.profiler: %r" % (exc,))

        loader.exec_module = exec_module
        return spec


def _chain_next_sitecustomize():
    """Run the sitecustomize this file shadows (if any), so a venv's own hook still applies."""
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.util
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        cand = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(cand):
            spec = importlib.util.spec_from_file_location("_copyprof_chained_sitecustomize", cand)
            if spec and spec.loader:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


if os.environ.get("COPYPROF_ROCTX_HOOK") == "1":
    if _TARGET in sys.modules:
        _patch(sys.modules[_TARGET])
    else:
        sys.meta_path.insert(0, _Finder())
try:
    _chain_next_sitecustomize()
except Exception as _exc:
    _say("chained sitecustomize failed: %r" % (_exc,))
