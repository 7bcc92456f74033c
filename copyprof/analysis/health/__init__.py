"""Health of a trace: does it hold the work its graph launches ran, do launches hold up the GPU."""
