"""The training engine: one run of a GPT (config, data, model, train loop, checkpoints, evaluation, the files of
its run directory). Imports nothing above it: no sweep, no report, no study."""
