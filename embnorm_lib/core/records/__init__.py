"""A run on disk: paths and atomic writes, run-directory names, seals, and the per-step logs."""
