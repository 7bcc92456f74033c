"""The read path imports pandas only through copyprof.pandas_import, so a command can import it
on a thread while its decode workers run (a cold report on a 1 GB trace: 2.98 -> 2.81 s).

Each check runs in a fresh interpreter: this test process has pandas loaded already.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.capture.capture_fault_fake import REPO


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr  # and no traceback from a thread
    return proc.stdout.strip()


def test_the_read_path_does_not_import_pandas() -> None:
    # Every module a Kineto read goes through before a table is built (the CLI's reading, the
    # decode pool, the reader, the table cache, the event table and copy taxonomy). If one of
    # them imported pandas at its import, the overlap would silently be lost.
    out = _run("""
        import sys
        import copyprof.cli.reading, copyprof.cli.progress, copyprof.reading, copyprof.readers.discover, copyprof.readers.kineto.pool
        import copyprof.readers.kineto, copyprof.readers.kineto.columns, copyprof.readers.kineto.native, copyprof.cache
        import copyprof.events, copyprof.taxonomy.copies, copyprof.cli.report_cmd, copyprof.cli.inspect_cmd
        print("pandas" in sys.modules)
    """)
    assert out == "False"


def test_pandas_waits_for_the_background_import_and_its_configuration() -> None:
    # configure() sleeps after importing: a caller of pandas() must still see its option set,
    # never the half-configured module; a second background import is refused.
    out = _run("""
        import time
        from copyprof import pandas_import

        def configure():
            import pandas as pd
            time.sleep(0.5)
            pd.set_option("display.max_rows", 7)

        started = pandas_import.import_in_background(configure)
        again = pandas_import.import_in_background(configure)
        pd = pandas_import.pandas()
        print(started, again, pd.get_option("display.max_rows"))
    """)
    assert out == "True False 7"


def test_a_failed_background_import_is_left_to_the_caller() -> None:
    # The thread stays quiet (no stray traceback on stderr); pandas() imports again in the
    # caller, so a real import error would surface where the command reports errors (here the
    # second import succeeds: only the thread's attempt was made to fail).
    out = _run("""
        from copyprof import pandas_import

        def configure():
            raise ImportError("broken pandas")

        pandas_import.import_in_background(configure)
        print(pandas_import.pandas().__name__)
    """)
    assert out == "pandas"


def test_nothing_starts_when_pandas_is_already_imported() -> None:
    out = _run("""
        import pandas
        from copyprof import pandas_import
        print(pandas_import.import_in_background(lambda: None), pandas_import.pandas() is pandas)
    """)
    assert out == "False True"
