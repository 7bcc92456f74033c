"""Caches on disk: parsed event tables and analysed runs, keyed by each file's identity."""
