"""The root cause copyprof names when vLLM's server exits: the first error line of its log, or a
native crash with the frames that say where.

The log below is cut from a real one (vLLM 0.32 on the CPU backend, torch 2.13.0+cpu; a suite
run on a stalled host): the worker segfaulted in kineto as its profiler stopped, and the server
then shut down with errors of its own (``RuntimeError: cancelled``), which are not the cause.
"""
from __future__ import annotations

from pathlib import Path

from copyprof.capture.vllm.log_evidence import first_error_line

_CRASHED = """\
(Worker pid=13541) INFO 12-03 15:53:24 [wrapper.py:49] GPU profiling will stop after 12 worker steps, or when stop_profile is received.
ERROR:2026-12-03 15:53:27 13541:13541 GenericActivityProfiler.cpp:68] Not starting tracing - insufficient time for warmup. Time to warmup (ms): 3550
(Worker pid=13541) INFO 12-03 15:53:30 [wrapper.py:161] Max profiling iterations reached. Stopping profiler...
!!!!!!! Segfault encountered !!!!!!!
  File "./signal/../sysdeps/unix/sysv/linux/x86_64/libc_sigaction.c", line 0, in 0x00007f083065a04f
  File "<unknown>", line 0, in std::__detail::_List_node_base::_M_hook(std::__detail::_List_node_base*)
  File "<unknown>", line 0, in libkineto::GenericActivityProfiler::transferCpuTrace(std::unique_ptr<libkineto::CpuTraceBuffer>)
  File "<unknown>", line 0, in libkineto::ActivityProfilerController::transferCpuTrace(std::unique_ptr<libkineto::CpuTraceBuffer>)
  File "<unknown>", line 0, in torch::profiler::impl::kineto::TraceWrapper::transferCpuTrace(long)
(EngineCore pid=13500) ERROR 12-03 15:54:01 [core.py:1512]     raise RuntimeError("cancelled")
(EngineCore pid=13500) ERROR 12-03 15:54:01 [core.py:1512] RuntimeError: cancelled
"""


def test_a_native_crash_is_named_with_where_it_happened(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(_CRASHED)
    cause = first_error_line(log)
    assert cause is not None and cause.startswith("Segfault encountered | "), cause
    # the C frames under the marker, after the signal handler's own: kineto's, where it crashed
    assert "libkineto::GenericActivityProfiler::transferCpuTrace" in cause and "libc_sigaction" not in cause
    assert "cancelled" not in cause


def test_an_error_before_a_crash_stays_the_first_error(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("(EngineCore pid=1) ERROR 12-03 [core.py:1] ValueError: the root cause\n" + _CRASHED)
    assert first_error_line(log) == "(EngineCore pid=1) ERROR 12-03 [core.py:1] ValueError: the root cause"
    log.write_text("(APIServer pid=1) WARNING 12-03 [x.py:1] ValueError: only a warning\nnothing else\n")
    assert first_error_line(log) is None
