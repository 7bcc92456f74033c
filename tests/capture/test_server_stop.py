"""ServerProcess.stop on a real process tree whose leader exits and leaves an orphan behind.

Seen with vLLM 0.32 on the CPU backend: after its engine core was SIGKILLed, the API server
(the group's leader) exited, but a worker ignored SIGINT and SIGTERM and held the stop through
both 30 s grace periods before the SIGKILL ended it. Once the leader is gone the stop waits
``ORPHAN_GRACE_S`` per signal instead. The tree is built in a child Python that adopts orphans,
as ``copyprof run`` does, so the test runner's own process is left as it is.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

_TREE = r'''
import os, signal, subprocess, sys, time
# The "worker": ignores SIGINT and SIGTERM, like the hung vLLM worker; only SIGKILL ends it.
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('worker up', flush=True)\n"
    "time.sleep(3600)\n"])
print("leader up", flush=True)
time.sleep(3600)  # the "API server": SIGINT ends it at once (KeyboardInterrupt)
'''

_DRIVER = r'''
import json, os, sys, time
from pathlib import Path
from copyprof.capture.vllm import server as server_module
from copyprof.capture.vllm.process_group import adopt_orphans, group_members
from copyprof.capture.vllm.server import ServerProcess
# The mechanism, not the constant's value, is what is tested: a 1 s orphan grace instead of 5 s
# keeps the test from idling 10 s.
server_module.ORPHAN_GRACE_S = 1.0
adopt_orphans()
log = Path(sys.argv[1])
server = ServerProcess([sys.executable, "-c", sys.argv[2]], dict(os.environ), log, 0)
server.start()
deadline = time.monotonic() + 30
while time.monotonic() < deadline and "worker up" not in log.read_text():
    time.sleep(0.05)
t0 = time.monotonic()
how = server.stop(graceful_s=60.0, term_s=60.0)
print(json.dumps({"how": how, "seconds": time.monotonic() - t0, "left": group_members(server.pid)}))
'''


def test_a_stop_does_not_wait_out_both_grace_periods_for_an_orphan(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(tmp_path / "server.log"), _TREE], capture_output=True,
                          text=True, cwd=REPO, timeout=200)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # SIGINT ends the leader; the orphan ignores SIGINT (1 s) and SIGTERM (1 s); SIGKILL ends it.
    # Without the orphan grace this took the two 60 s periods given above.
    assert out["how"] == "SIGKILL" and out["seconds"] < 30, out
    assert out["left"] == [], out  # reaped by the driver (the subreaper), not left as a zombie
