"""Every figure checked for what it plots: the data read back from its artists (line points,
bar heights and positions, error bars, bands, ticks, legend) equals what the figure's docstring
says it shows, recomputed here from the run folders' own files (tests/helpers/raw_runs.py:
json and yaml, never analysis.load or analysis.stats). The synthetic study's values vary per
step and seed and mix train and eval rows, so a median for a mean, a wrong column, one series'
data under another's label, a dropped worker count or eval rows in a train curve all show."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from analysis.tables import RunTables
from experiments.runformat import metric_keys as k
from tests.helpers import axes_data as ax
from tests.helpers.figure_checks import BLACK, METHODS, WORKERS, close, draw, panel
from tests.helpers.raw_runs import RawStudy, after_warmup, elapsed_at, over_seeds, per_run


def test_method_comparison(synthetic_tables: RunTables, synthetic_study: RawStudy) -> None:
    """Bars: mean over seeds of each run's number (final task metric = summary's last evaluation,
    timings = median after warm-up, the rest = mean over logged steps), error bar = std over seeds."""
    figure = draw("method_comparison", synthetic_tables)
    final = synthetic_study.runs.assign(value=synthetic_study.runs["final"] * 100)[["method", "workers", "seed", "value"]]
    expected = {
        "final accuracy": final,
        "selection time (slowest rank)": per_run(synthetic_study.train, k.SELECT_MAX, "median", warmup=True),
        "traffic (busiest rank)": per_run(synthetic_study.train, k.SENT_MAX, "mean").assign(value=lambda f: f["value"] * 1e-6),
        "compression ratio error": per_run(synthetic_study.train, k.DENSITY_ERROR, "mean_abs"),
        "build-up": per_run(synthetic_study.train, k.BUILDUP, "mean"),
        "load imbalance": per_run(synthetic_study.train, k.LOAD_IMBALANCE, "mean"),
    }
    assert [axis.get_title() for axis in ax.visible_axes(figure)] == list(expected)
    for title, per_run_values in expected.items():
        axis = panel(figure, title)
        summary = over_seeds(per_run_values, ["method", "workers"])
        summary.index = summary["method"] + " W=" + summary["workers"].astype(str)
        ticks = ax.tick_labels(axis)
        assert sorted(ticks) == sorted(summary.index) and [t.split()[0] for t in ticks[:3]] == ["dense"] * 3, ticks
        bars = ax.bars(axis)
        close([bar.x for bar in bars], ax.tick_positions(axis))
        close([bar.height for bar in bars], summary.loc[ticks, "mean"])
        (errors,) = ax.errorbars(axis)
        close(errors.err, summary.loc[ticks, "std"])
        colors = {}
        for tick, bar in zip(ticks, bars):
            assert colors.setdefault(tick.split()[0], bar.color) == bar.color, tick
        assert colors["dense"] == BLACK and len(set(colors.values())) == len(colors)


def test_selection_time_vs_workers(synthetic_tables: RunTables, synthetic_study: RawStudy) -> None:
    """Per method: the median over post-warm-up steps of all seeds at each W; band 25th-75th percentile."""
    figure = draw("selection_time_vs_workers", synthetic_tables)
    (axis,) = figure.axes
    rows = after_warmup(synthetic_study.train)
    lines, bands = ax.lines(axis), ax.bands(axis)
    assert sorted(line.label for line in lines) == METHODS == sorted(ax.legend_labels(figure))
    assert ax.tick_labels(axis) == [str(w) for w in WORKERS]
    assert len(bands) == len(lines)
    for line, (color, band) in zip(lines, bands, strict=True):
        mine = rows[rows["method"] == line.label].groupby("workers")[k.SELECT_MAX]
        close(line.x, WORKERS)
        close(line.y, [np.percentile(group, 50) for _, group in mine])
        assert sorted(band) == WORKERS and color[:3] == line.color[:3]
        close([band[w] for w in WORKERS], [np.percentile(group, [25, 75]) for _, group in mine])


def test_buildup_density_vs_workers(synthetic_tables: RunTables, synthetic_study: RawStudy) -> None:
    """Mean build-up and actual density over every logged step (all seeds) at each W, error bar
    = their std over those steps; each method's target dashed in its colour."""
    figure = draw("buildup_density_vs_workers", synthetic_tables)
    left, right = figure.axes
    assert sorted(ax.legend_labels(figure)) == METHODS
    for axis, column in ((left, k.BUILDUP), (right, k.DENSITY_ACTUAL)):
        drawn = ax.errorbars(axis)
        assert sorted(bars.label for bars in drawn) == METHODS
        for bars in drawn:
            mine = synthetic_study.train[synthetic_study.train["method"] == bars.label].groupby("workers")[column]
            close(bars.x, WORKERS)
            close(bars.y, mine.mean())
            close(bars.err, mine.std(ddof=1))
    colors = {bars.color: bars.label for bars in ax.errorbars(right)}
    targets = [line for line in ax.lines(right) if line.style == "--"]
    assert sorted(colors[line.color] for line in targets) == METHODS
    for line in targets:
        close(line.y, synthetic_study.train[synthetic_study.train["method"] == colors[line.color]].groupby("workers")[k.DENSITY_TARGET].mean())


def test_compression_error(synthetic_tables: RunTables, synthetic_study: RawStudy) -> None:
    """One bar per method and W: mean |density/error| over its logged steps (all seeds)."""
    figure = draw("compression_error", synthetic_tables)
    (axis,) = figure.axes
    ticks, positions = ax.tick_labels(axis), ax.tick_positions(axis)
    assert sorted(ticks) == METHODS
    groups = ax.bar_groups(axis)
    assert [label for label, _ in groups] == [f"W={w}" for w in WORKERS] == ax.legend_labels(figure)
    means = synthetic_study.train[k.DENSITY_ERROR].abs().groupby([synthetic_study.train["method"], synthetic_study.train["workers"]]).mean()
    for offset, (label, bars) in enumerate(groups):
        workers = int(label[2:])
        close([bar.height for bar in bars], [means[(method, workers)] for method in ticks])
        for position, bar in zip(positions, bars):  # beside its method's tick, in W order
            assert abs(bar.x - position) < 0.4 and np.sign(bar.x - position) == np.sign(offset - 1)


def test_step_time_breakdown(synthetic_tables: RunTables, synthetic_study: RawStudy) -> None:
    """Per method and W, medians over post-warm-up steps (all seeds): compute, select, exchange
    and the rest of the step stacked on the left; compute, select, modelled exchange on the right."""
    figure = draw("step_time_breakdown", synthetic_tables)
    (axis,) = figure.axes
    assert ax.legend_labels(figure) == ["compute (measured)", "select (measured)", "exchange (measured)", "other", "exchange (modelled)"]
    columns = [k.COMPUTE_MAX, k.SELECT_MAX, k.EXCHANGE, k.STEP, k.EXCHANGE_MODEL]
    medians = after_warmup(synthetic_study.train).groupby(["method", "workers"])[columns].median()
    ticks, bars = ax.tick_labels(axis), ax.bars(axis)
    assert sorted(tuple(t.split()) for t in ticks) == sorted((m, f"W={w}") for m in METHODS for w in WORKERS)
    for tick, position in zip(ticks, ax.tick_positions(axis)):
        method, workers = tick.split()[0], int(tick.split()[1][2:])
        compute, select, exchange, step, modelled = medians.loc[(method, workers)]
        for side, parts in ((-1, [compute, select, exchange, step - compute - select - exchange]), (1, [compute, select, modelled])):
            stack = sorted((bar for bar in bars if abs(bar.x - position) < 0.5 and np.sign(bar.x - position) == side),
                           key=lambda bar: bar.bottom)
            close([bar.height for bar in stack], np.clip(parts, 0, None))
            close([bar.bottom for bar in stack], np.cumsum([0, *np.clip(parts, 0, None)[:-1]]))


def decode(figure: Figure, lines: list[ax.Line]) -> dict[tuple[str, int], ax.Line]:
    """(method, W) -> line, read through the figure's legend: colour = method, style = W."""
    entries = ax.legend_entries(figure)
    methods = {to_rgba(handle.get_color()): text for text, handle in entries if not text.startswith("W=")}
    styles = {handle.get_linestyle(): int(text[2:]) for text, handle in entries if text.startswith("W=")}
    found = {(methods[line.color], styles[line.style]): line for line in lines}
    assert len(found) == len(lines)
    for (method, _), line in found.items():
        assert (line.color == BLACK and line.width > 2) == (method == "dense")
    return found


def check_curves(found: dict, expected: pd.DataFrame, x: str, y: str) -> None:
    """`found` (method, W) -> line equals `expected`'s mean over seeds of x and y at each step."""
    means = expected.groupby(["method", "workers", k.ROW_STEP])[[x, y]].mean()
    assert sorted(found) == sorted({key[:2] for key in means.index})
    for key, line in found.items():
        curve = means.loc[key].sort_values(x)
        close(line.x, curve[x])
        close(line.y, curve[y])


def test_task_metric_curves(synthetic_tables: RunTables, synthetic_study: RawStudy) -> None:
    """Per method and W, the mean over seeds of each evaluation's accuracy (%) against epoch and
    against the seeds' mean training time before it, measured (step_ms) and modelled
    (compute + select + modelled exchange)."""
    figure = draw("task_metric_curves", synthetic_tables)
    assert [axis.get_xlabel() for axis in figure.axes] == ["epoch", "training time, measured (s)", "training time, modelled network (s)"]
    train = synthetic_study.train
    for number in synthetic_study.train.groupby("run")[k.ROW_STEP].apply(list):
        assert number == list(range(len(number)))  # every step logged: elapsed_at may sum them
    evals = synthetic_study.evals.assign(
        value=synthetic_study.evals[k.ACCURACY] * 100, epoch=synthetic_study.evals[k.ROW_EPOCH],
        measured=elapsed_at(train, synthetic_study.evals, train[k.STEP]),
        modelled=elapsed_at(train, synthetic_study.evals, train[k.COMPUTE_MAX] + train[k.SELECT_MAX] + train[k.EXCHANGE_MODEL]),
    )
    for axis, x in zip(figure.axes, ("epoch", "measured", "modelled")):
        check_curves(decode(figure, ax.lines(axis)), evals, x, "value")


def test_residual_norm(synthetic_tables: RunTables, synthetic_study: RawStudy) -> None:
    """Per method (not dense) and W, each step's residual norms, mean over seeds."""
    figure = draw("residual_norm", synthetic_tables)
    sparse = synthetic_study.train[synthetic_study.train["method"] != "dense"].assign(x=lambda f: f[k.ROW_STEP])
    for axis, column in zip(figure.axes, (k.RESIDUAL, k.REL_RESIDUAL)):
        check_curves(decode(figure, ax.lines(axis)), sparse, "x", column)


def test_a_method_keeps_its_colour_in_every_figure(synthetic_tables: RunTables) -> None:
    """Where colour stands for the method, each method has one colour across the figures, dense
    black, no two methods the same."""
    seen: dict[str, set] = {}
    comparison = draw("method_comparison", synthetic_tables).axes[0]
    for tick, bar in zip(ax.tick_labels(comparison), ax.bars(comparison)):
        seen.setdefault(tick.split()[0], set()).add(bar.color)
    for line in ax.lines(draw("selection_time_vs_workers", synthetic_tables).axes[0]):
        seen.setdefault(line.label, set()).add(line.color)
    for bars in ax.errorbars(draw("buildup_density_vs_workers", synthetic_tables).axes[0]):
        seen.setdefault(bars.label, set()).add(bars.color)
    for name in ("task_metric_curves", "residual_norm", "load_imbalance_vs_step"):
        for text, handle in ax.legend_entries(draw(name, synthetic_tables)):
            if not text.startswith("W="):
                seen.setdefault(text, set()).add(to_rgba(handle.get_color()))
    assert all(len(colors) == 1 for colors in seen.values()), seen
    colors = {method: next(iter(found)) for method, found in seen.items()}
    assert colors["dense"] == BLACK and len(set(colors.values())) == len(colors) == len(METHODS)
