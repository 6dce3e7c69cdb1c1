"""Per-run tools: pure functions of the run model (and tables where they must be)."""
