"""The row of a step that on_nonfinite=skip skipped (experiments/engine/core/skip.py decides the skip;
logging it is the rank process's job): logged whether or not the step is a logging step (it is
an event), fed to the summary like every logged row, and warned about on the terminal."""
from __future__ import annotations

from typing import Any

from experiments.runformat import metric_keys as keys
from experiments.runformat.console import say
from experiments.engine.core.skip import SkipGuard, SkippedStep
from experiments.engine.rank.summary import SummaryAccumulator


def log_skipped(sink, accumulator: SummaryAccumulator, guard: SkipGuard, skipped: SkippedStep,
                hosts_rank_zero: bool, fields: dict[str, Any]) -> None:
    """A skipped step's metric row, then the run's failure past the limit. Every process calls
    it. The accumulator gets the row too: the report reads it from metrics.jsonl (its train/lr
    is the last logged one when the run's last logged row is a skipped one), and summary.json
    must reduce the same rows."""
    row = {keys.SKIPPED: 1.0, keys.SKIPPED_TOTAL: float(guard.total),
           keys.SKIPPED_RANK: -1 if skipped.rank is None else skipped.rank, **fields}
    accumulator.add_logged(skipped.step, row)
    sink.log({"kind": "train", **row}, skipped.step)
    if hosts_rank_zero:
        say(f"warning: step {skipped.step} skipped ({skipped.describe()}; on_nonfinite=skip): "
            f"{guard.in_a_row} in a row, {guard.total} in all")  # above the progress bar
    guard.fail_past_limit(skipped)
