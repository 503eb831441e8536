"""Accordion top-k (sparsifiers/accordion.py, docs/algorithms.md "Accordion"), against values
worked out by hand on a model of three parameters (n = 10, 3, 20), driven through the production
step by tests/helpers/stepped_ranks.py:

    K_l = max(1, int(ratio * n_l)): k_low 0.1 -> 1, 1, 2; k_high 0.99 -> 9, 2, 19 (9.9, 2.97, 19.8).

These are the released function's argument defaults (FUNCTION_DEFAULTS), which the cases pass
explicitly; the method's defaults are the lineage's run.sh values, 0.001 and 0.01
(test_defaults_are_the_run_scripts_values), at which every K_l here would be 1.

Each rank's gradient on parameter l is scale * (a fixed random unit vector), so its norm is the
scale given here (to float32 rounding; every relative change below is at least 0.1 away from 0.5).
"""
from __future__ import annotations

import copy
import math

import pytest
import torch

from experiments.runformat import metric_keys as keys
from experiments.runformat.errors import ConfigError
from experiments.engine.launcher.compose import compose_job
from experiments.engine.rank.build import build_sparsifier
from sparsifiers.accordion import Accordion, decide, parameter_k
from sparsifiers.common.layout import Layout
from tests.helpers.compiled_calls import CompiledCalls
from tests.helpers.compiled_calls import kernel_backend
from tests.helpers.stepped_ranks import SteppedRanks, gradients

LAYOUT = Layout.from_shapes([("a", (2, 5)), ("b", (3,)), ("c", (4, 5))])
SIZES = [10, 3, 20]
LOW, HIGH = [1, 1, 2], [9, 2, 19]
FUNCTION_DEFAULTS = {"k_low": 0.1, "k_high": 0.99}  # AccordionTopKReducer's argument defaults, an option


def unit_vectors(seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    vectors = [torch.randn(size, generator=generator, dtype=torch.float64) for size in SIZES]
    return [v / v.norm() for v in vectors]


def gradient(norms: list[float], seed: int) -> torch.Tensor:
    """A flat gradient whose parameter l has norm norms[l]."""
    return torch.cat([(scale * v).float() for scale, v in zip(norms, unit_vectors(seed))])


def reference_selection(acc: torch.Tensor, ks: list[int]) -> list[int]:
    """The top-K_l |acc| of every parameter, ties by lower index: sorted global indices."""
    chosen, offset = [], 0
    for size, k in zip(SIZES, ks):
        part = acc[offset : offset + size].abs().tolist()
        order = sorted(range(size), key=lambda i: (-part[i], i))[:k]
        chosen += [offset + i for i in order]
        offset += size
    return sorted(chosen)


def make_world(world_size: int = 2, **knobs) -> SteppedRanks:
    knobs = {**FUNCTION_DEFAULTS, **knobs}
    return SteppedRanks([Accordion(LAYOUT, world_size, rank, density=0.001, **knobs) for rank in range(world_size)])


def drive(world: SteppedRanks, t: int, steps_per_epoch: int, lr: float | None, norms: list[list[float]]):
    """One step at `t`: start_epoch and set_learning_rate as the runner calls them, then the step."""
    for sparsifier in world.sparsifiers:
        sparsifier.start_epoch(t // steps_per_epoch, steps_per_epoch)
        if lr is not None:
            sparsifier.set_learning_rate(lr)
    grads = [gradient(rank_norms, 100 * t + rank) for rank, rank_norms in enumerate(norms)]
    return world.step(grads, t)


def check_step(step, ks: list[int], world_size: int) -> None:
    """Every rank's selection is the top-K_l per parameter of its acc; the aggregate is the mean
    of the selected values; each residual is acc with its own selection zeroed, exactly."""
    mean = torch.zeros(sum(SIZES), dtype=torch.float64)
    for acc, chosen, residual in zip(step.accs, step.selections, step.residuals):
        assert chosen.tolist() == reference_selection(acc, ks)
        mean[chosen] += acc[chosen].double()
        kept = acc.clone()
        kept[chosen] = 0
        assert torch.equal(residual, kept)
    assert step.counts == [sum(ks)] * world_size
    torch.testing.assert_close(step.aggregate.double(), mean / world_size, rtol=1e-6, atol=1e-7)


def test_k_per_parameter_by_hand():
    sparsifier = Accordion(LAYOUT, 2, 0, density=0.001, **FUNCTION_DEFAULTS)
    assert (sparsifier.k_of[False], sparsifier.k_of[True]) == (LOW, HIGH)
    assert sparsifier.k == sum(HIGH) == 30 and sparsifier.density == 30 / 33  # the all-k_high plan
    assert Accordion(LAYOUT, 2, 0, density=0.001, k_low=0.5).k_of[False] == [5, 1, 10]  # 1.5 -> 1
    assert parameter_k(0.1, 9) == 1 and parameter_k(0.99, 1) == 1  # at least one
    assert parameter_k(0.3, 10) == 3  # float32(0.3) = 0.30000001192...: 3.0000001 -> 3


def test_detection_rule_case_by_case():
    previous = torch.tensor([1.0, 2.0, 4.0, 2.0])
    none_dropped = dict(first=False, lr_dropped=False)
    # |prev - curr| / prev: 0.4, 0.6, 0, and 0.5 exactly (not above the threshold)
    assert decide(torch.tensor([1.4, 3.2, 4.0, 3.0]), previous, 0.5, **none_dropped).tolist() == [False, True, False, False]
    assert decide(torch.tensor([0.6, 0.7, 4.0, 1.0]), previous, 0.5, **none_dropped).tolist() == [False, True, False, False]
    assert decide(torch.tensor([1.0, 2.0, 4.0, 2.0]), previous, 0.5, first=True, lr_dropped=False).all()
    assert decide(torch.tensor([1.0, 2.0, 4.0, 2.0]), previous, 0.5, first=False, lr_dropped=True).all()
    # A previous norm of 0: x / 0 = inf picks k_high, 0 / 0 = NaN picks k_low (as released).
    assert decide(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]), 0.5, **none_dropped).tolist() == [True, False]
    assert math.isnan(float((torch.tensor(0.0) - torch.tensor(0.0)).abs() / torch.tensor(0.0)))


def test_two_ranks_follow_rank_zeros_decisions_only_at_detection_steps():
    """switch_freq 2, 2 steps per epoch: detections at steps 0, 4, 8, 12 (batch 0 of epochs 0, 2,
    4, 6). Rank 1's own norms would decide otherwise; rank 0's plan is what both follow."""
    world = make_world(switch_freq=2)
    rank1 = [5.0, 5.0, 5.0]
    schedule = {  # step: (lr, rank 0's norms, rank 1's norms, the K_l both use)
        0: (0.1, [1.0, 2.0, 4.0], rank1, HIGH),  # first detection: k_high everywhere
        1: (0.1, [9.0, 9.0, 9.0], rank1, HIGH),
        2: (0.1, [0.1, 0.1, 0.1], rank1, HIGH),  # batch 0 of epoch 1: no detection
        3: (0.1, [1.0, 2.0, 4.0], rank1, HIGH),
        # 0.4 -> low, 0.6 -> high, 0 -> low; rank 1 (prev 5): 0.8 high, 19 high, 0 low
        4: (0.1, [1.4, 3.2, 4.0], [1.0, 100.0, 5.0], [LOW[0], HIGH[1], LOW[2]]),
        5: (0.1, [50.0, 0.01, 50.0], rank1, [LOW[0], HIGH[1], LOW[2]]),
        6: (0.1, [50.0, 0.01, 50.0], rank1, [LOW[0], HIGH[1], LOW[2]]),  # epoch 3: no detection
        7: (0.1, [1.0, 1.0, 1.0], rank1, [LOW[0], HIGH[1], LOW[2]]),
        8: (0.01, [1.4, 3.2, 4.0], rank1, HIGH),  # norms unchanged, but the learning rate dropped
        9: (0.01, [1.4, 3.2, 4.0], rank1, HIGH),
        # 0.7 -> high, 0.2 -> low, 0 -> low; the lr is the previous detection's: no drop
        12: (0.01, [0.42, 3.84, 4.0], rank1, [HIGH[0], LOW[1], LOW[2]]),
        13: (0.02, [0.42, 3.84, 4.0], rank1, [HIGH[0], LOW[1], LOW[2]]),
        16: (0.02, [0.42, 3.84, 4.0], rank1, LOW),  # no change, the learning rate rose: k_low
    }
    detections = 0
    for t in range(17):
        lr, norms0, norms1, ks = schedule.get(t, (schedule[max(s for s in schedule if s <= t)][0], [1.0, 1.0, 1.0], rank1, None))
        step = drive(world, t, 2, lr, [norms0, norms1])
        detection = t % 4 == 0
        assert (step.leader, step.plan is not None) == ((0, True) if detection else (None, False)), t
        detections += detection
        if ks is None:
            ks = [world.sparsifiers[0].k_of[high][l] for l, high in enumerate(world.sparsifiers[0]._high)]
        else:
            assert all(s.current_k == sum(ks) for s in world.sparsifiers), t
        check_step(step, ks, 2)
        metrics = [s.metrics() for s in world.sparsifiers]
        assert metrics[0][keys.ACCORDION_HIGH] == metrics[1][keys.ACCORDION_HIGH]
        assert metrics[0][keys.ACCORDION_DETECTIONS] == detections
        assert (keys.ACCORDION_PARAMETER_HIGH in metrics[0]) == detection
    logged = world.sparsifiers[0].metrics()
    assert logged[keys.ACCORDION_PARAMETER_HIGH] == [0.0, 0.0, 0.0]
    assert logged[keys.ACCORDION_PARAMETER_NORMS] == pytest.approx([0.42, 3.84, 4.0], rel=1e-5)


def test_norms_are_the_raw_gradients_not_the_accumulator():
    """Every step a detection (switch_freq 1, 1 step per epoch), k_high 0.1 below k_low 0.5 so
    that the plan shows the choice. The same gradient twice: its norm does not change (k_low),
    although acc = grad + residual grew by about 90% (it would pick k_high)."""
    world = make_world(k_low=0.5, k_high=0.1, switch_freq=1)
    high, low = [1, 1, 2], [5, 1, 10]
    for t, ks in enumerate([high, low, low]):
        for sparsifier in world.sparsifiers:
            sparsifier.start_epoch(t, 1)
        step = world.step([gradient([1.0, 2.0, 4.0], rank) for rank in range(2)], t)
        check_step(step, ks, 2)


def test_without_a_learning_rate_the_rule_is_off_and_no_schedule_means_step_zero_only():
    world = make_world()
    for t in range(3):  # no start_epoch: epoch 0, so step 0 is the only detection
        step = world.step([gradient([1.0, 1.0, 1.0], rank) for rank in range(2)], t)
        assert step.leader == (0 if t == 0 else None)
        check_step(step, HIGH, 2)


def test_resume_is_exact_between_detections():
    def run(stop: int | None):
        world = make_world(switch_freq=2)
        saved = None
        for t in range(14):
            if t == stop:
                saved = ([copy.deepcopy(s.state_dict()) for s in world.sparsifiers], [r.clone() for r in world.residuals])
                world = make_world(switch_freq=2)  # a fresh world, loaded as the runner does: after start_epoch
                for sparsifier in world.sparsifiers:
                    sparsifier.start_epoch(t // 2, 2)
                for sparsifier, state, residual, mine in zip(world.sparsifiers, saved[0], saved[1], world.residuals):
                    sparsifier.load_state_dict(state)
                    assert sparsifier.state_dict() == state
                    mine.copy_(residual)
            lr = 0.1 if t < 8 else 0.01
            norms = [[1.0 + 0.7 * math.sin(t + l) ** 2 for l in range(3)], [2.0, 2.0, 2.0]]
            step = drive(world, t, 2, lr, norms)
            yield step.selections, [s.state_dict() for s in world.sparsifiers]

    for (never, never_state), (resumed, resumed_state) in zip(run(None), run(6)):
        assert [s.tolist() for s in never] == [s.tolist() for s in resumed]
        assert never_state == resumed_state


@pytest.mark.parametrize("knob, value", [("k_low", 0.0), ("k_high", 1.5), ("threshold", -0.1), ("switch_freq", 0),
                                         ("switch_freq", 2.5), ("exchange", "union_allreduce")])
def test_bad_knobs_name_their_key(knob, value):
    with pytest.raises(ConfigError, match=knob):
        Accordion(LAYOUT, 2, 0, density=0.01, **{knob: value})


def test_describe_and_density_is_ignored():
    sparsifier = Accordion(LAYOUT, 4, 3, density=0.001, **FUNCTION_DEFAULTS)
    described = sparsifier.describe()
    assert described["requested_density"] == 0.001 and described["k"] == 30
    assert (described["k_all_low"], described["k_all_high"], described["exchange"]) == (4, 30, "sparse_allgather")
    assert sparsifier.current_density == 30 / 33


def test_both_kernel_paths_select_the_same():
    """k_high 0.1: 4 K_l < n_l, so ExactTopK takes its compiled path under kernels=auto (at the
    released function's k_high 0.99 it takes the reference, 4 K_l >= n_l). Run alone on a fresh
    clone (nothing compiled yet), numba compiles the kernels inside the spy: CompiledCalls must
    leave the kernel module's globals alone for that compile to succeed."""
    sizes = [40_000, 5_000, 10]
    layout = Layout.from_shapes((f"p{i}", (size,)) for i, size in enumerate(sizes))

    def history(backend: str):
        with kernel_backend(backend), CompiledCalls().watching() as spy:
            world = SteppedRanks([Accordion(layout, 2, rank, density=0.01, k_high=0.1) for rank in range(2)])
            steps = [world.step(gradients(sizes, 2, t), t) for t in range(3)]
        return [([s.tolist() for s in step.selections], step.aggregate.tolist()) for step in steps], set(spy.calls)

    reference, _ = history("torch")
    fast, calls = history("auto")
    assert fast == reference and "topk_at_cut" in calls


def test_defaults_are_the_run_scripts_values():
    """k_low 0.001 and k_high 0.01: what all three lineage repositories pass in their run.sh
    (--k_low=0.001 --k_high=0.01), in the constructor and in conf/sparsifier/accordion.yaml; the
    released function's own defaults, 0.1 and 0.99, stay reachable as knobs. Here, 0.01 * 20 =
    0.2 and the rest smaller: every K_l is 1 at either ratio."""
    sparsifier = Accordion(LAYOUT, 2, 0)
    assert (sparsifier.k_low, sparsifier.k_high, sparsifier.threshold, sparsifier.switch_freq) == (0.001, 0.01, 0.5, 10)
    assert sparsifier.k_of == {False: [1, 1, 1], True: [1, 1, 1]}
    described = sparsifier.describe()
    assert (described["k_low"], described["k_high"]) == (0.001, 0.01)
    cfg = compose_job(["sparsifier=accordion", "dataset=synthetic", "model=mlp"])
    assert (cfg.sparsifier.k_low, cfg.sparsifier.k_high, cfg.sparsifier.switch_freq) == (0.001, 0.01, 10)
    built = build_sparsifier(compose_job(["sparsifier=accordion", "dataset=synthetic", "model=mlp",
                                          "sparsifier.k_low=0.1", "sparsifier.k_high=0.99"]), LAYOUT, rank=0)
    assert (built.k_low, built.k_high, built.k_of[False], built.k_of[True]) == (0.1, 0.99, LOW, HIGH)
