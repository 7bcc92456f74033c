"""Folder put on the vLLM server's PYTHONPATH for ``--profiler rocprofv3`` (see sitecustomize.py)."""
