"""Whether a marked checkpoint's files are still the ones its marker vouches for.

The marker (complete.json) records every process file's size and SHA-256, hashed right after the
files were written and before the marker is: a file cut short, a byte changed or a file gone
since then shows here, in the parent of `resume=`, before any process starts and dies inside
torch.load. A marker written by an older sparsebench has no `files`: its files are checked only
for being there. Nothing here deletes or moves a file: a damaged checkpoint stays where it is.
No torch: `resume=` with bad input must answer fast.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from experiments.runformat.run_dir import CHECKPOINT_MARKER, CHECKPOINTS, checkpoint_process_file, checkpoint_step

_CHUNK = 1 << 20


def file_record(path: Path) -> dict[str, int | str]:
    """A process file's size and SHA-256, as the marker records them."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def marker_files(directory: Path, processes: int) -> dict[str, dict[str, int | str]]:
    """The `files` entry of a checkpoint's marker: every process file there is in `directory`
    (a node holds its own processes' files only; run directories need not be shared)."""
    names = (checkpoint_process_file(process) for process in range(processes))
    return {name: file_record(directory / name) for name in names if (directory / name).exists()}


@dataclass(frozen=True)
class Damage:
    """A marked checkpoint that cannot be loaded, and why (one clause, for one line)."""

    step: int
    reason: str


def damage(run_dir: Path, step: int) -> Damage | None:
    """Why the marked checkpoint at `step` cannot be loaded, or None if it is intact."""
    directory = Path(run_dir) / CHECKPOINTS / checkpoint_step(step)
    try:
        marker = json.loads((directory / CHECKPOINT_MARKER).read_text())
    except (OSError, ValueError) as error:
        return Damage(step, f"its {CHECKPOINT_MARKER} does not read ({error})")
    recorded = marker.get("files")
    if recorded is None:  # an older sparsebench's marker: the files must at least be there
        names = [checkpoint_process_file(process) for process in range(int(marker.get("processes", 1)))]
        recorded = {name: None for name in names}
    for name, want in sorted(recorded.items()):
        reason = _file_damage(directory / name, want)
        if reason is not None:
            return Damage(step, reason)
    return None


def _file_damage(path: Path, want: dict | None) -> str | None:
    """What is wrong with one process file against its marker record (None: nothing)."""
    if not path.exists():
        return f"{path.name} is missing"
    if want is None:
        return None
    size = path.stat().st_size
    if size != want["bytes"]:
        short = "cut short" if size < want["bytes"] else "grown since written"
        return f"{path.name} is {size:,} bytes, the marker says {want['bytes']:,} ({short})"
    if file_record(path)["sha256"] != want["sha256"]:
        return f"{path.name} does not match the marker's SHA-256 (changed since written)"
    return None


def newest_intact(run_dir: Path, steps: list[int]) -> tuple[int | None, list[Damage]]:
    """The newest intact checkpoint among the marked `steps` (oldest first), and the damaged
    ones newer than it (newest first); (None, all damaged) if none is intact. Older
    checkpoints than the one found are not read: resuming never needs them."""
    damaged = []
    for step in reversed(steps):
        found = damage(run_dir, step)
        if found is None:
            return step, damaged
        damaged.append(found)
    return None, damaged


# The damaged steps `resume=` found, for its workers: they load the newest marked checkpoint
# outside this list, which is the one the parent verified (and a torchrun restart the newer
# ones the run writes since), and never prune these (nothing damaged is deleted).
SKIP_VARIABLE = "SPARSEBENCH_SKIP_CHECKPOINTS"


def skipped_steps(environ: dict[str, str]) -> set[int]:
    """The steps in SKIP_VARIABLE (comma-separated), empty if unset."""
    return {int(step) for step in environ.get(SKIP_VARIABLE, "").split(",") if step}
