"""Native code, fenced: the optional C scanner of Kineto event pieces (``scanner``, built by
setup.py from ``scan.c`` with ``json_scan.h`` and ``values.h``).

Nothing outside ``readers/kineto/native.py`` imports it; where it is not built (no compiler)
or is switched off (``COPYPROF_NATIVE=0``) the Python decode gives the same tables.
tests/readers/test_kineto_native.py tests it on its own and against the Python path.
"""
