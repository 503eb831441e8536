"""SIDCo (Abdelmoniem et al., MLSys 2021): a threshold from a fitted sparsity-inducing
distribution, refined over a few stages, as the released code (sands-lab/SIDCo, compression.py:
ExpCompressorEC, GParetoCompressorEC, GammaGParetoCompressorEC, adapt_stages) computes it.

    1. Mode: `stages` < 0 is adaptive (-1, -2, -3): the stage count used is this rank's
       `cur_stages` (starts at 1, moved by step 7); otherwise `stages` itself.
    2. Input: x = |acc| / ||acc||_2 (acc = gradient + residual, the framework's error feedback).
    3. First stage: q1 = d if stages == 1 or d >= 0.25 (FIRST_RATIO), else 0.25; a threshold
       that leaves a fraction q1 of x above it under a fit of x:
         exp      th = -mean(x) ln q1
         gpareto  m, v = mean, unbiased variance of x; sigma = m (m^2/v + 1) / 2,
                  c = (m^2/v - 1) / 2; th = sigma (1 - q1^c) / c   (c = 0: the exponential limit)
         gamma    s = ln mean(x) - mean(ln(x + 2.22e-16)); a = (3 - s + sqrt((s - 3)^2 + 24 s)) / (12 s);
                  b = mean(x) / a; th = b * gammaincinv(a, 1 - q1)
    4. Later stages: R = d / 0.25; stages > 1: rho = R^(1/(stages-1)) over L = stages - 1 rounds;
       stages == 0: rho = i_ratio, L = ceil(ln R / ln rho), the last round at R / rho^(L-1).
       Each round: survivors = {x > th} among the previous survivors, t_min their minimum,
       y = survivors - t_min; exp: th = t_min - mean(y) ln rho; gpareto and gamma: the GPD of
       step 3 fitted to y, th = t_min + sigma (1 - rho^c) / c.
    5. Selection: {x > th} (strictly) over the whole vector; the values sent are acc's, signed.
    6. Error feedback: the framework's (residual = acc with the transmitted coordinates zeroed:
       the released ec weights 1.0 / 0.0).
    7. Adaptive stages (observe): est = the mean of |S_r| / (d N) over UPDATE_ITER = 5 steps;
       -1: est > 1.2 -> one stage fewer, est < 0.8 -> one more; -2: the step's direction flips
       when |est - 1| grew since the last estimate; -3: it flips unless est moves back toward 1
       from outside the band; cur_stages is clamped to [1, ceil(ln d / ln 0.5)].
    8. Exchange: sparse_allgather (the released code all-gathers values and int32 indices of
       variable length, sums, divides by W; the framework's all-gather pads to the largest count).

Departures from the released code where it has a plain defect (docs/algorithms.md, "sidco"):
acc = 0 selects nothing without computing NaN; a round whose survivors are fewer than two
distinct values (none, one, or all equal) stops at the previous threshold instead of raising
or selecting nothing; m^2 = v is the exponential limit, v = 0 and s <= 0 the degenerate fits'
limits. Thresholds are computed in float64 and rounded to x's dtype once, where the released
code computes them in float32 tensors.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from experiments.runformat import metric_keys as keys
from experiments.runformat.errors import ConfigError
from sparsifiers.common.base import SelectionScope, Sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind, Feedback
from sparsifiers.common.kernels import AtLeastSelector
from sparsifiers.common.layout import Layout
from sparsifiers.common.threshold_control import strict_cut
from sparsifiers.common.workspace import scratch

DISTRIBUTIONS = ("exp", "gpareto", "gamma")
# The released defaults (settings.py and the trainer's arguments).
I_RATIO = {"exp": 0.2, "gpareto": 0.075, "gamma": 0.1}  # iratio per compressor family
FIRST_RATIO = 0.25  # FIRST_RATIO (ADJUST_FR is False: never tuned)
UPDATE_ITER = 5  # calls averaged before the stage count moves
BAND = (0.8, 1.2)  # 1 - RES_DIFF_DOWN, 1 + RES_DIFF_UP
ADAPTIVE = (-1, -2, -3)
EPSILON = 2.220446049250313e-16  # sys.float_info.epsilon, the released gamma fit's guard


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def gpd_threshold(mean: float, var: float, q: float) -> float:
    """The (1 - q)-quantile of a generalized Pareto fitted by the method of moments:
    sigma (1 - q^c) / c with sigma = m (m^2/v + 1) / 2, c = (m^2/v - 1) / 2 (c is -xi)."""
    if q == 1.0:
        return 0.0
    if var <= 0.0:  # no spread: the limit v -> 0 (sigma / c -> m, q^c -> 0 for q < 1)
        return mean
    ratio = mean * mean / var
    sigma = 0.5 * mean * (ratio + 1.0)
    c = 0.5 * (ratio - 1.0)
    if c == 0.0:  # m^2 = v: the exponential limit, (1 - q^c) / c -> -ln q
        return -sigma * math.log(q)
    z = c * math.log(q)
    if z > 700.0:  # q > 1 with a large c (a later round at rho > 1): prunes nothing
        return -math.inf
    return sigma * -math.expm1(z) / c


def gamma_threshold(mean: float, mean_log: float, q: float) -> float:
    """The (1 - q)-quantile of a gamma fitted by the released code's approximate maximum
    likelihood: s = ln m - mean(ln x), shape a from s, scale b = m / a, b * P^-1(a, 1 - q)."""
    s = math.log(mean) - mean_log
    if not s > 0.0:  # every x equal (s = 0 up to rounding): the limit a -> inf, a point mass at m
        return mean if q < 1.0 else 0.0
    from scipy.special import gammaincinv  # lazily: only the gamma fit needs scipy

    shape = (3.0 - s + math.sqrt((s - 3.0) ** 2 + 24.0 * s)) / (12.0 * s)
    return mean / shape * float(gammaincinv(shape, 1.0 - q))


class SIDCo(Sparsifier):
    """SIDCo with error feedback: a multi-stage threshold from a fitted exp, GPD or gamma."""

    name = "sidco"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.SPARSE_ALLGATHER,)

    def __init__(
        self,
        layout: Layout,
        world_size: int,
        rank: int,
        density: float,
        distribution: str = "exp",
        stages: int = 1,
        i_ratio: float | None = None,
        **knobs,
    ) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        if distribution not in DISTRIBUTIONS:
            raise ConfigError(f"sparsifier.distribution must be exp, gpareto or gamma, got {distribution}")
        if not _is_int(stages) or stages < -3:
            raise ConfigError(f"sparsifier.stages must be an integer >= -3 (-1, -2, -3: adaptive; 0: stages from "
                              f"i_ratio; >= 1: fixed), got {stages}")
        if i_ratio is not None and not (isinstance(i_ratio, (int, float)) and not isinstance(i_ratio, bool)
                                        and 0.0 < i_ratio < 1.0):
            raise ConfigError(f"sparsifier.i_ratio must be in (0, 1) or null (the released default per "
                              f"distribution: {I_RATIO}), got {i_ratio}")
        self.distribution = distribution
        self.stages = stages
        self.i_ratio = float(I_RATIO[distribution] if i_ratio is None else i_ratio)
        self.max_stages = max(1, math.ceil(math.log(self.density) / math.log(0.5)))
        # 7. Adaptive state, this rank's own (the released counters are per worker process).
        self._cur_stages, self._sum_ratio, self._calls, self._last_estimate, self._direction = 1, 0.0, 0, 0.0, 1
        self._last = {"threshold": math.nan, "stages": 0}
        self._selector = AtLeastSelector()
        self._survivors = [torch.empty(0), torch.empty(0)]  # ping-pong, grown when outgrown
        self._shifted = torch.empty(0)
        self._empty = torch.empty(0, dtype=torch.int64)

    # -- helpers ---------------------------------------------------------------------------
    def _buffer(self, which: int, numel: int, like: torch.Tensor) -> torch.Tensor:
        buffer = self._survivors[which]
        if buffer.numel() < numel or buffer.dtype != like.dtype or buffer.device != like.device:
            buffer = torch.empty(max(numel, buffer.numel() * 3 // 2), dtype=like.dtype, device=like.device)
            self._survivors[which] = buffer
        return buffer[:numel]

    def _first_threshold(self, x: torch.Tensor, q: float) -> float:
        """3. The first stage's threshold from a fit of the whole x."""
        if self.distribution == "exp":
            return -float(x.mean()) * math.log(q)
        if self.distribution == "gpareto":
            var, mean = torch.var_mean(x, correction=1 if x.numel() > 1 else 0)
            return gpd_threshold(float(mean), float(var), q)
        logs = scratch("sidco_log", x.numel(), x.dtype, x.device)
        torch.add(x, EPSILON, out=logs).log_()
        return gamma_threshold(float(x.mean()), float(logs.mean()), q)

    def _round(self, survivors: torch.Tensor, q: float) -> float:
        """4. One later round's threshold from the survivors (at least two distinct values)."""
        t_min = survivors.min()
        if self.distribution == "exp":
            return float(t_min) - (float(survivors.mean()) - float(t_min)) * math.log(q)
        buffer = self._shifted
        if buffer.numel() < survivors.numel() or buffer.dtype != survivors.dtype or buffer.device != survivors.device:
            self._shifted = torch.empty(max(survivors.numel(), self._shifted.numel() * 3 // 2),
                                        dtype=survivors.dtype, device=survivors.device)
        shifted = torch.sub(survivors, t_min, out=self._shifted[:survivors.numel()])
        var, mean = torch.var_mean(shifted, correction=1)
        return float(t_min) + gpd_threshold(float(mean), float(var), q)

    # -- selection -------------------------------------------------------------------------
    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        # 1. Mode.
        stages = self._cur_stages if self.stages < 0 else self.stages
        # 2. Input: x = |acc| / ||acc||_2 in scratch (nothing of size N allocated per step).
        norm = torch.linalg.vector_norm(acc)
        value = float(norm)
        if not (value > 0.0 and math.isfinite(value)):  # acc = 0: the released code's NaN selects nothing
            self._last = {"threshold": math.nan, "stages": stages}
            return self._empty.to(acc.device)
        x = scratch("sidco_x", acc.numel(), acc.dtype, acc.device)
        # Divided by the 0-dim tensor, as released (`tensor.abs() / norm`): a true division. By a
        # Python float, CUDA would multiply by its reciprocal instead (one ulp off in about a
        # quarter of x on an H200); the float serves only the zero test above.
        torch.abs(acc, out=x).div_(norm)
        # 3. First stage.
        d = self.density
        threshold = self._first_threshold(x, d if stages == 1 or d >= FIRST_RATIO else FIRST_RATIO)
        # 4. Later stages.
        remaining = d / FIRST_RATIO
        if stages > 1:
            rho, rounds = remaining ** (1.0 / (stages - 1)), stages - 1
        elif stages == 0:
            rho = self.i_ratio
            rounds = max(0, math.ceil(math.log(remaining) / math.log(rho)))
        else:
            rho, rounds = 1.0, 0
        current, which, ran = x, 0, 1
        for i in range(rounds, 0, -1):
            chosen = self._selector(current, strict_cut(threshold, x.dtype), 0)
            if chosen.numel() < 2:  # none or one survivor: nothing to fit, the previous threshold stands
                break
            survivors = torch.index_select(current, 0, chosen, out=self._buffer(which, chosen.numel(), x))
            if bool(survivors.min() == survivors.max()):  # equal survivors: no spread to fit either
                break
            q = remaining / rho ** (rounds - 1) if (i == 1 and stages == 0) else rho
            threshold = self._round(survivors, q)
            current, which, ran = survivors, 1 - which, ran + 1
        self._last = {"threshold": threshold, "stages": ran}
        # 5. Selection: {x > th}, strictly, over the whole vector.
        return self._selector(x, strict_cut(threshold, x.dtype), 0)

    # -- adaptive stages -------------------------------------------------------------------
    def observe(self, feedback: Feedback) -> None:
        # 7. From this rank's own count (feedback carries every rank's: the same on all ranks).
        if self.stages >= 0:
            return
        self._sum_ratio += int(feedback.counts[self.rank]) / self.numel / self.density
        self._calls += 1
        if self._calls < UPDATE_ITER:
            return
        estimate = self._sum_ratio / self._calls
        low, high = BAND
        last = self._last_estimate
        if self.stages == -1:
            if estimate > high:
                self._cur_stages -= 1
            elif estimate < low:
                self._cur_stages += 1
        else:
            if self.stages == -2:
                flip = last > 0 and abs(estimate - 1) > abs(last - 1)
            else:  # -3: keep the direction only while the estimate returns toward 1 from outside the band
                flip = last > 0 and not ((estimate > last and last < low) or (estimate < last and last > high))
            if flip:
                self._direction = -self._direction
            if estimate > high:
                self._cur_stages -= self._direction
            if estimate < low:
                self._cur_stages += self._direction
        self._cur_stages = max(min(self._cur_stages, self.max_stages), 1)
        self._last_estimate, self._sum_ratio, self._calls = estimate, 0.0, 0

    # -- reporting and resume --------------------------------------------------------------
    def metrics(self) -> dict[str, float | list[float]]:
        return {keys.THRESHOLD: self._last["threshold"], keys.STAGES: float(self._last["stages"])}

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(), "distribution": self.distribution, "stages": self.stages,
            "adaptive": self.stages < 0, "i_ratio": self.i_ratio, "first_ratio": FIRST_RATIO,
            "update_iter": UPDATE_ITER, "band": list(BAND), "max_stages": self.max_stages,
        }

    def state_dict(self) -> dict[str, Any]:
        if self.stages >= 0:
            return {}
        return {"cur_stages": self._cur_stages, "sum_ratio": self._sum_ratio, "calls": self._calls,
                "last_estimate": self._last_estimate, "direction": self._direction}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.stages >= 0:
            super().load_state_dict(state)
            return
        self._cur_stages, self._sum_ratio, self._calls = int(state["cur_stages"]), float(state["sum_ratio"]), int(state["calls"])
        self._last_estimate, self._direction = float(state["last_estimate"]), int(state["direction"])
