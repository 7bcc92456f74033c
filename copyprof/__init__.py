"""copyprof: a trace-driven copy-cost profiler for LLM serving."""
__version__ = "0.1.0"
