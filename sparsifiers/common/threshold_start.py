"""Where MiCRO's threshold rule starts (`threshold_start`, a knob of MiCRO and ExDyna).

    released    lambda_0 = 1 / (2 sqrt(k)), the released code's start (the default).
    calibrated  lambda_0 = the mean over ranks of each rank's exact k-th largest |acc| at the
                first step, identical on every rank; the rule takes over from the next step.

Why the option exists: 1 / (2 sqrt(k)) knows nothing of the model's gradient magnitudes, and
MiCRO's rule moves lambda by at most 0.5% a step, so a start off by a factor f costs about
ln f / ln 1.005 steps of climbing (139 for f = 2). The calibrated start makes the first step's
density right. It does not foresee error feedback: the residuals of what was not sent build up
over the first steps, lambda settles well above the first step's k-th largest |acc|, and the
rule still climbs there at 0.5% a step. So it helps where 1 / (2 sqrt(k)) lies below the first
step's magnitudes (the quickstart's CNN: mean density error over the epoch +1.21 instead of
+2.05) and hurts where 1 / (2 sqrt(k)) lies between them and the settled lambda (docs/algorithms.md,
"Threshold start", has the measurements). It is a departure from the released code, recorded in
the config and in `describe()`.

Why each rank's k-th largest over the whole vector estimates the threshold that makes |U| ~ k:
rank r selects |acc_r| >= lambda in its own partition P_r only, the partitions are disjoint and
tile the vector, so |U| = sum_r #{i in P_r : |acc_r[i]| >= lambda}. At the first step the ranks'
accumulators are gradients of different batches of one model: alike in distribution along the
vector, so each partition's count is about what a typical acc has above lambda there, and |U| is
about the count of a typical acc above lambda over the whole vector, which is k when lambda is
that acc's k-th largest |acc|. The mean over ranks estimates that typical value, and is the same
on every rank. Not the k-th largest of the mean acc: averaging cancels what the ranks disagree
on, so the mean is smaller and would select more than k; not the maximum over ranks: it sits
above a typical acc's and would select fewer. With W = 1 it is exact: |U| = k (ties aside).

The mechanism is the method's averaged inputs (sparsifiers/common/capabilities.py, `AveragedInputs`):
at the first step each rank contributes its k-th largest |acc| as a one-element float64 tensor,
the world all-reduces the mean (one metered all-reduce of 8 bytes) and hands it to every rank
before anything is selected. float64 because the sum of W <= 512 float32 values within a factor 2^20 of each other
is then exact (24 + 20 + 9 bits <= 53), so every summation order (hosted, ring, rank order)
gives the same lambda_0, bit for bit. The cost, at that step only: one exact top-k over the
rank's N elements (in the step's time, not in time/select_ms: the world computes averaged
inputs before it times selection, as for DEFT's global norms) and that all-reduce in the
step's traffic. Later steps contribute nothing and issue no extra collective.

"The first step" is the first step that reaches the exchange: a step skipped before it
(`on_nonfinite=skip`) restores the sparsifier's state, calibration still pending, and the next
step calibrates. The calibrated value is state: a run resumed after it does not recalibrate.
If the mean is 0 (every rank has fewer than k non-zero elements) the released start is kept: a
multiplicative rule could never leave lambda = 0.
"""
from __future__ import annotations

from typing import Any

import torch

from experiments.runformat.errors import ConfigError
from sparsifiers.common.threshold_control import initial_threshold

THRESHOLD_STARTS = ("released", "calibrated")


def check_threshold_start(start: str) -> str:
    """Returns `start` if it is a known variant, else raises ConfigError naming the key."""
    if start not in THRESHOLD_STARTS:
        raise ConfigError(
            f"sparsifier.threshold_start must be released or calibrated, got {start}: released starts lambda at "
            f"1/(2 sqrt(k)) (the authors' code), calibrated at the first step's k-th largest |acc| averaged over ranks"
        )
    return start


def kth_largest_magnitude(acc: torch.Tensor, k: int) -> torch.Tensor:
    """The exact k-th largest |acc| over the whole vector, as a one-element float64 tensor on
    acc's device (float32 values convert to float64 exactly)."""
    return torch.topk(acc.abs(), k, sorted=False).values.min().reshape(1).to(torch.float64)


class ThresholdStart:
    """lambda_0 of one rank's threshold: known at once (released) or after the first step's
    average over ranks (calibrated)."""

    def __init__(self, start: str, k: int) -> None:
        self.start = check_threshold_start(start)
        self.k = k
        # lambda_0 once known; None while calibration is pending.
        self.initial: float | None = initial_threshold(k) if start == "released" else None

    @property
    def pending(self) -> bool:
        """True until the calibrated start has received the world's average."""
        return self.initial is None

    def contribution(self, acc: torch.Tensor) -> torch.Tensor | None:
        """This rank's averaged input: its k-th largest |acc| while pending, else None."""
        return kth_largest_magnitude(acc, self.k) if self.pending else None

    def calibrate(self, mean: torch.Tensor) -> float:
        """Sets and returns lambda_0 from the world's mean of the contributions (called only
        after a step to which this rank contributed)."""
        value = float(mean[0])
        self.initial = value if value > 0.0 else initial_threshold(self.k)
        return self.initial

    def describe(self) -> dict[str, Any]:
        """What `describe()` records: the start and lambda_0 (None before calibration)."""
        return {"threshold_start": self.start, "initial_threshold": self.initial}

    # -- exact resume: the released start has no state (its checkpoints are unchanged) ---------
    def state_dict(self) -> dict[str, Any]:
        return {"initial_threshold": self.initial} if self.start == "calibrated" else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != set(self.state_dict()):
            raise ValueError(f"threshold_start={self.start} state needs {sorted(self.state_dict())}, got {sorted(state)}")
        if self.start == "calibrated":
            initial = state["initial_threshold"]
            self.initial = None if initial is None else float(initial)
