"""Mutation check: realistic bugs, planted one at a time, each of which the fast tier must catch.

    make mutants                      # every bug below; exits 1 if one survives
    python tests/helpers/mutants.py --only union_mean_over_w_minus_1,allreduce_traffic_halved

Each mutant replaces one exact piece of code (which must occur once: a mutant whose code has
changed is reported as stale, never silently skipped) in a copy of the repository's tracked files,
then runs the fast tier there (`pytest -m "not slow" -x`), the tests that should catch it first
(on their own), so that a killed mutant costs seconds. A mutant survives if the whole fast tier passes.
A kill counts only if the test that failed passes on the copy without the mutant (checked once
per test), so a broken environment or a flaky test never passes for a caught bug. When you fix a
bug the suite did not catch, add it here with the test that now catches it.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    first: tuple[str, ...]  # test files that should catch it: run before the rest of the fast tier


MUTANTS = (
    # -- exchange semantics ------------------------------------------------------------------
    Mutant("union_mean_over_w_minus_1", "experiments/engine/core/exchange/index_set.py",
           "out.index_copy_(0, indices, values.div_(comm.world_size))",
           "out.index_copy_(0, indices, values.div_(comm.world_size - 1))", ("tests/test_exchange.py",)),
    Mutant("sparse_allgather_not_averaged", "experiments/engine/core/exchange/allgather.py",
           "all_values.view(-1).index_select(0, pairs))\n    out.div_(comm.world_size)",
           "all_values.view(-1).index_select(0, pairs))", ("tests/test_exchange.py",)),
    Mutant("union_drops_the_shared_indices", "experiments/engine/core/exchange/index_set.py",
           "        union = torch.cat([union, shared.to(device=out.device, dtype=torch.int64)])\n",
           "", ("tests/test_deft.py", "tests/test_exchange.py")),
    Mutant("union_drops_its_last_index", "sparsifiers/common/kernels/union.py",
           "    return torch.unique(rows[valid].long())", "    return torch.unique(rows[valid].long())[:-1]",
           ("tests/test_kernels.py", "tests/test_exchange.py")),
    Mutant("sparse_allgather_zeroes_the_union", "experiments/engine/core/exchange/allgather.py",
           "    return ExchangeResult(torch.tensor(sizes, dtype=torch.int64), int(union.numel()), [s.long() for s in selections])",
           "    return ExchangeResult(torch.tensor(sizes, dtype=torch.int64), int(union.numel()), [union.long() for _ in selections])",
           ("tests/test_full_step.py",)),
    Mutant("leader_counted_on_every_rank", "experiments/engine/core/exchange/index_set.py",
           "    counts[leader] = selection.numel()", "    counts[:] = selection.numel()", ("tests/test_full_step.py",)),
    # -- gTop-k's tree merge ----------------------------------------------------------------
    Mutant("gtopk_merge_keeps_one_value_of_a_common_index", "experiments/engine/core/exchange/tree.py",
           "    sums.index_add_(0, slot, torch.cat([values, incoming_values.to(values.dtype)]))",
           "    sums.index_copy_(0, slot, torch.cat([values, incoming_values.to(values.dtype)]))", ("tests/test_gtopk.py",)),
    Mutant("gtopk_zeroes_its_whole_selection", "experiments/engine/core/exchange/tree.py",
           "    zeroed = [selection[torch.isin(selection, final_indices)] for selection in selections]",
           "    zeroed = list(selections)", ("tests/test_gtopk.py", "tests/test_full_step.py")),
    Mutant("gtopk_merges_round_to_float32", "experiments/engine/core/exchange/tree.py",
           "MERGED_DTYPE = torch.float64", "MERGED_DTYPE = torch.float32", ("tests/test_gtopk.py",)),
    Mutant("gtopk_round_priced_as_its_messages_in_turn", "experiments/engine/core/collective_costs.py",
           "    return max((point_to_point_s(c, nbytes, source, destination) for source, destination in pairs), default=0.0)",
           "    return sum((point_to_point_s(c, nbytes, source, destination) for source, destination in pairs), 0.0)",
           ("tests/test_network.py",)),
    Mutant("gtopk_round_sends_to_the_wrong_peer", "experiments/engine/core/collective_costs.py",
           "    return [(source, source - stride) for source in range(stride, world_size, 2 * stride)]",
           "    return [(source, source - 1) for source in range(stride, world_size, 2 * stride)]",
           ("tests/test_network.py", "tests/test_gtopk.py")),
    # -- Ok-Topk's sparse reduce-scatter ------------------------------------------------------
    Mutant("oktopk_owner_keeps_sums_equal_to_the_threshold", "experiments/engine/core/exchange/regions.py",
           "sums != 0 if threshold is None else sums.abs() > threshold", "sums != 0 if threshold is None else sums.abs() >= threshold",
           ("tests/test_oktopk.py",)),
    Mutant("oktopk_recompute_keeps_everything_gathered", "experiments/engine/core/exchange/regions.py",
           "        keep = min(indices.numel(), method.k)", "        keep = indices.numel()", ("tests/test_oktopk.py",)),
    Mutant("oktopk_paper_ties_ignore_the_owners_before", "experiments/engine/core/exchange/regions.py",
           "    ties_before = torch.cumsum(every[:, 1], 0) - every[:, 1]", "    ties_before = torch.zeros_like(every[:, 1])",
           ("tests/test_oktopk.py",)),
    Mutant("oktopk_paper_balancing_gives_the_remainder_to_the_last_ranks", "experiments/engine/core/exchange/regions.py",
           "    balanced = [total // W + (i < total % W) for i in range(W)]",
           "    balanced = [total // W + (i >= W - total % W) for i in range(W)]", ("tests/test_oktopk.py", "tests/test_full_step.py")),
    Mutant("oktopk_zeroes_its_whole_selection", "experiments/engine/core/exchange/regions.py",
           "    zeroed = [selection[aggregated[selection]] for selection in selections]",
           "    zeroed = [selection for selection in selections]", ("tests/test_oktopk.py", "tests/test_full_step.py")),
    Mutant("oktopk_regions_average_over_w_minus_1", "sparsifiers/oktopk.py",
           'inner = torch.div(cut_sums.to(torch.int64), self.world_size, rounding_mode="floor")',
           'inner = torch.div(cut_sums.to(torch.int64), self.world_size - 1, rounding_mode="floor")', ("tests/test_oktopk.py",)),
    Mutant("oktopk_climbs_once_more", "sparsifiers/oktopk.py",
           "            for _ in range(RAISE_LIMIT):", "            for _ in range(RAISE_LIMIT + 1):", ("tests/test_oktopk.py",)),
    Mutant("oktopk_threshold_rounded_to_float32_after_each_scaling", "sparsifiers/oktopk.py",
           "    return threshold / factor if divide else threshold * factor",
           "    return float(np.float32(threshold / factor if divide else threshold * factor))", ("tests/test_oktopk.py",)),
    Mutant("shift_round_metered_at_the_receiver", "experiments/engine/core/traffic.py",
           "            self.sent[source] += sizes[source] * element_bytes",
           "            self.sent[destination] += sizes[source] * element_bytes", ("tests/test_network.py", "tests/test_oktopk.py")),
    Mutant("all_gatherv_ring_forwards_the_wrong_block", "experiments/engine/core/traffic.py",
           "np.roll(sizes, -1)", "np.roll(sizes, 1)", ("tests/test_network.py", "tests/test_oktopk.py")),
    # -- the dense baselines: bf16/fp16 rounding and PowerSGD's low-rank exchange ---------------
    Mutant("dense_low_precision_sum_not_rounded", "experiments/engine/core/exchange/dense.py",
           "        out.copy_(out.to(wire_dtype))\n", "", ("tests/test_dense_baselines.py",)),
    Mutant("dense_low_precision_metered_at_four_bytes", "experiments/engine/core/exchange/dense.py",
           "wire_element_bytes=torch.finfo(wire_dtype).bits // 8", "wire_element_bytes=None",
           ("tests/test_dense_baselines.py",)),
    Mutant("low_rank_q_summed_not_averaged", "experiments/engine/core/exchange/dense.py",
           "    q = _summed(comm, [m.low_rank_q(acc, p_sum) for m, acc in zip(methods, accs)]).div_(world_size)",
           "    q = _summed(comm, [m.low_rank_q(acc, p_sum) for m, acc in zip(methods, accs)])",
           ("tests/test_dense_baselines.py",)),
    Mutant("low_rank_compresses_the_vanilla_steps", "experiments/engine/core/exchange/dense.py",
           "    if not methods[0].low_rank_active(step):", "    if False:", ("tests/test_dense_baselines.py",)),
    Mutant("low_rank_residual_zeroed_not_acc_minus_aggregate", "experiments/engine/core/error_feedback.py",
           "        acc.sub_(subtracted)", "        acc.zero_()", ("tests/test_dense_baselines.py",)),
    # -- the cluster network model ---------------------------------------------------------------
    Mutant("cluster_auto_picks_the_dearest_all_reduce", "experiments/engine/core/network.py",
           "return min(costs.ALL_REDUCE, key=lambda name: costs.ALL_REDUCE[name](c, nbytes))",
           "return max(costs.ALL_REDUCE, key=lambda name: costs.ALL_REDUCE[name](c, nbytes))", ("tests/test_network.py",)),
    Mutant("cluster_auto_all_gather_always_ring", "experiments/engine/core/network.py",
           "        return min(costs.ALL_GATHER, key=lambda name: costs.ALL_GATHER[name](c, bytes_per_rank))",
           "        return \"ring\"", ("tests/test_network.py",)),
    Mutant("flat_ring_pays_the_inter_latency_on_every_step", "experiments/engine/core/collective_costs.py",
           "return ring_s(c, W - 1, N - 1, bytes_per_rank) if W > 1 else 0.0",
           "return ring_s(c, W - 1, W - 1, bytes_per_rank) if W > 1 else 0.0", ("tests/test_network.py",)),
    Mutant("bruck_pays_a_latency_per_rank", "experiments/engine/core/collective_costs.py",
           "return _log2_ceil(ranks) * link.alpha_s + (ranks - 1) * block / link.bytes_per_s",
           "return (ranks - 1) * link.alpha_s + (ranks - 1) * block / link.bytes_per_s", ("tests/test_network.py",)),
    Mutant("inter_efficiency_ignored", "experiments/engine/core/network.py",
           "return Link(self.latency_us, rate if self.efficiency == 1 else rate * self.efficiency)",
           "return Link(self.latency_us, rate)", ("tests/test_network.py",)),
    Mutant("hierarchical_inter_phase_ignores_the_shared_nic", "experiments/engine/core/collective_costs.py",
           "inter = 2 * (N - 1) * c.inter.message_s(nbytes / N)", "inter = 2 * (N - 1) * c.inter.message_s(nbytes / (p * N))",
           ("tests/test_network.py",)),
    # -- traffic -------------------------------------------------------------------------------
    Mutant("broadcast_header_not_metered", "experiments/engine/core/collectives.py",
           "        self.meter.broadcast(1, header.element_size(), root)\n", "", ("tests/test_exchange.py",)),
    Mutant("known_plan_length_still_sends_its_header", "experiments/engine/core/sparsify.py",
           "        shape = None if length is None else (length,)\n", "        shape = None\n", ("tests/test_exchange.py",)),
    Mutant("known_counts_not_checked", "experiments/engine/core/exchange/result.py",
           "        if selection.numel() != sizes[rank]:\n", "        if False:\n", ("tests/test_exchange.py",)),
    Mutant("allreduce_traffic_halved", "experiments/engine/core/traffic.py",
           "        nbytes = 2.0 * (self.world_size - 1) / self.world_size * elements * element_bytes",
           "        nbytes = (self.world_size - 1) / self.world_size * elements * element_bytes", ("tests/test_exchange.py",)),
    Mutant("allgather_padding_not_metered", "experiments/engine/core/collectives.py",
           "        self.meter.all_gather(local_rows[0].numel(), local_rows.element_size())",
           "        self.meter.all_gather(int((local_rows[0] != -1).sum()), local_rows.element_size())", ("tests/test_exchange.py",)),
    Mutant("broadcast_root_not_counted_as_sender", "experiments/engine/core/traffic.py",
           "            self.sent[rank] += binomial_children(relative, self.world_size) * nbytes",
           "            self.sent[rank] += (relative != 0) * nbytes", ("tests/test_exchange.py",)),
    # -- metrics -------------------------------------------------------------------------------
    Mutant("buildup_counts_the_shared_units", "experiments/engine/core/metrics.py",
           "    selected = union - result.shared", "    selected = union", ("tests/test_deft.py", "tests/test_exchange.py")),
    Mutant("load_imbalance_without_minus_one", "experiments/engine/core/metrics.py",
           "context.world_size * float(counts.max()) / total - 1.0", "context.world_size * float(counts.max()) / total",
           ("tests/test_exchange.py",)),
    Mutant("density_error_against_the_configured_k", "experiments/engine/core/metrics.py",
           "    k_target = k_now or context.k_target", "    k_target = context.k_target", ("tests/test_exchange.py", "tests/test_dgc.py")),
    Mutant("overlap_counts_the_common_units", "experiments/engine/core/metrics.py",
           "        keys.OVERLAP: total / selected if selected", "        keys.OVERLAP: total / union if union", ("tests/test_full_step.py",)),
    Mutant("density_without_the_common_units", "experiments/engine/core/metrics.py",
           "        keys.DENSITY_ACTUAL: union / context.numel,", "        keys.DENSITY_ACTUAL: selected / context.numel,", ("tests/test_full_step.py",)),
    Mutant("loss_of_rank_zero_only", "experiments/engine/core/metrics.py",
           "        keys.LOSS: float(column[\"loss\"].mean()),", "        keys.LOSS: float(column[\"loss\"][0]),", ("tests/test_full_step.py",)),
    Mutant("rel_residual_as_a_ratio_of_means", "experiments/engine/core/metrics.py",
           "        metrics[keys.REL_RESIDUAL] = float(ratio.mean())",
           "        metrics[keys.REL_RESIDUAL] = float(column[\"residual_norm\"].mean() / column[\"acc_norm\"].mean())", ("tests/test_full_step.py",)),
    # -- task metrics (tests/test_task_metrics.py: each against numbers worked out by hand) ------
    Mutant("accuracy_over_the_whole_test_split", "experiments/engine/core/tasks/classification.py",
           "{keys.ACCURACY: correct / count,", "{keys.ACCURACY: correct / len(data.test_y),", ("tests/test_task_metrics.py",)),
    Mutant("top5_as_top4", "experiments/engine/core/tasks/classification.py",
           "logits.topk(5, dim=1)", "logits.topk(4, dim=1)", ("tests/test_task_metrics.py",)),
    # In effect the mean of the batch means: the short last batch weighs as much as a full one.
    Mutant("classification_loss_per_batch", "experiments/engine/core/tasks/classification.py",
           '            loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))',
           "            loss_sum += float(F.cross_entropy(logits, labels)) * count / -(-count // batch_size)",
           ("tests/test_task_metrics.py",)),
    Mutant("classification_last_short_batch_dropped", "experiments/engine/core/tasks/classification.py",
           "        for start in range(0, count, batch_size):", "        for start in range(0, count - batch_size + 1, batch_size):",
           ("tests/test_task_metrics.py",)),
    Mutant("classification_eval_limit_one_too_many", "experiments/engine/core/tasks/classification.py",
           "min(limit, len(data.test_y))", "min(limit + 1, len(data.test_y))", ("tests/test_task_metrics.py",)),
    Mutant("lm_loss_mean_of_window_means", "experiments/engine/core/tasks/language_model.py",
           '            loss_sum += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.to(device).reshape(-1), reduction="sum"))\n'
           "            tokens += targets.numel()",
           "            loss_sum += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.to(device).reshape(-1)))\n"
           "            tokens += 1", ("tests/test_task_metrics.py",)),
    Mutant("lm_loss_per_row_not_per_token", "experiments/engine/core/tasks/language_model.py",
           "            tokens += targets.numel()", "            tokens += targets.shape[0]", ("tests/test_task_metrics.py",)),
    Mutant("perplexity_over_the_inputs_not_the_targets", "experiments/engine/core/tasks/language_model.py",
           "math.exp(min(mean, 700.0))", "math.exp(min(loss_sum / grid.numel(), 700.0))", ("tests/test_task_metrics.py",)),
    Mutant("lm_eval_limit_one_too_few", "experiments/engine/core/tasks/language_model.py",
           "max(limit, 2 * self.data.eval_batch_size)", "max(limit - 1, 2 * self.data.eval_batch_size)",
           ("tests/test_task_metrics.py",)),
    Mutant("lm_eval_limit_floor_one_row", "experiments/engine/core/tasks/language_model.py",
           "max(limit, 2 * self.data.eval_batch_size)", "max(limit, self.data.eval_batch_size)", ("tests/test_task_metrics.py",)),
    Mutant("lm_no_target_scores_perplexity_one", "experiments/engine/core/tasks/language_model.py",
           '        if not tokens:\n            return {keys.PERPLEXITY: float("nan"), keys.EVAL_LOSS: float("nan")}\n'
           "        mean = loss_sum / tokens",
           "        mean = loss_sum / max(tokens, 1)", ("tests/test_task_metrics.py",)),
    Mutant("hr_cut_at_rank_k_inclusive", "experiments/engine/core/tasks/recommendation.py",
           "            hit = rank < top_k", "            hit = rank <= top_k", ("tests/test_task_metrics.py",)),
    Mutant("hr_ties_favour_the_positive", "experiments/engine/core/tasks/recommendation.py",
           "rank = (~(scores[:, 1:] < scores[:, :1])).sum(dim=1)", "rank = (~(scores[:, 1:] <= scores[:, :1])).sum(dim=1)",
           ("tests/test_task_metrics.py",)),
    Mutant("hr_nan_ranks_the_positive_first", "experiments/engine/core/tasks/recommendation.py",
           "rank = (~(scores[:, 1:] < scores[:, :1])).sum(dim=1)", "rank = (scores[:, 1:] >= scores[:, :1]).sum(dim=1)",
           ("tests/test_task_metrics.py",)),
    Mutant("ndcg_gain_of_a_one_based_rank", "experiments/engine/core/tasks/recommendation.py",
           "torch.log2(rank[hit].double() + 2.0)", "torch.log2(rank[hit].double() + 1.0)", ("tests/test_task_metrics.py",)),
    Mutant("ndcg_gain_one_rank_too_low", "experiments/engine/core/tasks/recommendation.py",
           "torch.log2(rank[hit].double() + 2.0)", "torch.log2(rank[hit].double() + 3.0)", ("tests/test_task_metrics.py",)),
    Mutant("recommendation_last_short_chunk_dropped", "experiments/engine/core/tasks/recommendation.py",
           "        for start in range(0, candidates.shape[0], chunk):",
           "        for start in range(0, candidates.shape[0] - chunk + 1, chunk):", ("tests/test_task_metrics.py",)),
    # -- error feedback and the step ----------------------------------------------------------
    Mutant("accumulate_drops_the_residual", "experiments/engine/core/error_feedback.py",
           "    residual.add_(gradient)", "    residual.copy_(gradient)", ("tests/test_error_feedback.py",)),
    Mutant("residual_zeroes_too_little", "experiments/engine/core/error_feedback.py",
           "        acc.index_fill_(0, zeroed, 0)", "        acc.index_fill_(0, zeroed[:-1], 0)", ("tests/test_error_feedback.py",)),
    Mutant("summary_keeps_the_first_evaluation", "experiments/engine/rank/summary.py",
           "        self.evals = {key: float(\"nan\") for key in self.evals}\n"
           "        self.evals.update({key: _as_logged(value) for key, value in metrics.items() if key.startswith(keys.EVAL_PREFIX)})",
           "        self.evals = {**{key: _as_logged(value) for key, value in metrics.items() if key.startswith(keys.EVAL_PREFIX)},\n"
           "                      **{key: value for key, value in self.evals.items() if value == value}}", ("tests/test_headline.py",)),
    Mutant("meter_not_reset_between_steps", "experiments/engine/rank/train.py",
           "            world.comm.meter.reset()\n", "", ("tests/test_training_loop.py",)),
    Mutant("eval_every_steps_evaluates_the_last_step_twice", "experiments/engine/rank/train.py",
           "            if not at_loop_end:\n", "            if True:\n", ("tests/test_training_loop.py",)),
    Mutant("plan_time_left_out_of_the_leaders_selection", "experiments/engine/core/sparsify.py",
           "    select_ms = [watch.ms(begin, end) + (plan_ms if rank == leader else 0.0)",
           "    select_ms = [watch.ms(begin, end)", ("tests/test_full_step.py",)),
    Mutant("compute_time_only_after_backward", "experiments/engine/core/step.py",
           "            loss.backward()\n", "            loss.backward()\n        start = time.perf_counter()\n", ("tests/test_full_step.py",)),
    Mutant("exchange_timed_before_it_runs", "experiments/engine/core/sparsify.py",
           "    result = exchange(method.exchange, request)\n"
           "    exchange_end = watch.mark()",
           "    exchange_end = watch.mark()\n"
           "    result = exchange(method.exchange, request)", ("tests/test_full_step.py",)),
    Mutant("compute_mean_is_the_max", "experiments/engine/core/metrics.py",
           "        keys.COMPUTE_MEAN: float(column[\"compute_ms\"].mean()),", "        keys.COMPUTE_MEAN: float(column[\"compute_ms\"].max()),", ("tests/test_full_step.py",)),
    Mutant("cltk_plan_one_index_too_many", "sparsifiers/cltk.py",
           "        return self._top_k(acc, self.k)", "        return self._top_k(acc, self.k + 1)", ("tests/test_full_step.py",)),
    Mutant("error_feedback_off_keeps_the_residual", "experiments/engine/core/error_feedback.py",
           "    if not sparsifier.error_feedback:\n        acc.zero_()", "    if False:\n        acc.zero_()", ("tests/test_full_step.py",)),
    # -- sparsifiers ---------------------------------------------------------------------------
    Mutant("micro_threshold_rule_inverted", "sparsifiers/common/threshold_control.py",
           "    if rho > 1.1:\n        return 1.005", "    if rho > 1.1:\n        return 0.995", ("tests/test_micro.py",)),
    # A calibrated threshold start (sparsifiers/common/threshold_start.py): the (k+1)-th largest, calibrated
    # again at every step, and lambda_0 left out of the checkpoint (a resumed run calibrates again).
    Mutant("threshold_start_kth_off_by_one", "sparsifiers/common/threshold_start.py",
           "torch.topk(acc.abs(), k, sorted=False)", "torch.topk(acc.abs(), k + 1, sorted=False)",
           ("tests/test_threshold_start.py",)),
    Mutant("threshold_start_recalibrates_every_step", "sparsifiers/common/threshold_start.py",
           "return kth_largest_magnitude(acc, self.k) if self.pending else None",
           "return kth_largest_magnitude(acc, self.k) if self.start == \"calibrated\" else None",
           ("tests/test_threshold_start.py",)),
    Mutant("threshold_start_not_checkpointed", "sparsifiers/common/threshold_start.py",
           "return {\"initial_threshold\": self.initial} if self.start == \"calibrated\" else {}", "return {}",
           ("tests/test_threshold_start.py",)),
    Mutant("exdyna_minimum_ignored", "sparsifiers/exdyna.py",
           "    return 4 * len(partition_blocks) * (partition_blocks[partition] - 1) >= blocks",
           "    return partition_blocks[partition] - 1 >= 0", ("tests/test_exdyna.py",)),
    Mutant("deft_bins_round_robin", "sparsifiers/common/deft_allocation.py",
           "        load, b = heapq.heappop(loads)", "        load, b = loads.pop(0)", ("tests/test_deft.py",)),
    Mutant("dgc_stage_below_the_target_runs_sparser", "sparsifiers/dgc.py",
           "            return max(self.warmup_densities[self._epoch], self.density)",
           "            return self.warmup_densities[self._epoch]", ("tests/test_dgc.py",)),
    Mutant("dgc_momentum_not_masked", "sparsifiers/dgc.py",
           "            self._velocity.index_fill_(0, indices.long(), 0.0)", "            pass", ("tests/test_dgc.py",)),
    Mutant("randomk_seed_per_rank", "sparsifiers/randomk.py",
           "        self._seed = shared_seed(self.seed)",
           "        self._seed = shared_seed(self.seed) + self.rank",
           ("tests/test_threshold_methods.py",)),
    Mutant("gaussiank_threshold_ignores_the_mean", "sparsifiers/gaussiank.py",
           "        threshold = float(mean) + float(std) * self.quantile", "        threshold = float(std) * self.quantile",
           ("tests/test_threshold_methods.py",)),
    Mutant("sidco_gpd_shape_sign_flipped", "sparsifiers/sidco.py",
           "    c = 0.5 * (ratio - 1.0)", "    c = 0.5 * (1.0 - ratio)", ("tests/test_sidco.py",)),
    Mutant("sidco_first_ratio_ignored", "sparsifiers/sidco.py",
           "threshold = self._first_threshold(x, d if stages == 1 or d >= FIRST_RATIO else FIRST_RATIO)",
           "threshold = self._first_threshold(x, d)", ("tests/test_sidco.py",)),
    Mutant("sidco_selects_at_the_threshold", "sparsifiers/common/threshold_control.py",
           "    return float(torch.nextafter(rounded, torch.tensor(math.inf, dtype=dtype)))", "    return float(rounded)",
           ("tests/test_sidco.py",)),
    Mutant("sidco_exp_round_from_the_mean_not_the_excess", "sparsifiers/sidco.py",
           "return float(t_min) - (float(survivors.mean()) - float(t_min)) * math.log(q)",
           "return float(t_min) - float(survivors.mean()) * math.log(q)", ("tests/test_sidco.py",)),
    Mutant("sidco_mode_two_runs_mode_three", "sparsifiers/sidco.py",
           "        if self.stages == -2:", "        if self.stages == -3:", ("tests/test_sidco.py",)),
    Mutant("sidco_divides_by_the_norm_as_a_float", "sparsifiers/sidco.py",
           "        torch.abs(acc, out=x).div_(norm)", "        torch.abs(acc, out=x).div_(value)", ("tests/test_sidco.py",)),
    Mutant("sidco_shifted_buffer_kept_across_devices", "sparsifiers/sidco.py",
           " or buffer.device != survivors.device:", ":", ("tests/test_sidco.py",)),
    Mutant("accordion_defaults_to_the_function_arguments", "conf/sparsifier/accordion.yaml",
           "k_high: 0.01 ", "k_high: 0.99 ", ("tests/test_accordion.py",)),
    Mutant("accordion_constructor_defaults_to_the_function_arguments", "sparsifiers/accordion.py",
           "        k_low: float = 0.001,", "        k_low: float = 0.1,", ("tests/test_accordion.py",)),
    Mutant("accordion_decides_on_the_accumulator", "sparsifiers/accordion.py",
           "        norms = self._norms.detach().float().cpu()  # one host sync per detection",
           "        norms = torch.stack([torch.linalg.vector_norm(acc[a:b]) for a, b in self.segments])",
           ("tests/test_accordion.py",)),
    Mutant("accordion_lr_rise_taken_for_a_drop", "sparsifiers/accordion.py",
           "        lr_dropped = self._lr is not None and self._prev_lr > self._lr",
           "        lr_dropped = self._lr is not None and self._prev_lr < self._lr", ("tests/test_accordion.py",)),
    # -- analysis --------------------------------------------------------------------------------
    Mutant("first_evaluation_instead_of_the_last", "analysis/stats.py",
           '            last = rows.drop_duplicates("run_id", keep="last")', '            last = rows.drop_duplicates("run_id", keep="first")',
           ("tests/analysis/test_analysis_stats.py",)),
    Mutant("spread_over_seeds_without_bessel", "analysis/stats.py",
           "    spread = grouped[names].std(ddof=1)", "    spread = grouped[names].std(ddof=0)",
           ("tests/analysis/test_analysis_stats.py",)),
    Mutant("settled_error_over_the_first_half", "experiments/runformat/headline.py",
           "        return float(np.mean(values[len(values) // 2:]))", "        return float(np.mean(values[: (len(values) + 1) // 2]))",
           ("tests/test_headline.py",)),
    # -- figures ---------------------------------------------------------------------------------
    Mutant("time_axis_curve_not_averaged_over_seeds", "analysis/figures/convergence.py",
           'means = group.groupby("step")[[x, y]].mean()', 'means = group.groupby(x)[[y]].mean().reset_index()',
           ("tests/analysis/test_figure_data.py",)),
    Mutant("compression_error_median_not_mean", "analysis/figures/scaling.py",
           'table = rows.groupby(["series", "workers"])["abs_error"].mean()',
           'table = rows.groupby(["series", "workers"])["abs_error"].median()', ("tests/analysis/test_figure_data.py",)),
    Mutant("selection_time_figure_includes_warmup", "analysis/figures/scaling.py",
           "rows = steps[timing_rows(steps)].assign(series=lambda f: series_labels(f))\n    figure, axes = new_figure()",
           "rows = steps.assign(series=lambda f: series_labels(f))\n    figure, axes = new_figure()",
           ("tests/analysis/test_figure_data.py",)),
    Mutant("step_breakdown_includes_warmup", "analysis/figures/timing.py",
           "rows = steps[timing_rows(steps)].assign", "rows = steps.assign", ("tests/analysis/test_figure_data.py",)),
    Mutant("comparison_bar_colours_in_another_order", "analysis/figures/comparison.py",
           "colors = [method_color(base_method(label)) for label in order]",
           "colors = [method_color(base_method(label)) for label in sorted(grouped.groups)]", ("tests/analysis/test_figure_data.py",)),
    Mutant("comparison_error_bar_std_without_bessel", "analysis/figures/comparison.py",
           "stds = [grouped.get_group(label)[stat].std() for label in order]",
           "stds = [grouped.get_group(label)[stat].std(ddof=0) for label in order]", ("tests/analysis/test_figure_data.py",)),
    Mutant("residual_panel_plots_the_relative_norm", "analysis/figures/convergence.py",
           "(axes[0, 0], c.RESIDUAL,", "(axes[0, 0], c.REL_RESIDUAL,", ("tests/analysis/test_figure_data.py",)),
    Mutant("threshold_figures_last_seed", "analysis/figures/threshold.py",
           '["seed"].transform("min")', '["seed"].transform("max")', ("tests/analysis/test_figure_data_method_state.py",)),
    Mutant("load_imbalance_first_seed_of_all_runs", "analysis/figures/threshold.py",
           '    steps = _first_seed(steps, ["method", "workers"])\n    workers = sorted',
           '    steps = steps[steps["seed"] == steps["seed"].min()]\n    workers = sorted',
           ("tests/analysis/test_figure_data_method_state.py",)),
    Mutant("partition_boundaries_drop_the_last", "analysis/figures/threshold.py",
           "for index in range(1, edges.shape[1] - 1):", "for index in range(1, edges.shape[1] - 2):",
           ("tests/analysis/test_figure_data_method_state.py",)),
    Mutant("legend_worker_styles_reversed", "analysis/figures/style.py",
           "for i, w in enumerate(worker_counts)]", "for i, w in enumerate(reversed(worker_counts))]",
           ("tests/analysis/test_figure_data.py",)),
    Mutant("dgc_ablation_loss_last_step_not_epoch_mean", "analysis/figures/ablation.py",
           'rows.groupby(["run_id", "epoch"])[c.LOSS].mean()', 'rows.groupby(["run_id", "epoch"])[c.LOSS].last()',
           ("tests/analysis/test_figure_data_method_state.py",)),
    Mutant("eval_rows_kept_among_train_rows", "analysis/metrics_io.py",
           "MetricsFile(table.filter(pa.array(~is_eval)), table.filter(pa.array(is_eval)), cut, bad)",
           "MetricsFile(table, table.filter(pa.array(is_eval)), cut, bad)",
           ("tests/analysis/test_figure_data.py", "tests/analysis/test_figure_data_method_state.py")),
    # -- non-finite values and provenance ----------------------------------------------------
    Mutant("parameters_not_checked_after_the_update", "experiments/engine/core/step.py",
           "        check_parameters(model, step)\n", "        pass\n", ("tests/test_skip_nonfinite.py",)),
    Mutant("skip_keeps_an_overflowed_update", "experiments/engine/core/step.py",
           "        guard.restore_update(model, optimizer)\n", "", ("tests/test_skip_nonfinite.py",)),
    Mutant("replica_checksum_blames_nan_on_the_exchange", "experiments/engine/rank/train.py",
           "    if len(non_finite) == len(checksums):", "    if False:", ("tests/test_finite.py",)),
    Mutant("infinity_passes_validation", "experiments/runformat/knob_types.py",
           "if isinstance(number, float) and not math.isfinite(number):",
           "if isinstance(number, float) and math.isnan(number):", ("tests/test_bad_input.py",)),
    Mutant("machines_averaged_together", "analysis/settings.py",
           "        if column.startswith(PROVENANCE_PREFIX)\n        or", "        if False\n        or",
           ("tests/analysis/test_report_groups.py",)),
)


def tracked_copy(destination: Path) -> None:
    """The repository's tracked files (and untracked ones git does not ignore) copied to `destination`."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for relative in filter(None, listed):
        source = REPO / relative
        if source.is_file():
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    # A repository of its own: some tests list the project's files with git ls-files.
    git = ["git", "-c", "user.name=mutants", "-c", "user.email=mutants@localhost"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the tree under test"]):
        subprocess.run([*git, *command], cwd=destination, check=True, capture_output=True)


def run_fast_tier(copy: Path, first: tuple[str, ...], timeout: int) -> tuple[bool, str]:
    """True when some test failed (the mutant is killed), with the first failure's name: the
    `first` files alone (pytest would fold them into the folder's order), then the fast tier."""
    env = {**os.environ, "PYTHONPATH": str(copy), "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    for targets in ([list(first)] if first else []) + [["tests"]]:
        command = [sys.executable, "-m", "pytest", "-m", "not slow", "-x", "-q", "-p", "no:cacheprovider", *targets]
        result = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
        if result.returncode in (0, 5):  # passed, or nothing of the fast tier in these files
            continue
        if result.returncode not in (1, 2):  # 1: a test failed; 2: collection failed (the mutant broke an import)
            raise RuntimeError(f"pytest exit {result.returncode} in the copy:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
        if result.returncode:
            failed = next((line.split(" ", 1)[1] for line in result.stdout.splitlines()
                           if line.startswith(("FAILED ", "ERROR "))), f"pytest exit {result.returncode}")
            return True, failed.split(" - ")[0]
    return False, ""


def passes_unmutated(copy: Path, test: str, timeout: int) -> bool:
    """The test that killed a mutant, run alone on the copy without it: a test that fails anyway
    (a broken environment, a flaky test) proves nothing about the mutant."""
    env = {**os.environ, "PYTHONPATH": str(copy), "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    return subprocess.run(command, cwd=copy, env=env, capture_output=True, timeout=timeout).returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated mutant names")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per mutant")
    parser.add_argument("--baseline", action="store_true",
                        help="first run the fast tier on the unmutated copy (it must pass: a kill then means the bug)")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if args.only is None or m.name in args.only.split(",")]
    unknown = sorted(set(args.only.split(",")) - {m.name for m in MUTANTS}) if args.only else []
    if unknown:
        sys.exit(f"--only: no mutant named {', '.join(unknown)} (the names are in tests/helpers/mutants.py)")
    confirmed: set[str] = set()  # killing tests seen passing on the unmutated copy
    survived, stale = [], []
    with tempfile.TemporaryDirectory(prefix="mutants-") as folder:
        copy = Path(folder)
        tracked_copy(copy)
        if args.baseline:
            failed, by = run_fast_tier(copy, (), args.timeout)
            if failed:
                sys.exit(f"the unmutated copy fails the fast tier ({by}): fix that first")
        for mutant in chosen:
            path = copy / mutant.path
            original = path.read_text()
            if original.count(mutant.old) != 1:
                stale.append(mutant.name)
                print(f"{mutant.name:<42} STALE: its code occurs {original.count(mutant.old)} times in {mutant.path}", flush=True)
                continue
            path.write_text(original.replace(mutant.old, mutant.new))
            started = time.perf_counter()
            try:
                killed, by = run_fast_tier(copy, mutant.first, args.timeout)
            finally:
                path.write_text(original)
            if killed and by not in confirmed:  # a kill counts only if that test passes without the mutant
                if not passes_unmutated(copy, by, args.timeout):
                    sys.exit(f"{mutant.name}: {by} fails without the mutant too: fix that first")
                confirmed.add(by)
            verdict = f"killed by {by}" if killed else "SURVIVED"
            print(f"{mutant.name:<42} {verdict} ({time.perf_counter() - started:.0f} s)", flush=True)
            if not killed:
                survived.append(mutant.name)
    print(f"{len(chosen) - len(survived) - len(stale)} of {len(chosen)} killed; survived: {', '.join(survived) or 'none'}"
          + (f"; stale: {', '.join(stale)}" if stale else ""))
    sys.exit(1 if survived or stale else 0)


if __name__ == "__main__":
    main()
