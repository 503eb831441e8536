"""The released training harness as options: ReleasedSGD and the step schedules match a plain
loop written in the released script's update order, bit for bit on CPU, through the real step.

The reference below is written from the released script's description (docs/algorithms.md, "Common
to the three partition methods"), per parameter tensor, with its own learning-rate arithmetic:
it shares no code with experiments/engine/rank/optimizers.py or experiments/engine/rank/schedule.py.
"""
from __future__ import annotations

import math

import pytest
import torch

from experiments.engine.launcher.compose import compose_job
from experiments.runformat.errors import ConfigError
from experiments.engine.rank.schedule import StepSchedule
from experiments.engine.core.step import train_step
from experiments.engine.rank.train import build_session
from experiments.engine.core.world import init_world

TINY = ["dataset=synthetic", "dataset.num_train=256", "dataset.num_test=32", "model=cnn", "model.width=4",
        "model.hidden=16", "batch_size=8", "processes=1"]


def reference_lr(base: float, epoch: float, warmup_epochs: float, max_factor: float, milestones: list[float]) -> float:
    """The released get_learning_rate: scale by the warm-up factor, then divide by 10 per milestone."""
    lr = base
    if warmup_epochs:
        lr *= 1.0 + (max_factor - 1.0) * min(epoch / warmup_epochs, 1.0)
    for milestone in milestones:
        if epoch >= milestone:
            lr /= 10.0
        else:
            return lr
    return lr


def reference_update(params, grads, momenta, is_norm, step, lr, mu, wd):
    """The released order per tensor: weight decay (0 for BatchNorm), momentum (a copy of g at the
    first step), g += m, p -= lr * g."""
    for index, (param, grad) in enumerate(zip(params, grads)):
        decay = 0.0 if is_norm[index] else wd
        if decay > 0:
            grad.add_(param, alpha=decay)
        if step == 0:
            momenta[index] = grad.clone()
        else:
            momenta[index].mul_(mu).add_(grad)
        grad.add_(momenta[index])
        param.add_(grad, alpha=-lr)


@pytest.mark.parametrize("sparsifier, schedule, momentum", [
    ("dense", "warmup_step", 0.9),
    ("topk", "step", 0.9),
    ("micro", "warmup_step", 0.0),  # the LSTM's setting: momentum 0 doubles the step, as released
])
def test_released_sgd_and_schedule_match_the_released_update_bit_for_bit(sparsifier, schedule, momentum):
    workers, steps = 4, 6
    # Short milestones and warm-up so that a few steps cross both.
    cfg = compose_job([*TINY, f"workers={workers}", f"sparsifier={sparsifier}", "optimizer=released_sgd",
                       f"optimizer.momentum={momentum}", f"schedule={schedule}", "schedule.milestones=[0.5,0.75]",
                       *(["schedule.warmup_epochs=0.25"] if schedule == "warmup_step" else [])])
    world = init_world(workers, "cpu", "gloo", 60)
    session = build_session(cfg, world)
    model = session.model
    norm_ids = {id(p) for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d) for p in m.parameters()}
    params = [p.detach().clone() for p in model.parameters()]
    is_norm = [id(p) in norm_ids for p in model.parameters()]
    assert any(is_norm) and not all(is_norm)
    momenta: list[torch.Tensor | None] = [None] * len(params)

    aggregates: list[list[torch.Tensor]] = []
    real_step = session.optimizer.step

    def capture_then_step():
        aggregates.append([p.grad.detach().clone() for p in model.parameters()])
        real_step()

    session.optimizer.step = capture_then_step
    per_epoch = session.replicas[0].batches.steps_per_epoch
    batches = [iter(r.batches.epoch(0)) for r in session.replicas]
    max_factor = (cfg.batch_size / 128) * workers
    for step in range(steps):
        epoch = step / per_epoch
        lr = session.schedule.set_epoch(epoch)
        expected_lr = reference_lr(0.1, epoch, 0.25 if schedule == "warmup_step" else 0.0, max_factor, [0.5, 0.75])
        assert lr == expected_lr
        train_step(session.ranks, model, session.task, session.optimizer, session.replicas,
                   [next(b) for b in batches], step, False)
        reference_update(params, aggregates[-1], momenta, is_norm, step, expected_lr, momentum, 1e-4)
        for mine, theirs in zip(model.parameters(), params):
            assert torch.equal(mine.detach(), theirs)


def test_schedules_of_the_papers():
    class Holder(torch.optim.SGD):
        pass

    def lrs(schedule: StepSchedule, base: float, batch: int, workers: int, epochs: list[float]) -> list[float]:
        optimizer = Holder([torch.nn.Parameter(torch.zeros(1))], lr=base)
        schedule.bind(optimizer, batch, workers)
        return [schedule.lr_at(epoch) for epoch in epochs]

    micro_cnn = StepSchedule(milestones=[150], warmup_epochs=5, warmup_reference_batch=128)
    assert lrs(micro_cnn, 0.1, 32, 16, [0, 2.5, 5, 149.9, 150]) == pytest.approx([0.1, 0.25, 0.4, 0.4, 0.04])
    micro_lstm = StepSchedule(milestones=[60, 80], warmup_epochs=5, warmup_reference_batch=64)
    assert lrs(micro_lstm, 2.5, 32, 16, [0, 5, 60, 80]) == pytest.approx([2.5, 20.0, 2.0, 0.2])
    deft_lstm = StepSchedule(milestones=[45, 80])
    assert lrs(deft_lstm, 15.0, 32, 16, [0, 44.99, 45, 80]) == pytest.approx([15.0, 15.0, 1.5, 0.15])
    assert math.isclose(lrs(StepSchedule(), 0.05, 32, 8, [199])[0], 0.05)


@pytest.mark.parametrize("override, key", [
    ("schedule.milestones=[150,60]", "schedule.milestones"),
    ("schedule.decay_factor=0", "schedule.decay_factor"),
    ("optimizer.momentum=-1", "optimizer.momentum"),
])
def test_bad_harness_knobs_fail_before_launch(override, key):
    from experiments.engine.launcher.validate import validate

    schedule = "schedule=warmup_step" if override.startswith("schedule") else "schedule=constant"
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(compose_job([*TINY, "optimizer=released_sgd", schedule, override]))


def test_dgc_refuses_the_released_optimizer():
    from experiments.engine.launcher.validate import validate

    with pytest.raises(ConfigError, match="optimizer=sgd"):
        validate(compose_job([*TINY, "sparsifier=dgc", "optimizer=released_sgd"]))
