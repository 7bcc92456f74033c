"""The read path's modules import pandas only when a table is built, never at their import.

Why: a command that never builds a table (``copyprof --help``, ``models``, a one-line error
about a bad path) should not pay pandas' ~0.3 s import, and the decode workers fork before
pandas is loaded (a worker needs none of it). pandas is not imported on a side thread while
the workers decode either: with the native scanner that overlap does not pay for itself
(benchmarks/README.md, entry 28).

The check runs in a fresh interpreter: this test process has pandas loaded already.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import REPO


def test_the_read_path_does_not_import_pandas_at_import() -> None:
    # Every module a Kineto read goes through before a table is built (the CLI's reading, the
    # decode pool, the reader, the table cache, the event table and copy taxonomy).
    code = """
        import sys
        import copyprof.cli.read_progress, copyprof.cli.progress, copyprof.reading, copyprof.readers.discover, copyprof.readers.kineto.pool
        import copyprof.readers.kineto, copyprof.readers.kineto.columns, copyprof.readers.kineto.native, copyprof.cache.tables
        import copyprof.events, copyprof.taxonomy.copies, copyprof.cli.report_cmd, copyprof.cli.inspect_cmd
        print("pandas" in sys.modules)
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert proc.stdout.strip() == "False"
