"""Native code, fenced: the optional C scanner of Kineto event pieces (``scanner``, built by
setup.py from ``scan.c`` and its headers: ``fast_event.h``, ``json_scan.h``, ``byte_scan.h``,
``interner.h``, ``values.h``).

Nothing outside ``readers/kineto/native.py`` imports it; where it is not built (no compiler)
or is switched off (``COPYPROF_NATIVE=0``) the Python decode gives the same tables.
tests/readers/test_kineto_native.py tests it against the Python path, and
test_kineto_native_modes.py its byte-scan levels and readers against each other.
"""
