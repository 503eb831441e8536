"""The step core: one sparsified, exchanged optimizer step of every rank a process hosts
(step, exchange, collectives, traffic and network model, world, replica, metrics, tasks).
It imports neither the rank process nor the launcher (tests/test_layout.py)."""
