"""A stand-in for ``python -m vllm.entrypoints.openai.api_server`` used by the run lifecycle tests.

Why: the lifecycle (boot failure, timeouts, Ctrl-C, A/B order, run.json states) must be tested in
seconds, without vLLM. ``write_fake_vllm(dir)`` writes a tiny ``vllm`` package whose api_server
module speaks the few endpoints copyprof uses; its behaviour is chosen by ``FAKE_VLLM_MODE``:

* ``ok`` (default): /health, /v1/completions (streaming SSE with ``token_ids``), /start_profile
  (body ``max_iterations``) and /stop_profile; on stop it writes a gzip Kineto trace
  ``rank0.<ns>.pt.trace.json.gz`` with one ``execute_context_0(0)_generation_N(N)`` per step;
* ``crash``: prints 40 numbered log lines and exits 3 during boot;
* ``hang``: never answers /health (boot timeout, Ctrl-C).

This file only defines helpers (no tests); pytest collects nothing from it.
"""
from __future__ import annotations

from pathlib import Path

_SERVER = r'''
import gzip, json, os, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

argv = sys.argv[1:]
def arg(name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default

mode = os.environ.get("FAKE_VLLM_MODE", "ok")
print("fake vllm starting", argv, flush=True)
if mode == "crash":
    for i in range(40):
        print("boot line %d" % i, flush=True)
    print("Traceback (most recent call last):", flush=True)  # as vLLM logs a failed boot
    print('  File "vllm/entrypoints/openai/api_server.py", line 1, in <module>', flush=True)
    print("ValueError: fake root cause", flush=True)
    sys.exit(3)
cfg = json.loads(arg("--profiler-config", "{}"))
tp = int(arg("--tensor-parallel-size", "1"))
state = {"steps": 0, "profiling": False, "limit": 0, "annotated": [], "written": False}
lock = threading.Lock()
booted = time.monotonic() + 0.5

def write_trace():
    with lock:
        if state["written"]:
            return
        state["written"] = True
        n = state["batch"]
        steps = state["annotated"]
    d = cfg.get("torch_profiler_dir")
    graph = os.environ.get("FAKE_VLLM_GRAPH", "")
    for rank in range(tp):
        events = [{"ph": "X", "cat": "user_annotation", "name": "execute_context_0(0)_generation_%d(%d)" % (n, n),
                   "pid": 1, "tid": 1, "ts": 1000.0 * i, "dur": 500.0} for i in range(len(steps))]
        for i in range(len(steps) if graph else 0):  # a HIP graph replay per step; "lost": ROCTracer lost its kernels
            t = 1000.0 * i
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 1, "tid": 1,
                           "ts": t + 5, "dur": 3.0, "args": {"correlation": 2 * i + 1}})
            events.append({"ph": "X", "cat": "kernel", "name": "prepare_inputs", "pid": 0, "tid": 1, "ts": t + 10,
                           "dur": 5.0, "args": {"device": 0, "stream": 1, "correlation": 2 * i + 1}})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "hipGraphLaunch", "pid": 1, "tid": 1,
                           "ts": t + 20, "dur": 30.0, "args": {"correlation": 2 * i + 2}})
            for k in range(0 if graph == "lost" else 5):
                events.append({"ph": "X", "cat": "kernel", "name": "graph_kernel_%d" % k, "pid": 0, "tid": 1,
                               "ts": t + 60 + 10 * k, "dur": 8.0,
                               "args": {"device": 0, "stream": 1, "correlation": 2 * i + 2, "kind": "Dispatch Task"}})
        path = os.path.join(d, "rank%d.%d.pt.trace.json.gz" % (rank, time.time_ns()))
        with gzip.open(path, "wt") as fh:
            json.dump({"schemaVersion": 1, "traceEvents": events}, fh)
    print("trace written", flush=True)

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"null")
    def _send(self, code, body=b""):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path == "/health" and mode != "hang" and time.monotonic() > booted:
            return self._send(200)
        self._send(503)
    def do_POST(self):
        body = self._body()
        if self.path == "/start_profile":
            with lock:
                state["profiling"] = True
                state["limit"] = (body or {}).get("max_iterations") or cfg.get("max_iterations") or 10**9
            return self._send(200)
        if self.path == "/stop_profile":
            if state["profiling"]:
                write_trace()
            return self._send(200)
        if self.path != "/v1/completions":
            return self._send(404)
        if not body.get("stream"):
            return self._send(200, json.dumps({"choices": [{"token_ids": [5, 6]}]}).encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        def chunk(data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        try:
            # "short": the streams end after 8 tokens whatever was asked (as a server capped by
            # its --max-model-len would), so they run out inside the window.
            for i in range(8 if mode == "short" else body["max_tokens"]):
                time.sleep(0.01)
                with lock:
                    state["batch"] = int(arg("--max-num-seqs", "1"))
                    if state["profiling"] and len(state["annotated"]) < state["limit"]:
                        state["annotated"].append(i)
                chunk(b"data: " + json.dumps({"choices": [{"token_ids": [7]}]}).encode() + b"\n\n")
            chunk(b"data: [DONE]\n\n")
            chunk(b"")
        except OSError:
            pass

ThreadingHTTPServer(("127.0.0.1", int(arg("--port"))), H).serve_forever()
'''


FIELDS_0_32 = ("profiler", "torch_profiler_dir", "torch_profiler_with_stack", "ignore_frontend", "delay_iterations",
               "max_iterations")


_TORCH = '''"""A stand-in for torch in the fake vLLM environment: what copyprof's probe reads (capture/vllm/probe.py:
__version__, torch.version.cuda/hip, torch.cuda.is_available()). The real torch costs ~1.3 s to
import in every probe and tests nothing here; the vLLM-CPU tests probe a real one."""
__version__ = "2.13.0+fake"


class version:
    cuda = None
    hip = None


class cuda:
    @staticmethod
    def is_available():
        return False
'''
# The same stand-in saying it is a ROCm 7.2 build (the preflight reads torch/lib next to it).
_ROCM_TORCH = _TORCH.replace('"2.13.0+fake"', '"2.13.0+rocm7.2"').replace("    hip = None", '    hip = "7.2.53211"')


def write_fake_rocm_torch(root: Path, lib_files: dict[str, bytes]) -> Path:
    """A ``torch`` package under ``root`` that says it is a ROCm 7.2 build, with ``torch/lib``
    holding ``lib_files`` (e.g. ELF stand-ins for libtorch_cpu.so): what the probe reads."""
    lib = root / "torch" / "lib"
    lib.mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text(_ROCM_TORCH)
    for name, data in lib_files.items():
        (lib / name).write_bytes(data)
    return root


def write_fake_vllm(root: Path, version: str = "0.32.0", fields: tuple[str, ...] = FIELDS_0_32) -> Path:
    """Write the fake ``vllm`` package (and a stand-in ``torch``) under ``root``; return ``root``
    (put it on PYTHONPATH)."""
    pkg = root / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (root / "vllm", root / "vllm" / "entrypoints", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(_SERVER)
    # What copyprof's environment probe reads (vllm.version, vllm.config.profiler.ProfilerConfig).
    (root / "vllm" / "version.py").write_text(f"__version__ = {version!r}\n")
    cfg = root / "vllm" / "config"
    cfg.mkdir()
    (cfg / "__init__.py").write_text("")
    (cfg / "profiler.py").write_text(
        "import dataclasses\n\n@dataclasses.dataclass\nclass ProfilerConfig:\n"
        + "".join(f"    {name}: object = None\n" for name in fields))
    (root / "torch").mkdir()
    (root / "torch" / "__init__.py").write_text(_TORCH)
    return root
