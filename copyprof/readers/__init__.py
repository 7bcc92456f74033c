"""Readers: one module per trace format, each returning ``list[Trace]`` (see copyprof.events)."""
