"""The sparsifier specs the whole-step tests run: every `conf/sparsifier/` option, plus the knob
variants that change the exchange (`method:knob=value:...`, as tests/helpers/harness.py reads them)."""
from __future__ import annotations

from experiments.engine.launcher.compose import CONF_DIR

# DEFT at density 0.3 has common units (k_l = size) on the harness's model: added by every rank
# unexchanged (released, the default) or sent by the leader. MiCRO's calibrated threshold start
# adds an all-reduce of one float64 at step 0. Ok-Topk's preset spends its first 128 steps
# dense and recomputes every 32: the tests' few steps run its schedule shortened instead (step 0
# dense, then a recompute-and-repartition step, a step on the kept thresholds, a recompute alone).
OKTOPK_SHORT = "oktopk:warmup_steps=1:threshold_every=2:regions_every=3"
# Its paper variant (exactly k selected and kept, the balancing before the all-gather) on the same
# schedule: the recompute steps change nothing there but th_glob, the repartition still moves regions.
OKTOPK_PAPER = f"{OKTOPK_SHORT}:variant=paper"


def short_schedules(names: list[str]) -> list[str]:
    """Sparsifier options as few-step tests run them: Ok-Topk's on its shortened schedule."""
    return [OKTOPK_SHORT if name == "oktopk" else name for name in names]


EVERY_METHOD = short_schedules(sorted(p.stem for p in (CONF_DIR / "sparsifier").glob("*.yaml"))) + [
    "topk:exchange=sparse_allgather", "deft:norms=global", "deft:density=0.3", "deft:density=0.3:common_units=leader",
    "micro:threshold_start=calibrated", OKTOPK_PAPER,
]
