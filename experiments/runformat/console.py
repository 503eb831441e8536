"""Lines on the terminal while rank 0's progress bar may be drawn on it.

The bar (train.py) is drawn on stderr with '\\r' and no newline, and every process of a run (the
rank processes, torchrun's agent, run.py) writes to that one terminal. A line printed plainly
lands after the bar's characters on the bar's line, and the bar's next redraw overwrites it. So:

- the process that draws the bar prints through `say` (tqdm.write: it clears the bar, prints the
  line, redraws the bar below it), and closes its bars (`close_bars`) before a failure is printed;
- any other process starts its line with `line_start(...)` (a carriage return, blanks over the
  terminal's width, a carriage return: how tqdm clears a bar), so the line begins at column 0 of
  a clean line, and the bar, when it is redrawn, goes below it.

Neutral module (tqdm only): the launcher and the rank process both use it.
"""
from __future__ import annotations

import shutil
import sys
import warnings
from typing import TextIO

from tqdm import tqdm


def say(line: str, file: TextIO | None = None) -> None:
    """Prints `line` as a whole line (stderr unless told), above this process's progress bar."""
    stream = sys.stderr if file is None else file
    tqdm.write(line, file=stream)
    stream.flush()


def close_bars() -> None:
    """Closes (and, as they are drawn with leave=False, erases) every progress bar of this
    process: a failing rank must not leave its bar on the line its error is printed on."""
    for bar in list(getattr(tqdm, "_instances", ())):  # tqdm's own registry of live bars
        bar.close()


def line_start(bar_possible: bool = True) -> str:
    """What a line printed by a process that does not draw the bar begins with: the current line
    blanked (a bar another process drew there) when a bar may be shown, else nothing."""
    if not bar_possible:
        return ""
    return "\r" + " " * max(shutil.get_terminal_size().columns - 1, 1) + "\r"


def route_warnings() -> None:
    """Python warnings (a library's UserWarning in the middle of training) go through `say`,
    so that they too are whole lines above the bar."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001 (warnings' signature)
        say(warnings.formatwarning(message, category, filename, lineno, line).rstrip("\n"), file)

    warnings.showwarning = show
