"""Run-level checkpoints: everything a run needs to continue exactly where it stopped.

    <run>/checkpoints/step-00000030/process-0.pt    one file per process (its hosted ranks)
    <run>/checkpoints/step-00000030/complete.json   written once every process's file is in place

A checkpoint "at step s" is the state right before step s runs (after the `start_epoch` calls
of s's epoch): model and optimizer, and for every hosted rank its residual, sparsifier state
(DGC's momenta, MiCRO's threshold, ExDyna's partitions, RNGs), BatchNorm buffers and task state
(the LSTM's hidden state); the process's RNG; the summary accumulator. Data order needs no state:
a rank's batches are a function of (seed, rank, epoch), so a resumed epoch replays its first
batches without training on them (`skip`), drawing the same augmentation numbers.

Writing is atomic: each file goes to a temporary name, is fsynced and renamed, and
`complete.json` (the marker) comes only after every process reported its file written. A run
killed while writing leaves an unmarked directory, which loading ignores. The newest `keep`
marked checkpoints are kept.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from experiments.runformat.checkpoint_integrity import marker_files, skipped_steps
from experiments.runformat.errors import ConfigError
from experiments.engine.rank.summary import SummaryAccumulator
from experiments.runformat.run_dir import (CHECKPOINT_MARKER, CHECKPOINT_STEPS, CHECKPOINTS, checkpoint_process_file,
                                 checkpoint_step, checkpoint_step_of, write_atomic)

FORMAT = 2  # bump when the layout of a process file changes (2: the summary accumulator keeps logged rows)


def check_config(cfg: DictConfig) -> None:
    """The checkpoint knobs, before launch."""
    every, keep = cfg.checkpoint.every_steps, cfg.checkpoint.keep
    if not isinstance(every, int) or every < 0:
        raise ConfigError(f"checkpoint.every_steps must be an integer >= 0 (0: only at epoch ends), got {every}")
    if not isinstance(keep, int) or keep < 1:
        raise ConfigError(f"checkpoint.keep must be an integer >= 1, got {keep}: set e.g. checkpoint.keep=2")
    if cfg.launcher.nnodes > 1 and keep < 2:
        # Nodes mark and prune their own copies: one may have pruned the checkpoint that another,
        # which died before marking the newer one, still needs to agree on.
        raise ConfigError(f"checkpoint.keep must be >= 2 on launcher.nnodes={cfg.launcher.nnodes} nodes, got {keep}")


def step_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / checkpoint_step(step)


def complete_steps(run_dir: Path) -> list[int]:
    """Steps of the marked (complete) checkpoints in a run directory, oldest first."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    steps = ((checkpoint_step_of(d.name), d) for d in root.glob(CHECKPOINT_STEPS))
    return sorted(step for step, d in steps if step is not None and (d / CHECKPOINT_MARKER).exists())


def usable_steps(run_dir: Path) -> list[int]:
    """complete_steps without those `resume=` found damaged (checkpoint_integrity.SKIP_VARIABLE)."""
    skipped = skipped_steps(os.environ)
    return [step for step in complete_steps(run_dir) if step not in skipped]


@dataclass
class Resumed:
    """A checkpoint loaded by this process: the step to run next and the state to restore."""

    step: int
    state: dict[str, Any]


def _process_file(run_dir: Path, step: int, process: int) -> Path:
    return step_dir(run_dir, step) / checkpoint_process_file(process)


def load_agreed(run_dir: Path, world) -> Resumed | None:
    """The newest checkpoint that every process of the job has, loaded, or None (a fresh run).
    Processes agree through one tiny gather, so that a marker one node saw and another did not
    (a crash between the two) cannot make them resume at different steps."""
    mine = [s for s in usable_steps(run_dir) if _process_file(run_dir, s, world.process_index).exists()]
    newest = torch.tensor([[float(mine[-1] if mine else -1)]], dtype=torch.float64, device=world.device)
    agreed = int(world.comm.gather_stats(newest).min().item())
    if agreed < 0:
        return None
    if agreed not in mine:
        raise RuntimeError(f"checkpoint step {agreed} is missing process {world.process_index}'s file: "
                           f"{_process_file(run_dir, agreed, world.process_index)}")
    # On the CPU: the sparsifiers' generator states must stay CPU tensors; restore() copies the
    # rest into tensors already on the device (and moves the task state there).
    path = _process_file(run_dir, agreed, world.process_index)
    state = torch.load(path, map_location="cpu", weights_only=False)
    if state.get("format") != FORMAT:  # first: an old file may not even hold the layout keys below
        age = "an older" if isinstance(state.get("format"), int) and state["format"] < FORMAT else "another"
        raise RuntimeError(f"checkpoint format {state.get('format')} was written by {age} sparsebench (format {FORMAT} "
                           f"now): cannot resume {path}; start a new run")
    if state["local_ranks"] != world.local_ranks or state["workers"] != world.world_size:
        raise RuntimeError(f"checkpoint step {agreed} was written by another layout of ranks "
                           f"({state['workers']} workers, ranks {state['local_ranks']} here): cannot resume")
    return Resumed(agreed, state)


class Checkpointer:
    """Decides when a checkpoint is due and writes it (every process its own file)."""

    def __init__(self, cfg: DictConfig, run_dir: Path, world, steps_per_epoch: int, total_steps: int,
                 resumed_at: int | None) -> None:
        self.every = cfg.checkpoint.every_steps
        self.at_epoch_start = cfg.checkpoint.epoch_end  # the end of one epoch is the start of the next
        self.keep = cfg.checkpoint.keep
        self.run_dir, self.world = Path(run_dir), world
        self.steps_per_epoch, self.total_steps = steps_per_epoch, total_steps
        self.resumed_at = resumed_at
        self.damaged = skipped_steps(os.environ)  # those resume= skipped

    def due(self, step: int) -> bool:
        """Before `step` runs. Never at step 0 (nothing to keep), after the last step (the run
        is over), at the step a run just resumed from (that checkpoint is on disk), or at one
        `resume=` found damaged."""
        if step == 0 or step >= self.total_steps or step == self.resumed_at or step in self.damaged:
            return False  # a damaged checkpoint stays as it is, for a look: never overwritten
        return bool(self.every and step % self.every == 0) or (self.at_epoch_start and step % self.steps_per_epoch == 0)

    def save(self, step: int, session, accumulator: SummaryAccumulator, elapsed_s: float, guard=None,
             watch=None) -> None:
        directory = step_dir(self.run_dir, step)
        directory.mkdir(parents=True, exist_ok=True)
        path = _process_file(self.run_dir, step, self.world.process_index)
        temp = path.with_name(f".{path.name}.tmp")
        with open(temp, "wb") as handle:
            torch.save(capture(session, accumulator, step, elapsed_s, self.world, guard, watch), handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
        # Every process has its file in place once this gather returns: only then the marker.
        self.world.comm.gather_stats(torch.zeros(1, 1, dtype=torch.float64, device=self.world.device))
        if int(os.environ.get("LOCAL_RANK", 0)) == 0:  # one writer per node (run dirs need not be shared)
            # Sizes and SHA-256s hashed now, before the marker vouches for them: resume= checks them.
            files = marker_files(directory, self.world.processes)
            marker = {"step": step, "processes": self.world.processes, "files": files}
            write_atomic(directory / CHECKPOINT_MARKER, json.dumps(marker) + "\n")
            self._prune()

    def _prune(self) -> None:
        """Keeps the newest `keep` marked checkpoints; unmarked ones older than those go too.
        Those `resume=` found damaged are neither counted nor deleted (they stay for a look)."""
        marked = usable_steps(self.run_dir)
        damaged = skipped_steps(os.environ)
        kept = set(marked[-self.keep:])
        oldest_kept = min(kept)
        for directory in (self.run_dir / CHECKPOINTS).glob(CHECKPOINT_STEPS):
            step = checkpoint_step_of(directory.name)
            if step is not None and step not in kept | damaged and (step in marked or step < oldest_kept):
                (directory / CHECKPOINT_MARKER).unlink(missing_ok=True)  # unmarked first: never half a checkpoint
                shutil.rmtree(directory, ignore_errors=True)


def capture(session, accumulator: SummaryAccumulator, step: int, elapsed_s: float, world, guard=None,
            watch=None) -> dict[str, Any]:
    """This process's state before `step` (tensors are serialized as they are now); `guard`,
    on_nonfinite=skip's SkipGuard, keeps its counters; `watch`, the TargetWatch, its band."""
    state = {
        "format": FORMAT,
        "step": step,
        "workers": world.world_size,
        "local_ranks": list(world.local_ranks),
        "model": session.model.state_dict(),
        "optimizer": session.optimizer.state_dict(),
        "ranks": [
            {
                "rank": replica.rank,
                "residual": residual,
                "sparsifier": sparsifier.state_dict(),
                "buffers": replica.buffers,
                "task_state": replica.task_state,
            }
            for replica, residual, sparsifier in zip(session.replicas, session.ranks.residuals,
                                                     session.ranks.sparsifiers, strict=True)
        ],
        "rng": {"torch": torch.get_rng_state()},
        "accumulator": vars(accumulator),
        "skip_guard": None if guard is None else guard.state_dict(),
        "target": None if watch is None else watch.state_dict(),
        "elapsed_s": elapsed_s,
    }
    if world.device.type == "cuda":
        state["rng"]["cuda"] = torch.cuda.get_rng_state(world.device)
    return state


def restore(state: dict[str, Any], session, accumulator: SummaryAccumulator, world, guard=None, watch=None) -> None:
    """Puts a captured state back, in place (param.grad views and buffers stay bound). A file
    written before the band was checkpointed has no `target`: the watch starts far, as it did then."""
    session.model.load_state_dict(state["model"])
    session.optimizer.load_state_dict(state["optimizer"])
    for index, (replica, saved) in enumerate(zip(session.replicas, state["ranks"], strict=True)):
        assert replica.rank == saved["rank"]
        session.ranks.load_rank(index, saved["residual"], saved["sparsifier"])
        replica.load_state(saved["buffers"], _on(saved["task_state"], world.device))
    torch.set_rng_state(state["rng"]["torch"].cpu())
    if "cuda" in state["rng"]:
        torch.cuda.set_rng_state(state["rng"]["cuda"].cpu(), world.device)
    vars(accumulator).update(state["accumulator"])
    if guard is not None and state["skip_guard"] is not None:
        guard.load_state_dict(state["skip_guard"])
    if watch is not None and state.get("target") is not None:
        watch.load_state_dict(state["target"])


def _on(value: Any, device: torch.device) -> Any:
    """`value` (tensors in dicts, lists and tuples: the LSTM's hidden state) on `device`."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {key: _on(item, device) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on(item, device) for item in value)
    return value
