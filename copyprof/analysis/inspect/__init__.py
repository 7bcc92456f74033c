"""What ``copyprof inspect`` shows: a file's contents, copies first, and its annotated steps."""
