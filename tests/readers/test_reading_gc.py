"""read_traces pauses the cyclic GC while reading and freezes what is alive afterwards
(copyprof/reading.py: settle_heap): the collections the pandas import triggered walked every live
object, and the analysis' collections would walk the tables and modules again.

Checked in a fresh interpreter: the GC must be enabled again after the read (a command that
goes on allocating must still collect its cycles), and the read's survivors must be frozen.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.capture.capture_fault_fake import REPO


def test_gc_is_enabled_again_and_the_read_is_frozen() -> None:
    # The largest shipped trace (78 MB of JSON): read by the decode pool, pandas imported on a thread.
    trace = max(REPO.glob("traces/**/*.pt.trace.json.gz"), key=lambda p: p.stat().st_size)
    code = textwrap.dedent(f"""
        import gc
        from copyprof.cli.read_progress import read_traces
        from copyprof.readers.discover import discover
        before = gc.get_freeze_count()
        [trace] = read_traces(discover([{str(trace)!r}]), 2, False)
        print(gc.isenabled(), before == 0, gc.get_freeze_count() > 0, len(trace.events) > 0)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "True", "True"]


def test_gc_is_enabled_again_when_the_read_fails(tmp_path) -> None:
    bad = tmp_path / "bad.pt.trace.json"
    bad.write_text('{"traceEvents": [{"ph": X}]}')
    code = textwrap.dedent(f"""
        import gc
        from copyprof.cli.read_progress import read_traces
        from copyprof.errors import CopyprofError
        from copyprof.readers.discover import discover
        sources = discover([{str(bad)!r}])  # found as Kineto; the read itself fails
        try:
            read_traces(sources, 1, False)
        except CopyprofError:
            print("error", gc.isenabled())
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["error", "True"]
