"""What the figure-data tests share: the synthetic sweep's methods and worker counts
(conftest.synthetic), drawing a figure of FIGURES, comparing numbers, finding a panel, and a
run's rows read from its own files (tests/helpers/raw_runs.py)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from analysis.figures import FIGURES
from analysis.tables import RunTables
from experiments.runformat import metric_keys as k
from tests.helpers import axes_data as ax
from tests.helpers.raw_runs import RawStudy

WORKERS = [2, 4, 8]
METHODS = ["deft", "dense", "dgc", "exdyna", "micro", "topk"]  # the synthetic sweep's (conftest.synthetic)
THRESHOLD = ["dgc", "exdyna", "micro"]  # those whose density a threshold sets
BLACK = to_rgba("black")


def draw(name: str, tables: RunTables) -> Figure:
    """The figure `name` of FIGURES drawn from `tables` (it must have data)."""
    figure = FIGURES[name][0](tables)
    assert figure is not None, name
    return figure


def close(actual, expected) -> None:
    """Equal to rounding: the figure and the test reduce the same numbers in another order."""
    np.testing.assert_allclose(np.asarray(actual, dtype=float), np.asarray(expected, dtype=float), rtol=1e-9, atol=1e-12)


def panel(figure: Figure, title: str) -> Axes:
    """The one visible panel titled `title`."""
    (found,) = [axis for axis in ax.visible_axes(figure) if axis.get_title() == title]
    return found


def first_seed(raw: RawStudy, method: str, workers: int) -> pd.DataFrame:
    """The train rows, in step order, of the smallest seed among `method`'s runs at `workers`."""
    rows = raw.train[(raw.train["method"] == method) & (raw.train["workers"] == workers)]
    return rows[rows["seed"] == rows["seed"].min()].sort_values(k.ROW_STEP)
