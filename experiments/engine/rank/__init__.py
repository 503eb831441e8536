"""The rank process: what torchrun starts (worker), the training loop around the step core,
checkpoints, and the sinks that write the run (metrics.jsonl, W&B, the terminal table).
It never imports the launcher (tests/test_layout.py)."""
