"""Build hook for the optional native Kineto scanner (everything else is in pyproject.toml).

The extension is optional: where no C compiler is available the build goes on without it,
and copyprof reads Kineto traces with its pure-Python path (same tables, ~2-3x slower;
copyprof/readers/kineto_native.py says which path is in use).
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "copyprof.readers._kineto_scan",
            sources=["copyprof/readers/_kineto_scan.c"],
            depends=["copyprof/readers/_json_scan.h", "copyprof/readers/_kineto_values.h"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
