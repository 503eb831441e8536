"""Any sparsebench sparsifier inside your own DistributedDataParallel script (docs/ddp_hook.md, "Use a
sparsifier in your own DDP script"):

    from experiments.ddp import register_sparsifier
    hook = register_sparsifier(ddp_model, "deft", density=0.01)

A fourth role beside the launcher, the rank process and the core (docs/architecture.md): it runs
in the user's own processes, builds a sparsifier as a rank does and drives the core's step.
"""
from experiments.ddp.hook import SparsifierHook, register_sparsifier
from experiments.ddp.sparsifier_node import applies_momentum, sparsifier_names, sparsifier_node

__all__ = ["SparsifierHook", "applies_momentum", "register_sparsifier", "sparsifier_names", "sparsifier_node"]
