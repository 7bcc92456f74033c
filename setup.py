"""Build hook for the optional native Kineto scanner (everything else is in pyproject.toml).

The extension is optional: where no C compiler is available the build goes on without it,
and copyprof reads Kineto traces with its pure-Python path (same tables, ~2-3x slower;
copyprof/readers/kineto/native.py says which path is in use).
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "copyprof.readers.kineto.low_level.scanner",
            sources=["copyprof/readers/kineto/low_level/scan.c"],
            depends=[f"copyprof/readers/kineto/low_level/{h}.h"
                     for h in ("json_scan", "interner", "byte_scan", "values", "fast_event", "known_keys", "name_guess", "kept")],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
