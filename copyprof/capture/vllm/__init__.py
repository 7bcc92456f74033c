"""Capturing a real vLLM server: ``run.capture_vllm`` serves the model (``command`` builds the
server's argument list, ``server`` owns its process group), drives the fixed-cohort workload
(``client``), opens the profile window and waits for complete traces (``traces``); ``probe``
reads the target environment's versions first; ``plan`` orders A/B runs; ``rocprof_hook`` turns
vLLM's profiler start/stop into rocprofv3 region markers."""
