"""embnorm: does a norm after the embedding help a Pre-LN GPT? The study's instrument, in two layers.

The engine names no study: core/ (one training run), runner/ (a grid of runs: registry types, sweep, reuse, index),
stats/ (paired inference), publishing/ (tables, figures, pages), tools/ (jobs and benchmarks). The study layer
registers into it: studies/ (one declarative entry per study) and analyses/ (one plugin per kind of analysis).
`python -m embnorm_lib <verb>` is the one command line (__main__.py)."""
