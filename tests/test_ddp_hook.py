"""The DDP communication hook (experiments/engine/ddp) against sparsebench's own step.

Real DDP on 2 and 4 gloo processes under torchrun (tests/helpers/ddp_hook_harness.py) trains a small
model with every sparsifier; this process then replays every rank's local gradient, step by
step, through the production step in a hosted world (tests/helpers/stepped_ranks.py) and requires the
same selections, residuals and aggregates, bit for bit, and the same traffic and counts
metrics. The 2-process worlds use the default ring reduction (a sum of two is exact in any
order); the 4-process world uses `reduction=rank_order`, the runner's deterministic mode, as
ring sums of four agree to rounding only. DDP's own variants (several buckets rebuilt after the
first iteration, one bucket, no_sync accumulation, static graphs, autocast, bucket views, unused
parameters) replay the same way, and each run's checkpoint round trip must resume exactly.
"""
from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
import torch

from experiments.runformat import metric_keys as keys
from experiments.engine.core.metrics import MetricContext, exchange_metrics
from experiments.engine.core.traffic import dense_allreduce_bytes
from experiments.engine.ddp import register_sparsifier, sparsifier_names, sparsifier_node
from experiments.engine.ddp.config_node import build_sparsifier
from experiments.runformat.errors import ConfigError
from sparsifiers.common.layout import Layout
from tests.conftest import REPO, run_world
from tests.helpers.specs import short_schedules
from tests.helpers.stepped_ranks import SteppedRanks

sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))
import ddp_hook_harness as harness  # noqa: E402

HARNESS = str(Path(__file__).resolve().parent / "helpers" / "ddp_hook_harness.py")
# Every option of conf/sparsifier/, and the variants that exercise other exchanges and plans.
SPECS = short_schedules(sparsifier_names()) + ["topk:exchange=sparse_allgather", "deft:norms=global", "deft:common_units=leader"]
VARIANT_METHODS = ["deft", "micro", "exdyna", "topk"]  # the model-wide methods the bucket assembly is for
VARIANTS = [v for v in harness.VARIANTS if v not in ("buckets", "nonfinite", "seed_per_rank")]
STEPS = 6
SLOW = pytest.mark.slow  # real DDP under torchrun; the bad-input tests below need no process


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    """Runs the harness once per world: every spec on 2 (ring) and 4 (rank_order) processes,
    and the DDP variants on 2."""
    out = tmp_path_factory.mktemp("ddp_hook")
    run_world([HARNESS, str(out / "w2"), "--methods", ",".join(SPECS), "--steps", str(STEPS)], processes=2)
    run_world([HARNESS, str(out / "w4"), "--methods", ",".join(SPECS), "--steps", str(STEPS),
               "--reduction", "rank_order"], processes=4)
    run_world([HARNESS, str(out / "variants"), "--methods", ",".join(VARIANT_METHODS), "--steps", str(STEPS),
               "--variant", ",".join(VARIANTS)], processes=2)
    return out


def load_ranks(folder: Path, spec: str, variant: str) -> list[dict]:
    files = sorted(folder.glob(f"{spec}.{variant}.rank*.pt"), key=lambda p: int(p.stem.rsplit("rank", 1)[1]))
    assert files, f"no records of {spec} ({variant}) in {folder}"
    return [torch.load(f, weights_only=False) for f in files]


COUNT_KEYS = (keys.SENT_MAX, keys.SENT_MEAN, keys.RECV_MAX, keys.RECV_MEAN, keys.DENSE_BYTES, keys.RATIO,
              keys.DENSITY_ACTUAL, keys.DENSITY_TARGET, keys.DENSITY_ERROR, keys.BUILDUP, keys.OVERLAP,
              keys.K_MAX, keys.K_MEAN, keys.LOAD_IMBALANCE)


def same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def assert_hook_equals_own_step(ranks: list[dict], variant: str) -> None:
    """Replays every rank's local gradients through sparsebench's step; all must agree."""
    first = ranks[0]
    world_size = first["world_size"]
    assert len(ranks) == world_size
    layout = Layout.from_module(harness.Net(branch=variant == "unused"))
    node = sparsifier_node(first["name"], first["knobs"])
    sparsifiers = [build_sparsifier(node, layout, world_size, r, first["seed"]) for r in range(world_size)]
    for sparsifier in sparsifiers:
        sparsifier.start_epoch(0, 100)
    own = SteppedRanks(sparsifiers, reduction=first["reduction"])
    method = sparsifiers[0]
    context = MetricContext(layout.numel, method.k, method.density, method.scope, world_size,
                            dense_allreduce_bytes(layout.numel, world_size), exchange=method.exchange)
    nonzero = 0
    for step in range(STEPS):
        records = [rank["records"][step] for rank in ranks]
        replayed = own.step([record["gradient"] for record in records], step)
        expected = exchange_metrics(replayed.result, own.comm.meter, context, method.current_k, method.current_density)
        for rank, record in enumerate(records):
            where = f"{first['name']} {variant} W={world_size} step {step} rank {rank}"
            mine, theirs = record["selection"], replayed.selections[rank]
            assert (mine is None) == (theirs is None), where
            assert mine is None or torch.equal(mine, theirs), f"{where}: selections differ"
            assert torch.equal(record["residual"], replayed.residuals[rank]), f"{where}: residuals differ"
            assert torch.equal(record["aggregate"], replayed.aggregate), f"{where}: aggregates differ"
            stats = record["stats"]
            assert stats[keys.ROW_STEP] == step
            for key in COUNT_KEYS:
                assert same(stats[key], expected[key]), f"{where}: {key} {stats[key]} != {expected[key]}"
            assert stats[keys.HOOK_RESIDUAL] == pytest.approx(float(replayed.residuals[rank].norm()), rel=1e-6)
            assert stats[keys.HOOK_SELECT] >= 0 and stats[keys.HOOK_TOTAL] >= stats[keys.HOOK_SELECT]
        nonzero += int(replayed.aggregate.count_nonzero())
    assert nonzero > 0, "nothing was ever aggregated: the comparison would be empty"
    assert all(rank["resumed_equal"] for rank in ranks), "a run resumed from the hook's checkpoint went another way"


@SLOW
@pytest.mark.parametrize("spec", SPECS)
def test_two_ddp_processes_equal_sparsebench_step(worlds, spec):
    ranks = load_ranks(worlds / "w2", spec, "buckets")
    assert_hook_equals_own_step(ranks, "buckets")
    # DDP's first iteration packs this small model into one bucket (its first bucket holds 1 MB),
    # then rebuilds the buckets with the tiny bucket_cap_mb: both layouts are exercised.
    buckets = [r["stats"][keys.HOOK_BUCKETS] for r in ranks[0]["records"]]
    assert buckets[0] == 1 and min(buckets[1:]) > 1, f"expected one bucket, then several after the rebuild: {buckets}"


@SLOW
@pytest.mark.parametrize("spec", SPECS)
def test_four_ddp_processes_equal_sparsebench_step(worlds, spec):
    assert_hook_equals_own_step(load_ranks(worlds / "w4", spec, "buckets"), "buckets")


@SLOW
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("method", VARIANT_METHODS)
def test_ddp_variants_equal_sparsebench_step(worlds, method, variant):
    ranks = load_ranks(worlds / "variants", method, variant)
    assert_hook_equals_own_step(ranks, variant)
    if variant == "one_bucket":
        assert {r["stats"][keys.HOOK_BUCKETS] for r in ranks[0]["records"]} == {1.0}


@SLOW
def test_no_sync_exchanges_once_per_step(worlds):
    """Under no_sync the hook runs once per step, on the last micro-batch's backward (that it
    exchanges the sum of the micro-batches' gradients is the replay's equality above: the
    harness replays their sum)."""
    ranks = load_ranks(worlds / "variants", "deft", "no_sync")
    assert [r["stats"][keys.ROW_STEP] for r in ranks[0]["records"]] == list(range(STEPS))


@SLOW
def test_a_parameter_no_rank_used_still_gets_its_aggregate(worlds):
    """find_unused_parameters: at odd steps no rank uses the branch, DDP writes no bucket into its
    .grad, yet its residual (built up at even steps) is selected and leaves the residual; the
    aggregate must reach .grad (the replay's equality checks the values; this, that it happened)."""
    ranks = load_ranks(worlds / "variants", "topk", "unused")
    layout = Layout.from_module(harness.Net(branch=True))
    branch = [s for s in layout.segments if s.name.startswith("branch.")]
    start, end = branch[0].offset, branch[-1].end
    odd = [ranks[0]["records"][t]["aggregate"][start:end] for t in range(1, STEPS, 2)]
    assert any(int(a.count_nonzero()) > 0 for a in odd), "the branch was never selected at a step no rank used it"


# -- bad input: one line naming the key, before anything is registered ------------------------
def test_unknown_method_lists_the_options():
    with pytest.raises(ConfigError, match="sparsifier=dfet is not one of conf/sparsifier/: choose one of .*deft"):
        sparsifier_node("dfet")


def test_mistyped_knob_names_the_knob_and_the_known_ones():
    with pytest.raises(ConfigError, match=r"sparsifier\.densty is not a knob of sparsifier=deft; its knobs: density"):
        sparsifier_node("deft", {"densty": 0.1})


def test_wrong_knob_type_names_the_key():
    with pytest.raises(ConfigError, match=r"sparsifier\.density"):
        sparsifier_node("micro", {"density": "abc"})


def test_a_config_node_needs_a_target():
    with pytest.raises(ConfigError, match="_target_"):
        sparsifier_node({"density": 0.1})


def test_a_config_node_is_read_like_the_file():
    node = sparsifier_node({"_target_": "sparsifiers.topk.TopK", "density": 0.2})
    assert node._partial_ and node.density == 0.2


def test_the_hook_needs_a_ddp_model():
    with pytest.raises(ConfigError, match="needs a DistributedDataParallel model, got Linear"):
        register_sparsifier(torch.nn.Linear(2, 2), "topk")


@SLOW
def test_every_stat_the_hook_returns_is_defined_in_the_metrics_doc(worlds):
    documented = set(re.findall(r"`([a-z0-9_]+(?:/[a-z0-9_]+)?)`", (REPO / "docs" / "metrics.md").read_text()))
    returned = set()
    for path in (worlds / "w2").glob("*.rank0.pt"):
        returned |= set(torch.load(path, weights_only=False)["records"][-1]["stats"])
    missing = sorted(returned - documented)
    assert not missing, f"docs/metrics.md does not define: {missing}"


@SLOW
def test_a_nonfinite_gradient_or_a_seed_per_rank_fails_on_every_rank(tmp_path):
    """Rank 1's NaN stops every rank's backward at that step with an error naming it, instead of
    rank 0 waiting in a collective until the process group's timeout."""
    run_world([HARNESS, str(tmp_path), "--methods", "randomk", "--variant", "nonfinite,seed_per_rank"], processes=2)
    raised = [torch.load(tmp_path / f"randomk.nonfinite.rank{r}.pt", weights_only=False)["raised"] for r in range(2)]
    assert [r["step"] for r in raised] == [harness.NAN_STEP] * 2
    assert f"non-finite gradient at step {harness.NAN_STEP} on rank {harness.NAN_RANK}" in raised[1]["message"]
    assert f"at step {harness.NAN_STEP} on another rank" in raised[0]["message"]
    assert all("restart from your last checkpoint" in r["message"] for r in raised)

    # The same run: seed + rank (as many DDP scripts seed) gives Random-k other indices on
    # every rank, and is refused on every rank at registration, naming the key.
    refused = [torch.load(tmp_path / f"randomk.seed_per_rank.rank{r}.pt", weights_only=False)["raised"] for r in range(2)]
    fix = "pass the same method, knobs, seed, reduction and log_every on every rank"
    assert [r[0] for r in refused] == [f"seed differs across ranks (0 on rank 0, 1 on rank 1): {fix}"] * 2
    assert [r[1] for r in refused] == [f"sparsifier.density differs across ranks (0.05 on rank 0, 0.1 on rank 1): {fix}"] * 2


@SLOW
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: the NCCL path of the hook")
def test_nccl_processes_on_gpus_equal_sparsebench_step(tmp_path):
    """Every registered method runs on CUDA tensors over NCCL (one process per GPU, at most 2):
    its plans and broadcasts must reach the group's device (DEFT's and Accordion's are built on
    the CPU). Methods whose selections follow from comparisons and counts only must also replay
    bit for bit on the CPU (norm-based plans may round differently on the GPU)."""
    processes = min(torch.cuda.device_count(), 2)
    exact = ["topk", "micro", "exdyna", "randomk"]
    run_world([HARNESS, str(tmp_path), "--methods", ",".join(SPECS), "--steps", str(STEPS), "--device", "cuda"],
              processes=processes, torchrun=True)
    for spec in SPECS:
        assert len(load_ranks(tmp_path, spec, "buckets")) == processes, spec
    for method in exact:
        assert_hook_equals_own_step(load_ranks(tmp_path, method, "buckets"), "buckets")
