"""Generic statistics copyprof's A/B uses (no knowledge of traces or copies)."""
