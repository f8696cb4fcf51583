"""One run's training loop (train.py) and its parts (schedule, checkpoints, Ctrl-C, torchrun), and the fleet engine
that trains runs of one shape as one batched model."""
