"""When a run evaluates near its target, and whether it stops there (conf/config.yaml's
`eval_target`, `eval_near`, `eval_near_every`, `stop_at_target`).

A time-to-target curve needs its resolution where the curve crosses the target, not along the
whole run: the run evaluates every `eval_every_steps` steps as always, and every
`eval_near_every` steps from the first evaluation within `eval_near` of the target on. It stays
near after that: an evaluation of a noisy curve dips out of the band and back (the quickstart's
0.784, 0.701, then 0.810 three steps and 36 steps later), and leaving the near cadence on one low
value would read the crossing to `eval_every_steps` again. With `stop_at_target` the run ends at
the first evaluation that reaches the target: the steps after it would not change the steps to
the target.

Whether the run is near (and so its next evaluation step) and where it reached the target go into
each checkpoint (`state_dict`): a run resumed inside the band evaluates at the same steps, with the
same values, as one never stopped.

Only the process hosting rank 0 evaluates. With several processes the others learn of the stop
from a one-value gather at every step rank 0 could have evaluated at (a multiple of either
cadence, and each epoch's end), so that every process leaves the loop at the same step.
"""
from __future__ import annotations

import torch
from omegaconf import DictConfig

from experiments.engine.core.world import World
from experiments.runformat.headline import task_metric


class TargetWatch:
    def __init__(self, cfg: DictConfig, metric: str):
        self.metric = metric
        self.target = cfg.eval_target
        self.near = cfg.eval_near
        self.every = cfg.eval_every_steps
        self.near_every = cfg.eval_near_every
        self.stop = bool(cfg.stop_at_target)
        self.higher_is_better = task_metric(metric).higher_is_better is not False
        self.near_target = False  # an evaluation on rank 0 came within eval_near (it stays: docstring)
        self.reached_at: int | None = None  # the steps done at the first evaluation that reached the target

    def state_dict(self) -> dict[str, bool | int | None]:
        """What a checkpoint keeps: the band (the next evaluation step follows from it) and the reach."""
        return {"near_target": self.near_target, "reached_at": self.reached_at}

    def load_state_dict(self, state: dict[str, bool | int | None]) -> None:
        self.near_target, self.reached_at = bool(state["near_target"]), state["reached_at"]

    def _gap(self, value: float) -> float:
        """How far `value` is short of the target (<= 0: reached)."""
        return self.target - value if self.higher_is_better else value - self.target

    def due(self, steps: int) -> bool:
        """Whether rank 0 evaluates after `steps` steps (the epoch ends aside: always)."""
        return bool(self.every and steps % self.every == 0) or (self.near_target and steps % self.near_every == 0)

    def saw(self, evaluation: dict[str, float], steps: int) -> None:
        value = evaluation.get(self.metric)
        if value is None or self.target is None:
            return
        gap = self._gap(float(value))
        self.near_target = self.near_target or gap <= self.near
        if self.reached_at is None and gap <= 0:
            self.reached_at = steps

    def stops(self, world: World, steps: int, epoch_end: bool = False) -> bool:
        """Whether every process ends the run after `steps` steps (module docstring)."""
        if not self.stop:
            return False
        if world.processes == 1:
            return self.reached_at is not None
        if not (epoch_end or steps % self.near_every == 0 or (self.every and steps % self.every == 0)):
            return False  # rank 0 did not evaluate here: nothing to agree on
        flag = torch.tensor([[float(self.reached_at is not None)]], dtype=torch.float64, device=world.device)
        return bool(world.comm.gather_stats(flag).max() > 0)
