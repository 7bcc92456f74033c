"""The run directory: its layout, and the run record (run.json) every capture writes."""
