"""The engine: the code a run executes. From the bottom: `core` (one step over the hosted ranks),
`rank` (a rank process), `launcher` (the parent, run.py's process), `ddp` (the hook in a user's
own DDP script). docs/architecture.md draws the floors; tests/test_layout.py holds them."""
