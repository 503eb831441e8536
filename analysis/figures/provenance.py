"""What a figure was drawn from, said on the figure: the model and dataset its runs share (so a
paper figure reproduced here is identifiable: "ResNet-18 / CIFAR-10"), and a warning when any of
its runs trained on stand-in data rather than the real dataset. `style.finish` puts both in every
figure's title, from the rows the figure drew.
"""
from __future__ import annotations

import textwrap

import pandas as pd

from analysis.tasks import is_stand_in, stand_in_what

# Config names (conf/model, conf/dataset) -> how the papers write them; others show as they are.
DISPLAY = {
    "resnet18": "ResNet-18", "resnet110": "ResNet-110", "resnet152": "ResNet-152", "googlenet": "GoogLeNet",
    "senet18": "SENet-18", "vgg19": "VGG-19", "inception_v4": "Inception-v4", "lstm": "LSTM", "ncf": "NCF",
    "cnn": "CNN", "mlp": "MLP",
    "cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "wikitext2": "WikiText-2", "movielens": "MovieLens",
    "fashion_mnist": "Fashion-MNIST", "digits": "digits", "synthetic": "synthetic data",
}


def display_name(name: object) -> str:
    """"resnet18" -> "ResNet-18"; unknown names unchanged."""
    return DISPLAY.get(str(name), str(name))


def workload_label(rows: pd.DataFrame | None) -> str | None:
    """"ResNet-18 / CIFAR-10" when every run in `rows` has that model and dataset; only the
    shared one when the other varies (series labels then name it); None when neither is shared."""
    if rows is None or rows.empty:
        return None
    shared = []
    for key in ("model", "dataset"):
        values = rows[key].dropna().unique() if key in rows.columns else ()
        if len(values) == 1:
            shared.append(display_name(values[0]))
    return " / ".join(shared) or None


def stand_in_note(rows: pd.DataFrame | None) -> str | None:
    """"stand-in data: <what>; not the paper's data" when any run in `rows` trained on stand-in
    data ("in 2 of 6 runs" when not all did); None when all trained on the real data."""
    if rows is None or rows.empty or "data_source" not in rows.columns:
        return None
    per_run = rows.drop_duplicates("run_id") if "run_id" in rows.columns else rows
    flagged = per_run[per_run["data_source"].map(is_stand_in)]
    if flagged.empty:
        return None
    sources = flagged[["dataset", "data_source"]].astype(str).drop_duplicates()
    several = per_run["dataset"].nunique() > 1  # name the dataset whose runs it was
    what = "; ".join(f"{display_name(d)}: {stand_in_what(s)}" if several else stand_in_what(s)
                     for d, s in sources.itertuples(index=False))
    share = "" if len(flagged) == len(per_run) else f" in {len(flagged)} of {len(per_run)} runs"
    return f"stand-in data{share}: {what}; not the paper's data"


def figure_title(title: str, rows: pd.DataFrame | None, width: int = 100) -> str:
    """`title`, the shared model and dataset after a dash, and the stand-in note on lines of its
    own (title lines, which layouts never hide behind a legend), wrapped at `width` characters."""
    workload = workload_label(rows)
    text = f"{title} — {workload}" if workload else title
    lines = textwrap.wrap(text, max(width, 40))  # a long title must not run off the figure
    note = stand_in_note(rows)
    return "\n".join([*lines, *textwrap.wrap(note, max(width, 40))]) if note else "\n".join(lines)
