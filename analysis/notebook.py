"""The little the notebooks need beyond the library: load what $SPARSEBENCH_RUNS names, and
show a figure (or say "no data") whatever matplotlib backend the kernel runs."""
from __future__ import annotations

import io

from matplotlib.figure import Figure

from analysis.load import default_run_paths, load_runs
from analysis.tables import RunTables


def load_from_env(finished_only: bool = True) -> RunTables:
    """The runs below $SPARSEBENCH_RUNS (default: the repository's outputs/); finished ones
    only unless asked, as in the report."""
    paths = default_run_paths()
    print("runs from:", ", ".join(str(path) for path in paths))
    tables = load_runs(paths)
    print(tables.runs["status"].value_counts().to_string())
    return tables.select(status="done") if finished_only else tables


def show(figure: Figure | None) -> None:
    """Displays `figure` as a PNG, or prints "no data" when the runs had none for it."""
    if figure is None:
        print("no data")
        return
    from IPython.display import Image, display  # only inside a kernel

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    display(Image(data=buffer.getvalue()))
