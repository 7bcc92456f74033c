"""The ``copyprof`` command line (a click group); one module per command."""
from copyprof.cli.main import main

__all__ = ["main"]
