"""Security basics: no shell, user strings never reach one, loopback only, no downloads, no writes from traces.

Two kinds of check, because each misses what the other sees:

* static (AST of every module under copyprof/): no ``shell=True`` and no shell-running call
  (``os.system``, ``os.popen``, ``subprocess.getoutput`` ...); every subprocess call takes an
  argument list; every HTTP connection and socket bind names ``127.0.0.1``; no module imports a
  download or install library (urllib.request, requests, httpx, pip, ...) and no subprocess
  argument list holds "pip"; network modules are used only by the capture client/server code;
* dynamic (a real ``copyprof`` process under a Python audit hook that logs file writes, socket
  and subprocess events): ``copyprof run -- ARGS`` hands shell metacharacters to the server as
  separate argv items and copyprof's own sockets talk to 127.0.0.1 only; ``inspect`` and
  ``report`` on traces whose metadata and names hold ``/tmp/evil`` and ``../`` paths open no
  socket, start no process, and write nothing except the table cache (named by content hash),
  while a snapshot shows no file appeared next to the traces (the SQLite library's own files,
  which the audit hook cannot see, included: one database is in WAL mode).
"""
from __future__ import annotations

import ast
import gzip
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from copyprof.capture.vllm.command import RunSpec, build_server_command
from copyprof.capture.vllm.probe import VllmInfo
from tests.capture.test_run_fake_server import write_fake_vllm

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "copyprof"
SHELL_CALLS = {("os", "system"), ("os", "popen"), ("subprocess", "getoutput"), ("subprocess", "getstatusoutput"),
               ("os", "execl"), ("os", "execlp"), ("os", "spawnl"), ("pty", "spawn")}
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}
DOWNLOAD_MODULES = {"urllib.request", "urllib3", "requests", "httpx", "aiohttp", "pip", "ensurepip", "ftplib",
                    "smtplib", "webbrowser", "huggingface_hub", "xmlrpc.client", "http.server"}
NETWORK_MODULES = {"http.client", "socket"}
NETWORK_USERS = {"capture/vllm/client.py", "capture/vllm/server.py", "capture/vllm/port.py",
                 "capture/vllm/watched_post.py"}  # watched_post.py: exception types
HOST_ONLY = {"gethostname"}  # socket functions that are not traffic


def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(PACKAGE)), ast.parse(p.read_text(), str(p))) for p in sorted(PACKAGE.rglob("*.py"))]


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _calls() -> list[tuple[str, ast.Call]]:
    return [(name, node) for name, tree in _modules() for node in ast.walk(tree) if isinstance(node, ast.Call)]


def test_no_shell_true_and_no_shell_running_calls() -> None:
    found = []
    for name, call in _calls():
        for kw in call.keywords:  # any shell= other than the constant False is refused
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                found.append(f"{name}:{call.lineno} shell={ast.unparse(kw.value)}")
        parts = tuple(_dotted(call.func).split("."))
        if parts[-2:] in SHELL_CALLS:
            found.append(f"{name}:{call.lineno} {_dotted(call.func)}")
    assert not found, found


def test_subprocess_calls_take_argument_lists() -> None:
    seen = []
    for name, call in _calls():
        parts = _dotted(call.func).split(".")
        if len(parts) == 2 and parts[0] == "subprocess" and parts[1] in SUBPROCESS_CALLS:
            args = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "args"), None)
            seen.append(f"{name}:{call.lineno}")
            # A list display, or a name/attribute holding one (ServerProcess.argv is a list[str]);
            # never a string constant, an f-string or string arithmetic that a shell would parse.
            assert isinstance(args, (ast.List, ast.Tuple, ast.Name, ast.Attribute)), (name, call.lineno, ast.unparse(args))
            if isinstance(args, ast.List):
                assert not any(isinstance(e, ast.Constant) and "pip" in str(e.value).split() for e in args.elts)
    assert len(seen) >= 3, seen  # the probe, the server and the nsys export: the scan sees them


def test_network_is_loopback_only_and_nothing_downloads() -> None:
    problems = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for mod in mods:
                    if any(mod == d or mod.startswith(d + ".") for d in DOWNLOAD_MODULES) or mod == "urllib":
                        problems.append(f"{name}: imports {mod}")
                    if mod in NETWORK_MODULES and name not in NETWORK_USERS and mod != "socket":
                        problems.append(f"{name}: imports {mod}")
            if not isinstance(node, ast.Call):
                continue
            func = _dotted(node.func)
            first = node.args[0] if node.args else None
            if func.endswith("HTTPSConnection") or func.endswith("create_connection") or func.endswith("urlopen"):
                problems.append(f"{name}:{node.lineno} {func}")
            if func.endswith("HTTPConnection") and not (isinstance(first, ast.Constant) and first.value == "127.0.0.1"):
                problems.append(f"{name}:{node.lineno} HTTPConnection to {ast.unparse(first) if first else '?'}")
            if func.endswith(".bind") and not (isinstance(first, ast.Tuple) and isinstance(first.elts[0], ast.Constant)
                                               and first.elts[0].value == "127.0.0.1"):
                problems.append(f"{name}:{node.lineno} bind to {ast.unparse(first) if first else '?'}")
            if func.endswith(".connect") and func != "sqlite3.connect":
                problems.append(f"{name}:{node.lineno} {func}")
            if func.startswith("socket.") and name not in NETWORK_USERS and func.split(".")[1] not in HOST_ONLY:
                problems.append(f"{name}:{node.lineno} {func}")
    assert not problems, problems


def test_vllm_is_told_to_listen_on_loopback_and_gets_user_args_verbatim(tmp_path: Path) -> None:
    evil = ("--foo", "$(touch /tmp/pwned)", "; rm -rf ~", "a b`id`", "--x=|cat /etc/passwd")
    info = VllmInfo(python="/usr/bin/python3", vllm_version="0.32.0", profiler_config_fields=["profiler"])
    cmd = build_server_command(RunSpec(model="m", extra_args=evil), info, tmp_path, 8000)
    assert cmd.argv[cmd.argv.index("--host") + 1] == "127.0.0.1"
    assert tuple(cmd.argv[-len(evil):]) == evil  # each one list item, as given


# ------------------------------------------------------------------------ a real process under an audit hook
_AUDITED = r'''
import json, os, sys
log = open(os.environ["AUDIT_LOG"], "a", buffering=1)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
FS = {"os.mkdir", "os.rename", "os.replace", "os.remove", "os.rmdir", "os.symlink", "os.link", "os.truncate",
      "os.chmod", "os.utime", "shutil.copyfile", "shutil.rmtree", "shutil.move"}
NET = {"socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto", "subprocess.Popen", "os.system",
       "os.exec", "os.posix_spawn", "urllib.Request", "sqlite3.connect"}
def hook(event, args):
    if event == "open":
        path, mode, flags = args
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & WRITE_FLAGS):
            log.write(json.dumps(["write", str(path)]) + "\n")
    elif event in FS:
        log.write(json.dumps(["fs:" + event, [str(a) for a in args[:2]]]) + "\n")
    elif event in NET:
        log.write(json.dumps([event, repr(args)[:300]]) + "\n")
sys.addaudithook(hook)
from copyprof.cli.main import main
sys.argv = ["copyprof", *sys.argv[1:]]
main()
'''


def _audited(tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 180
             ) -> tuple[subprocess.CompletedProcess[str], list[list]]:
    log = tmp_path / f"audit-{uuid.uuid4().hex[:8]}.jsonl"
    e = {**os.environ, "AUDIT_LOG": str(log), "PYTHONDONTWRITEBYTECODE": "1", "CI": "1", **(env or {})}
    e["PYTHONPATH"] = os.pathsep.join(p for p in (e.get("PYTHONPATH"), str(REPO)) if p)
    proc = subprocess.run([sys.executable, "-c", _AUDITED, *args], capture_output=True, text=True, env=e,
                          cwd=tmp_path, timeout=timeout)
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, events


def test_run_passes_shell_metacharacters_as_argv_and_talks_to_loopback_only(tmp_path: Path) -> None:
    fake = write_fake_vllm(tmp_path / "fake")
    marker = tmp_path / "pwned"
    evil = [f"$(touch {marker})", f"; touch {marker}", f"`touch {marker}`", "a b", f"|touch {marker}"]
    proc, events = _audited(
        tmp_path, "run", "--model", "fake/model", "--tp", "1", "--concurrency", "2", "--prefix-len", "16",
        "--suffix-len", "4", "--steps", "3", "--decode-tokens", "10000", "--out", str(tmp_path / "out"),
        "--label", f"x$(touch {marker})", "--boot-timeout", "30", "--timeout", "30", "--", *evil,
        env={"PYTHONPATH": str(fake), "FAKE_VLLM_MODE": "ok"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not marker.exists()
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    argv = json.loads((run_dir / "run.json").read_text())["server"]["argv"]
    assert argv[-len(evil):] == evil and "$(" not in run_dir.name
    log_line = (run_dir / "server.log").read_text().splitlines()[0]  # the fake prints the argv it received
    assert all(repr(a) in log_line for a in evil)
    conns = [e for e in events if e[0] in ("socket.connect", "socket.bind", "socket.getaddrinfo")]
    assert conns and all(e[1].startswith("(") and "'127.0.0.1'" in e[1] for e in conns), conns  # no name lookups either
    assert not [e for e in events if e[0] == "urllib.Request"]
    spawned = [e[1] for e in events if e[0] == "subprocess.Popen"]
    # The probe (python -c), the server, and the stdlib's platform.platform() asking `uname -p`:
    # each an argument list (the audit event's second field), none of them pip.
    assert any("'-c'" in s for s in spawned) and any("api_server" in s for s in spawned), spawned
    assert all(s.split(", ", 1)[1].startswith("[") and "'pip'" not in s for s in spawned), spawned


def _evil_traces(root: Path) -> list[Path]:
    """Traces whose metadata, names and run.json point at /tmp/evil-* and ../ paths."""
    tag = uuid.uuid4().hex[:8]
    evil = f"/tmp/evil-{tag}"
    root.mkdir()
    out = []
    events = [{"ph": "X", "cat": "user_annotation", "name": "execute_context_0(0)_generation_4(4)", "pid": 1, "tid": 1,
               "ts": 10.0 * i, "dur": 9.0} for i in range(6)]
    events += [{"ph": "X", "cat": "kernel", "name": f"../../{evil}/k", "pid": 0, "tid": 7, "ts": 10.0 * i + 1, "dur": 2,
                "args": {"device": 0, "stream": 7, "correlation": i}} for i in range(6)]
    doc = {"traceName": evil, "deviceProperties": [{"id": 0, "name": f"../../{evil}"}], "output_dir": f"../{evil}",
           "distributedInfo": {"rank": 0, "dump_dir": evil}, "traceEvents": events}
    run = root / "run"
    run.mkdir()
    (run / "rank0.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    (run / "run.json").write_text(json.dumps({"status": "complete", "files": [f"../../{evil}"],
                                              "rank_traces": [evil], "out": evil, "label": "../x"}))
    out.append(run)
    (root / "results.json").write_text(json.dumps({"rocprofiler-sdk-tool": [{
        "metadata": {"pid": 1, "command": [evil, "../x"], "config": {"output_file": f"{evil}/%pid%"}},
        "strings": {"buffer_records": [{"kind": "KERNEL_DISPATCH", "operations": ["x"]}]},
        "kernel_symbols": [{"kernel_id": 1, "kernel_name": f"../{evil}"}],
        "buffer_records": {"kernel_dispatch": [{"kind": 0, "start_timestamp": 1, "end_timestamp": 2,
                                                "dispatch_info": {"kernel_id": 1}}]}}]}))
    out.append(root / "results.json")
    db = root / "wal.sqlite"  # an nsys export in WAL mode: mode=ro alone would create -wal/-shm files here
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript((REPO / "tests" / "data" / "nsys_schema_subset.sql").read_text())
    conn.execute("INSERT INTO StringIds VALUES (1, ?)", (f"../../{evil}",))
    conn.execute("INSERT INTO PROCESSES VALUES (1, 2, ?)", (evil,))
    conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId,"
                 " returnValue) VALUES (1, 2, 0, 1, 1, 1, 0)")
    conn.commit()
    conn.close()
    out.append(db)
    return out


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")}


def test_paths_inside_traces_are_never_written(tmp_path: Path) -> None:
    traces = _evil_traces(tmp_path / "traces")
    before = _tree(tmp_path / "traces")
    cache = tmp_path / "cache"
    runs = [["inspect", "--format", "json", *map(str, traces)]]
    runs += [["report", str(t), "--format", fmt] for t in traces for fmt in ("json", "markdown", "csv")]
    for args in runs:
        proc, events = _audited(tmp_path, *args, env={"COPYPROF_CACHE_DIR": str(cache)})
        assert proc.returncode in (0, 2), (args, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr
        # An int path is os.fdopen() of a descriptor whose creation (os.open, with its path) is logged too.
        writes = [e for e in events if (e[0] == "write" and not e[1].isdigit()) or e[0].startswith("fs:")]
        outside = [e for e in writes if not str(e[1] if e[0] == "write" else e[1][0]).startswith(str(cache))]
        assert not outside, (args, outside)  # only the table cache is written
        assert not any("evil" in json.dumps(e) for e in writes), writes
        assert not [e for e in events if e[0] in ("socket.connect", "socket.bind", "socket.getaddrinfo",
                                                  "subprocess.Popen", "os.system", "urllib.Request")]
        for e in events:
            if e[0] == "sqlite3.connect":
                assert "immutable=1" in e[1] and "mode=ro" in e[1], e
    assert _tree(tmp_path / "traces") == before  # nothing appeared next to the traces, no -wal/-shm either
    assert not list(Path("/tmp").glob("evil-*"))


@pytest.mark.parametrize("path", ["../../etc", "/tmp/x; touch /tmp/pwned", "$(id)"])
def test_run_label_cannot_leave_the_out_folder(tmp_path: Path, path: str) -> None:
    from copyprof.rundir.layout import new_run_dir
    from copyprof.cli.run_cmd import _label
    from copyprof.errors import CopyprofError

    with pytest.raises(CopyprofError):
        new_run_dir(tmp_path, path)
    made = new_run_dir(tmp_path, _label(path))  # what the CLI passes: a cleaned name, inside --out
    assert made.parent == tmp_path
