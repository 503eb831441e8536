"""The W&B loader against a stand-in for wandb.Api(): same tables as a local run."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from analysis.wandb_load import load_wandb, split_history

REPO = Path(__file__).resolve().parents[2]


@dataclass
class FakeRun:
    name: str
    state: str
    history: list[dict]
    group: str = "sweep-1"
    config: dict = field(default_factory=lambda: {
        "sparsifier": {"name": "topk", "density": 0.01}, "model": {"name": "cnn"}, "dataset": {"name": "digits"},
        "workers": 4, "processes": 1, "seed": 0, "warmup_steps": 1, "resolved": {"world": "hosted", "processes": 1},
        "device": "auto", "machine": {"cpu_model": "AMD EPYC", "cpu_capability": "AVX2"}, "versions": {"torch": "2.14.1"},
    })
    summary: dict = field(default_factory=lambda: {"eval/accuracy": 0.8, "_runtime": 3.0})

    @property
    def path(self) -> list[str]:
        return ["entity", "project", self.name]

    @property
    def url(self) -> str:
        return f"https://wandb.example/entity/project/runs/{self.name}"

    def scan_history(self):
        return iter(self.history)


class FakeApi:
    def __init__(self, runs: list[FakeRun]) -> None:
        self._runs = runs
        self.asked: list = []

    def runs(self, path: str, filters: dict):
        self.asked.append((path, filters))
        return self._runs


HISTORY = [
    {"_step": 0, "_runtime": 0.1, "train/loss": 2.0, "time/select_ms_max": 1.0, "epoch": 0},
    {"_step": 2, "_runtime": 0.2, "train/loss": 1.5, "time/select_ms_max": 0.5, "epoch": 0},
    # W&B merged the last train row and the epoch's eval row, both logged at step 3
    {"_step": 3, "_runtime": 0.3, "train/loss": 1.2, "time/select_ms_max": 0.7, "epoch": 0, "eval/accuracy": 0.8},
]


def test_history_rows_split_into_train_and_eval() -> None:
    train, evals = split_history(HISTORY)
    assert [row["step"] for row in train] == [0, 2, 3]
    assert evals == [{"step": 3, "kind": "eval", "epoch": 0, "eval/accuracy": 0.8}]
    assert all(not any(key.startswith("_") for key in row) for row in train)


def test_wandb_runs_load_into_the_same_tables() -> None:
    api = FakeApi([FakeRun("a", "finished", HISTORY), FakeRun("b", "crashed", HISTORY[:1])])
    tables = load_wandb("entity/project", filters={"group": "sweep-1"}, api=api)
    assert api.asked == [("entity/project", {"group": "sweep-1"})]
    runs = tables.runs.set_index("name")
    assert runs.loc["a", "status"] == "done" and runs.loc["b", "status"] == "failed"
    assert runs.loc["a", "world"] == "hosted" and runs.loc["a", "group"] == "sweep-1"
    assert runs.loc["a", "eval/accuracy"] == 0.8
    # the machine, as env.json records it locally (the worker puts it in the W&B config)
    assert runs.loc["a", "env.cpu_capability"] == "AVX2" and runs.loc["a", "env.torch"] == "2.14.1"
    assert runs.loc["a", "cfg.device"] == "auto"
    assert not any(column.startswith(("cfg.machine", "cfg.versions")) for column in runs.columns)
    assert len(tables.steps) == 4 and len(tables.epochs) == 1
    assert tables.steps.loc[tables.steps["step"] == 3, "after_warmup"].all()


def test_wandb_is_not_imported_unless_asked() -> None:
    code = "import sys, analysis.load, analysis.figures, analysis.report; assert 'wandb' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True).returncode == 0


def test_wandb_runs_carry_their_task_and_data_source() -> None:
    summary = {"eval/perplexity": 140.0, "task": {"kind": "language_model", "metric": "eval/perplexity", "higher_is_better": False},
               "dataset": {"name": "wikitext2", "task": "language_model", "source": "stand-in: verses"}}
    history = [{"_step": 0, "train/loss": 5.0, "epoch": 0}, {"_step": 1, "epoch": 0, "eval/perplexity": 140.0}]
    tables = load_wandb("entity/project", api=FakeApi([FakeRun("lm", "finished", history, summary=summary),
                                                        FakeRun("old", "finished", HISTORY)]))
    runs = tables.runs.set_index("name")
    assert runs.loc["lm", ["task", "task_metric", "data_source"]].tolist() == ["language_model", "eval/perplexity", "stand-in: verses"]
    assert runs.loc["old", ["task", "task_metric", "data_source"]].tolist() == ["classification", "eval/accuracy", "real"]
