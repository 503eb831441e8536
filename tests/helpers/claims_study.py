"""A synthetic study in which every claim of analysis.claims holds, and per claim the one change
that breaks it and nothing else (tests/analysis/test_claims.py).

Every method runs at W = 2 and 4 on mlp/synthetic at density 0.01 (k = 1000 of N = 100,000),
one seed, 40 logged train rows at steps 0, 12, ..., 468 (the later half, 20 rows from step 240,
is settled) and 4 evaluations. The numbers follow the methods' mechanics: split methods have
build-up 1 and a selection time of 8/W ms, Top-k's union grows with W, the threshold
controllers start 30% above k and settle, traffic follows the exchanges' formulas, DEFT's
per-unit k and bin loads come from the real allocation code (sparsifiers/common/deft_allocation.py),
the partition methods step in half Top-k's time. Rows are written through analysis.synthetic.
"""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from analysis.metrics_io import parse_jsonl
from analysis.runinfo import read_run_info
from analysis.synthetic import NUMEL, SyntheticRun, write_run
from analysis.tables import RunTables, assemble
from experiments.runformat import metric_keys as k
from experiments.runformat import run_dir as files
from sparsifiers.common.deft_allocation import allocate, bin_loads, common_units, unit_cost, unit_k

WORKERS = (2, 4)
METHODS = ("dense", "topk", "cltk", "deft", "micro", "exdyna", "threshold", "sage", "dgc", "oktopk")
DENSITY = 0.01
K = math.floor(DENSITY * NUMEL)
ROWS, EVERY, EPOCHS = 40, 12, 4
SPLIT = ("deft", "micro", "exdyna", "cltk")
PARTITION = ("deft", "micro", "exdyna")
DGC_KNOBS = (("warmup", True), ("clip_norm", 5.0))
# Ok-Topk's schedule (its preset): dense up to step 128, thresholds recomputed every 32 steps after;
# the paper's variant, whose traffic the bound judges.
OKTOPK_KNOBS = (("warmup_steps", 128), ("threshold_every", 32), ("variant", "paper"))
KNOBS = {"dgc": DGC_KNOBS, "oktopk": OKTOPK_KNOBS}
# DEFT's units: one tiny unit (a bias) whose share exceeds its size, so it is common.
UNIT_SIZES = [5] + [9_000] * 10 + [NUMEL - 5 - 90_000]
# Final accuracy and ms per step: within 1 point of dense, partition methods twice as fast.
FINAL = {"dense": 0.90, "deft": 0.898, "micro": 0.898, "exdyna": 0.898, "topk": 0.897, "cltk": 0.896,
         "dgc": 0.895, "threshold": 0.88, "sage": 0.88, "oktopk": 0.896}
STEP_MS = {"dense": 40.0, "topk": 40.0, "cltk": 40.0, "deft": 20.0, "micro": 20.0, "exdyna": 20.0}
PROGRESS = (0.6, 0.85, 0.97, 1.0)  # fraction of the final accuracy at each evaluation

Rows = list[dict]  # one run's metrics.jsonl records, train and eval, in order
Break = Callable[[str, int, Rows], None]  # (method, W, rows) -> mutates rows


def _buildup(method: str, workers: int) -> float:
    return 1.0 if method in SPLIT or method in ("dense", "oktopk") else 1.0 + 0.5 * (workers - 1)


def _density_error(method: str, workers: int, step: int, wiggle: float) -> float:
    if method in ("micro", "exdyna"):
        return 0.3 * math.exp(-step / 100.0) + 0.01 * wiggle  # settles from 30% above k
    if method == "threshold":
        return 1.5 * _buildup(method, workers) - 1.0  # a fixed lambda selecting too much, plus build-up
    if method == "sage":
        return -0.5 + 0.01 * wiggle  # rescaled lambda settling at half of k
    if method in ("topk", "dgc"):
        return _buildup(method, workers) - 1.0
    return 0.005 * wiggle  # dense, DEFT, CLT-k: about k


def _imbalance(method: str, step: int, wiggle: float) -> float:
    if method == "micro":
        return 0.3 + 0.02 * wiggle
    if method == "exdyna":
        return 0.05 + 0.25 * math.exp(-step / 100.0)  # boundaries move towards balance
    return 0.1 if method == "deft" else 0.0


def _sent_bytes(method: str, workers: int, union: float, imbalance: float) -> float:
    """Bytes a worker sends per step by the exchanges' ring formulas (docs/metrics.md)."""
    w = workers
    if method == "dense":
        return 2 * (w - 1) / w * NUMEL * 4
    if method == "dgc":  # sparse all-gather of (index, value) pairs
        return (w - 1) * K * 8
    if method == "cltk":  # broadcast of the leader's indices, all-reduce of k values
        return K * 4 + 2 * (w - 1) / w * K * 4
    selections = union / _buildup(method, w)  # mean |S_r| for whole-scope methods, sum for split ones
    widest = (1 + imbalance) * (selections / w if method in SPLIT else selections)
    return (w - 1) * widest * 4 + 2 * (w - 1) / w * union * 4 + 8 * (w - 1)


def _oktopk_sent_max(workers: int, step: int) -> float:
    """The busiest worker's bytes of the paper's variant (docs/algorithms.md, oktopk): dense during
    the warm-up; then k selected and k kept, balanced, 5k (W-1)/W elements and the counts, below
    the bound 6k (W-1)/W on every step, the recompute steps included."""
    w = workers
    if step < 128:
        return 2 * (w - 1) / w * NUMEL * 4
    return (5 * K * (w - 1) / w + 2 * (w - 1)) * 4


def _deft_state(workers: int, rng: np.random.Generator) -> dict:
    norms = [float(n) for n in [1.0] + list(0.2 + rng.random(len(UNIT_SIZES) - 1))]
    ks = unit_k(norms, UNIT_SIZES, K)
    common = common_units(ks, UNIT_SIZES)
    costs = [unit_cost(size, count) for size, count in zip(UNIT_SIZES, ks)]
    bins = allocate(costs, common, workers)
    loads = bin_loads(bins, costs)
    binned = [costs[unit] for units in bins for unit in units]
    return {
        k.DEFT_MAX_BIN_LOAD_RATIO: max(loads) / max(max(binned), sum(binned) / workers),
        k.DEFT_K_SUM: float(sum(ks)), k.DEFT_COMMON_UNITS: float(len(common)),
        k.DEFT_UNIT_K: [float(count) for count in ks], k.DEFT_UNIT_NORMS: norms,
        k.DEFT_UNIT_COMMON: [1.0 if unit in common else 0.0 for unit in range(len(UNIT_SIZES))],
        k.DEFT_BIN_LOADS: loads,
    }


@lru_cache(maxsize=None)
def _base_rows(method: str, workers: int) -> tuple[dict, ...]:
    """The rows of one run of the all-hold study (cached: copied before any change)."""
    rng = np.random.default_rng(len(method) * 100 + workers)
    per_epoch = ROWS // EPOCHS
    step_ms = STEP_MS.get(method, 30.0)
    rows: Rows = []
    for i in range(ROWS):
        step, wiggle = i * EVERY, math.sin(i)
        error = _density_error(method, workers, step, wiggle)
        union = (1.0 + error) * K if method != "dense" else float(NUMEL)
        imbalance = _imbalance(method, step, wiggle)
        select = (8.0 / workers if method in PARTITION else 8.0 if method in ("topk", "cltk") else 3.0) * (1 + 0.02 * wiggle)
        row = {
            k.ROW_STEP: step, k.ROW_KIND: k.KIND_TRAIN, k.ROW_EPOCH: i // per_epoch,
            k.SELECT_MAX: select, k.SELECT_MEAN: select * 0.9, k.STEP: step_ms,
            k.BUILDUP: _buildup(method, workers), k.DENSITY_TARGET: 1.0 if method == "dense" else DENSITY,
            k.DENSITY_ERROR: 0.0 if method == "dense" else error, k.DENSITY_ACTUAL: union / NUMEL,
            k.LOAD_IMBALANCE: imbalance, k.SENT_MEAN: _sent_bytes(method, workers, union, imbalance),
            k.LOSS: 2.0 * math.exp(-i / ROWS), k.ELAPSED: (step + 1) * step_ms / 1e3,
        }
        if method == "deft":
            row.update(_deft_state(workers, rng))
        if method == "oktopk":
            row[k.SENT_MAX] = _oktopk_sent_max(workers, step)
        rows.append(row)
        if (i + 1) % per_epoch == 0:
            epoch = i // per_epoch
            rows.append({k.ROW_STEP: step, k.ROW_KIND: k.KIND_EVAL, k.ROW_EPOCH: epoch,
                         k.ACCURACY: FINAL[method] * PROGRESS[epoch], k.ELAPSED: (step + 1) * step_ms / 1e3})
    return tuple(rows)


def write_study(root: Path, breaks: Break | None = None, workers: tuple[int, ...] = WORKERS,
                methods: tuple[str, ...] = METHODS, rows: int = ROWS, model: str | None = None, tag: str = "") -> Path:
    """The all-hold study under `root` (`breaks` applied to each run's rows first); `rows`
    keeps the first that many train rows and the evaluations among them; `model` names another
    model (another context, judged apart); `tag` is every run's tag."""
    for number, (method, count) in enumerate((m, w) for m in methods for w in workers):
        records = [_copy(row) for row in _base_rows(method, count)]
        if rows < ROWS:
            records = _cut(records, rows)
        if breaks is not None:
            breaks(method, count, records)
        run = SyntheticRun(method=method, workers=count, density=DENSITY, steps=rows, epochs=EPOCHS, model=model,
                           knobs=KNOBS.get(method, ()), tag=tag)
        write_run(root / f"{number}_{method}_w{count}", run, metrics=_text(method, count, rows, records))
    return root


def _copy(row: dict) -> dict:
    """A row whose lists (DEFT's per-unit lists) a break may change without touching the cache."""
    return {key: list(value) if isinstance(value, list) else value for key, value in row.items()}


def _text(method: str, workers: int, rows: int, records: Rows) -> str:
    """metrics.jsonl of `records`; an unchanged run's text is made once (most runs of a study
    that breaks one claim are the all-hold study's)."""
    base = _base_text(method, workers, rows)
    return base[1] if records == base[0] else files.metrics_text(records)


@lru_cache(maxsize=None)
def _base_text(method: str, workers: int, rows: int) -> tuple[Rows, str]:
    records = [_copy(row) for row in _base_rows(method, workers)]
    records = _cut(records, rows) if rows < ROWS else records
    return records, files.metrics_text(records)


def _cut(records: Rows, rows: int) -> Rows:
    """The first `rows` train rows and the evaluations logged among them (at least the first)."""
    kept, train = [], 0
    for record in records:
        if record[k.ROW_KIND] == k.KIND_TRAIN:
            if train == rows:
                break
            train += 1
        kept.append(record)
    if not any(r[k.ROW_KIND] == k.KIND_EVAL for r in kept):
        kept.append(next(r for r in records if r[k.ROW_KIND] == k.KIND_EVAL) | {k.ROW_STEP: kept[-1][k.ROW_STEP]})
    return kept


# -- the change that breaks each claim ---------------------------------------------------------
def _train(rows: Rows) -> Rows:
    return [row for row in rows if row[k.ROW_KIND] == k.KIND_TRAIN]


def _evals(rows: Rows) -> Rows:
    return [row for row in rows if row[k.ROW_KIND] == k.KIND_EVAL]


def _later_half(rows: Rows) -> Rows:
    train = _train(rows)
    return train[len(train) // 2:]


def on(target: str, change: Callable[[int, Rows], None], only_workers: int | None = None) -> Break:
    """A break that changes `target`'s runs (at one W if given)."""
    def apply(method: str, workers: int, rows: Rows) -> None:
        if method == target and (only_workers is None or workers == only_workers):
            change(workers, rows)
    return apply


def set_train(key: str, value: Callable[[int], float] | float, rows_of: Callable[[Rows], Rows] = _train):
    def change(workers: int, rows: Rows) -> None:
        for row in rows_of(rows):
            row[key] = value(workers) if callable(value) else value
    return change


def scale(key: str, factor: float, rows_of: Callable[[Rows], Rows] = _train):
    def change(workers: int, rows: Rows) -> None:
        for row in rows_of(rows):
            row[key] *= factor
    return change


def shift_error(by: float, rows_of: Callable[[Rows], Rows]):
    """|U| moved by `by` * k on the chosen rows: density error and actual density together."""
    def change(workers: int, rows: Rows) -> None:
        for row in rows_of(rows):
            row[k.DENSITY_ERROR] += by
            row[k.DENSITY_ACTUAL] += by * K / NUMEL
    return change


def settle_at(error: float):
    """The later half of the rows settled at `error`."""
    def change(workers: int, rows: Rows) -> None:
        for row in _later_half(rows):
            row[k.DENSITY_ERROR] = error
            row[k.DENSITY_ACTUAL] = (1 + error) * K / NUMEL
    return change


def _halves(rows: Rows) -> tuple[Rows, Rows]:
    """The earlier and the later half of the train rows (20 and 20: equal, so a change that moves
    an amount from one to the other leaves the mean over every row as it was)."""
    train = _train(rows)
    return train[: len(train) // 2], train[len(train) // 2:]


def tilt_error(by: float):
    """|U| raised by `by` k on the later half and lowered as much on the earlier: the mean over
    every logged step unchanged, the settled mean moved."""
    def change(workers: int, rows: Rows) -> None:
        earlier, later = _halves(rows)
        shift_error(by, lambda _: later)(workers, rows)
        shift_error(-by, lambda _: earlier)(workers, rows)
    return change


def tilt_bytes(fraction: float):
    """The later half's bytes raised by `fraction` of their mean and the earlier half's lowered
    as much: the mean over every logged step unchanged, the settled mean 1 + fraction times."""
    def change(workers: int, rows: Rows) -> None:
        earlier, later = _halves(rows)
        amount = fraction * float(np.mean([row[k.SENT_MEAN] for row in later]))
        for row in later:
            row[k.SENT_MEAN] += amount
        for row in earlier:
            row[k.SENT_MEAN] -= amount
    return change


def _one_row_buildup(workers: int, rows: Rows) -> None:
    _train(rows)[-1][k.BUILDUP] = 1.01  # one step aggregating 1% more than the selections


def _uniform_k(workers: int, rows: Rows) -> None:
    for row in _train(rows):
        row[k.DEFT_UNIT_K] = [float(K // len(UNIT_SIZES))] * len(UNIT_SIZES)


BREAKS: dict[str, Break] = {
    # selection time flat in W for a partition method; falling as 1/W for a whole-vector one
    **{f"selection.{m}": on(m, set_train(k.SELECT_MAX, 8.0)) for m in PARTITION},
    **{f"selection.{m}": on(m, set_train(k.SELECT_MAX, lambda w: 8.0 / w)) for m in ("topk", "cltk")},
    # one step with build-up; Top-k's union not growing with W
    **{f"buildup.{m}": on(m, _one_row_buildup) for m in SPLIT},
    "buildup.topk": on("topk", set_train(k.BUILDUP, 1.5)),
    # the present variants average every step: DEFT, MiCRO and ExDyna settling slower at W = 4
    # (their start-up doubles |U|, and triples the bytes, for the first half of the run; the
    # settled half, which the settled variants read, is unchanged)
    **{f"traffic.count.{m}": on(m, shift_error(1.0, lambda rows: _halves(rows)[0]), only_workers=4) for m in PARTITION},
    **{f"traffic.bytes.{m}": on(m, scale(k.SENT_MEAN, 3.0, lambda rows: _halves(rows)[0]), only_workers=4) for m in PARTITION},
    # the settled variants: the later half 1.5 k (1.6 times the bytes) at W = 4, the earlier half
    # lowered as much, so the mean over every step (the present variants) is unchanged
    **{f"traffic.count.settled.{m}": on(m, tilt_error(0.5), only_workers=4) for m in PARTITION},
    **{f"traffic.bytes.settled.{m}": on(m, tilt_bytes(0.6), only_workers=4) for m in PARTITION},
    # Ok-Topk's (paper variant) busiest worker sending twice as much at W = 4 (5/3 of its bound)
    "traffic.bound.oktopk": on("oktopk", scale(k.SENT_MAX, 2.0), only_workers=4),
    # a controller settled at +50%; the uncontrolled ones settled on target
    **{f"density.{m}": on(m, settle_at(0.5)) for m in ("micro", "exdyna")},
    **{f"density.{m}": on(m, settle_at(0.02)) for m in ("threshold", "sage")},
    "balance.exdyna": on("exdyna", set_train(k.LOAD_IMBALANCE, 0.5)),
    "deft.k_follows_norms": on("deft", _uniform_k),
    "deft.bins_balanced": on("deft", set_train(k.DEFT_MAX_BIN_LOAD_RATIO, 1.6)),
    # 5 points below dense; four times as long to reach the target
    **{f"convergence.dense.{m}": on(m, scale(k.ACCURACY, 0.85 / FINAL[m], _evals)) for m in PARTITION},
    **{f"convergence.sooner.{m}": on(m, scale(k.ELAPSED, 4.0, _evals)) for m in PARTITION},
    "dgc.dense": on("dgc", scale(k.ACCURACY, 0.85 / FINAL["dgc"], _evals)),
}

# Claims a break cannot fail alone. A threshold controller's settled count is 1 + the settled
# density error its density claim reads: a ratio over 1.25 between two W needs an error outside
# the band 0.1 at one of them at least (1.1 / 0.9 = 1.22), so the count's break fails the density
# claim too.
ALSO_BREAKS: dict[str, tuple[str, ...]] = {f"traffic.count.settled.{m}": (f"density.{m}",) for m in ("micro", "exdyna")}


# -- the same study with a break, assembled in memory ------------------------------------------
def study_tables(root: Path, breaks: Break) -> RunTables:
    """The all-hold study written at `root` by write_study, with `breaks` applied to its rows, as
    analysis.load.load_runs assembles it (each run's description read from its directory, its
    rows parsed by the loader's own parser), without writing the study again: 30 breaks stay
    within a few seconds. The command line and the disk path are tested on written studies."""
    infos, train, evals = [], [], []
    for number, (method, count) in enumerate((m, w) for m in METHODS for w in WORKERS):
        records = [_copy(row) for row in _base_rows(method, count)]
        breaks(method, count, records)
        parsed = _parsed(method, count) if records == _base_text(method, count, ROWS)[0] \
            else parse_jsonl(files.metrics_text(records).encode())
        info = dict(_run_info(root / f"{number}_{method}_w{count}"))
        info.update(metrics_cut=parsed.cut, bad_lines=parsed.bad_lines)
        infos.append(info)
        train.append(parsed.train)
        evals.append(parsed.evals)
    return assemble(infos, train, evals)


@lru_cache(maxsize=None)
def _run_info(run_dir: Path) -> dict:
    return read_run_info(run_dir)


@lru_cache(maxsize=None)
def _parsed(method: str, workers: int):
    return parse_jsonl(_base_text(method, workers, ROWS)[1].encode())
