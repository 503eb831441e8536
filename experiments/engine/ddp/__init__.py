"""Any sparsebench sparsifier inside your own DistributedDataParallel script (docs/ddp_hook.md,
"Use a sparsifier in your own DDP script"), in torch's pattern for communication hooks:

    from experiments.engine.ddp import SparsifierState, sparsifier_hook
    state = SparsifierState(ddp_model, "deft", density=0.01)
    ddp_model.register_comm_hook(state, sparsifier_hook)

or `state = register_sparsifier(ddp_model, "deft", density=0.01)`, which does both.

A fourth role beside the launcher, the rank process and the core (docs/architecture.md): it runs
in the user's own processes, builds a sparsifier as a rank does and drives the core's step. It
needs no conf/ and no Hydra, so an installed wheel runs it; the config-node helpers
(`sparsifier_node`, `sparsifier_names`, `applies_momentum`: conf/sparsifier/ and run.py's checks)
need sparsebench's clone and are imported only when used.
"""
import importlib

from experiments.engine.ddp.hook import register_sparsifier, sparsifier_hook
from experiments.engine.ddp.methods import method_names
from experiments.engine.ddp.state import SparsifierState

__all__ = ["SparsifierState", "applies_momentum", "method_names", "register_sparsifier", "sparsifier_hook",
           "sparsifier_names", "sparsifier_node"]
CLONE_ONLY = ("applies_momentum", "sparsifier_names", "sparsifier_node")


def __getattr__(name: str):
    """The clone-only helpers, imported on first use: importing the hook must not pull in the
    launcher's config composition (and Hydra) that they need."""
    if name in CLONE_ONLY:
        return getattr(importlib.import_module("experiments.engine.ddp.config_node"), name)
    raise AttributeError(f"module 'experiments.engine.ddp' has no attribute {name!r}")
