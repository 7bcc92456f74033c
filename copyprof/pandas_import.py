"""pandas for the read path, possibly imported on a thread while the decode workers run.

Why: importing pandas costs ~0.3 s of one core, about a tenth of a cold report on a 1 GB
trace, and the Kineto reader needs pandas only when a file's table is built, after its
chunks are decoded. So a command that decodes in worker processes forks them first (a
process with pandas loaded is not needed there) and starts the import on a thread right
after, where it overlaps the decoding on the cores the workers leave.

The modules the read path goes through (events, taxonomy.copies, readers.kineto, cache) get
pandas from :func:`pandas`, never at their import, and :func:`pandas` waits for the
background import *and* the command's configuration of it (``configure``: say, the string
storage option): no table is built by a half-imported or not-yet-configured pandas. A failed
background import is not reported on the thread: :func:`pandas` imports again in the caller,
which raises the error where it can be handled.
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import ModuleType

_background: threading.Thread | None = None


def import_in_background(configure: Callable[[], None]) -> bool:
    """Run ``configure`` (which imports pandas and sets its options) on a thread; False, and
    nothing started, when pandas is already imported or an import is already under way.
    Call after forking any worker processes: a fork while another thread imports could leave
    the child with a held import lock."""
    global _background
    if "pandas" in sys.modules or _background is not None:
        return False
    _background = threading.Thread(target=_quietly, args=(configure,), name="copyprof-import-pandas", daemon=True)
    _background.start()
    return True


def _quietly(configure: Callable[[], None]) -> None:
    try:
        configure()
    except BaseException:  # noqa: BLE001 - pandas() imports again where the error can be reported
        pass


def pandas() -> ModuleType:
    """The pandas module, once any background import and its configuration have finished."""
    global _background
    if _background is not None:
        _background.join()
        _background = None
    import pandas as pd

    return pd
