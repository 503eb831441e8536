"""`make endtoend` (= `python -m experiments.studies.endtoend`): does sparsification pay? Each
sparsifier's per-step speedup over the best dense baseline (its break-even: the largest steps
ratio at which it still pays) on H200 clusters at W = 4 to 1,024, and a verdict wherever its
steps ratio is known (docs/endtoend.md).

    python -m experiments.studies.endtoend [--out DIR] [--studies resnet18]
        [--networks dgx_h200_400g_ib,h200x8_200gbe_roce,h200x8_100gbe_roce] [--compute-profile h200]
        [--workers 4,8,...,1024] [--steps-from DIR] [--tolerance 0.5] [--quick] [--skip-runs] [--publish]
        [--compute-ms resnet18=8] [--select-ms deft=3] [--jobs 2]

1. runs each study's short statistics sweeps and the laptop convergence sweep (convergence.py:
   `python run.py -m` command lines a user could type), `--jobs` at a time (default: one per core,
   at most 2), a progress line per finished run;
2. measures the study's model here (FLOPs, kernels, backward ready times: compute.py);
3. models every method's step at every W on every cluster (model.py), its speedup over the best
   dense baseline with its range over the eight moves (breakeven.py), reads the steps ratios
   (the convergence sweep's, `--steps-from`'s, the papers') and gives the verdicts (verdicts.py);
   writes `<out>/endtoend.md`, `endtoend.json` (every cell, its moves, ratios and verdicts) and
   one figure per cluster, and prints the tables.

`--skip-runs` models what `--out` already holds (another network or profile in seconds);
`--quick` is the test suite's cut-down run (the quickstart study on the bundled digits).
`--publish` also writes the page as docs/measured/endtoend.md (and its figures beside it), with
the commit and machine the runs were measured on (analysis/measured.py): the page the README links.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from omegaconf import open_dict

from analysis import measured
from experiments.engine.core.network import NetworkModel
from experiments.studies.endtoend import breakeven, report, verdicts
from experiments.studies.endtoend.assemble import methods_of
from experiments.studies.endtoend.compute import ComputeProfile, StepWork, measure_step
from experiments.studies.endtoend.convergence import convergence_sweeps
from experiments.studies.endtoend.model import Study
from experiments.studies.endtoend.selection import count_for_study
from experiments.studies.endtoend.steps_ratio import DEFAULT_TOLERANCE
from experiments.studies.endtoend.studies import STUDIES, StudySpec
from experiments.engine.launcher.compose import compose_job
from experiments.studies.reproduce.studies import Sweep
from experiments.studies.reproduce.sweeps import minutes, run_sweeps, say_if_busy, start_study, threads_override

# H200-class clusters for the measured H200 compute (docs/endtoend.md, "Clusters"): the DGX and the commodity RoCE nodes
NETWORKS = ("dgx_h200_400g_ib", "h200x8_200gbe_roce", "h200x8_100gbe_roce")
WORKERS = tuple(2**i for i in range(2, 11))  # 4 .. 1,024
TIMED = "the measured compute and selection times carry it (the statistics do not)"
# Every hosted run is one process on one thread (launcher.threads_per_process: 1): one sweep per
# core. Two: the study's longest sweeps are two per study, and more at once would share the cores
# and the memory (a ResNet-18 run at W = 32 holds 32 ranks' 45 MB buffers) for no gain on the
# 2-core machine make endtoend is timed on.
MAX_JOBS = 2


def measure(spec: StudySpec, quick: bool, extra: tuple[str, ...] = ()):
    """The study's model and batch, counted and timed here (compute.py), and its sparsifiers' density."""
    overrides = [f"experiment={spec.experiment}", *(spec.quick_base if quick else ()), *extra]
    # One job's config: the sweep's lists (methods) do not change the model, its data or batch.
    cfg = compose_job([o for o in overrides if "," not in o])
    with open_dict(cfg):
        del cfg["hydra"]
    return measure_step(cfg), float(cfg.sparsifier.density)


def model_study(spec: StudySpec, folder: Path, networks: list[NetworkModel], profile: ComputeProfile,
                workers: list[int], quick: bool, compute_ms: dict[str, float] | None = None,
                select_ms: dict[str, float] | None = None, extra: tuple[str, ...] = (),
                step: tuple[StepWork, float] | None = None, counts: Path | None = None) -> dict:
    """Every sparsifier of one study at every W on every cluster: the break-even grid and its
    sources. `compute_ms` (study or model name -> ms) and `select_ms` (method -> ms) are the user's;
    `extra`: overrides its runs had beside the study's (make compare's, a method's hydra.searchpath);
    `step`: the model's step and density as `measure` gave them once (else measured now: its
    timed backward sets how much of the overlapped baselines' exchange hides); `counts`: a file
    that keeps the selections' counts for the next pricing (selection.count_for_study)."""
    methods = methods_of(spec, folder)
    if not methods:
        raise SystemExit(f"{folder}: no finished run to model (run without --skip-runs first)")
    work, density = step or measure(spec, quick, extra)
    measured = sorted(m.first.compute_ms for m in methods.values())
    compute_ms, select_ms = compute_ms or {}, select_ms or {}
    override = compute_ms.get(spec.name, compute_ms.get(work.model))
    study = Study(spec.name, work, measured[len(measured) // 2], profile, methods,
                  override, {m: ms for m, ms in select_ms.items() if m in methods}, density=density,
                  stands_for=spec.stands_for)
    study.select_costs = selection_costs(spec, quick, study, extra, counts)
    compute, compute_source = study.compute_ms()
    hosted = sorted({w for m in methods.values() for w in m.statistics.union.workers})
    sources = [
        f"compute {compute:.3g} ms per step: {compute_source}; measured here {study.measured_compute_ms:.3g} ms "
        f"({work.flops / 1e9:.3g} GFLOP, {work.kernels} aten ops per forward+backward at batch {work.batch})",
        f"selection on {profile.gpu}: " + selection_sources(study, max(hosted)),
        f"exchange: each method's logged ledger at its largest hosted W (short statistics runs here at W = "
        f"{', '.join(map(str, hosted))}), |U| and k_max set to their fit at W (the split methods': replayed from "
        "where their coordinates lay), priced by the cluster preset (docs/network.md); * marks an extrapolated W",
        "range: the lowest and highest speedup with one input at each end of its range: alpha x0.5 and x2, "
        "beta efficiency 0.7 and 1, compute -30% and +30%, selection -50% and +50% (docs/endtoend.md)",
    ]
    return {"title": spec.title, "sources": sources, "grid": breakeven.grid(study, networks, workers),
                   "networks": [n.name for n in networks], "work": work.describe(), "profile": profile.name}


def selection_sources(study: Study, workers: int) -> str:
    """Each source of the methods' selection times once, with the methods it applies to."""
    by_source: dict[str, list[str]] = {}
    for method in study.methods:
        by_source.setdefault(study.select_ms(method, workers, 0.0)[1], []).append(method)
    return "; ".join(f"{', '.join(methods)}: {source}" for source, methods in by_source.items())


def selection_costs(spec: StudySpec, quick: bool, study: Study, extra: tuple[str, ...] = (),
                    counts: Path | None = None) -> dict:
    """The study's methods whose selection on the modelled GPU is neither given nor measured,
    counted at the study's layout (selection.py)."""
    if study.profile.name == "measured" or study.profile.selection_model is None:
        return {}
    needed = [m for m in study.methods if m not in study.select_override
              and not study.select_ms(m, 4, 0.0)[1].startswith("measured")]
    overrides = [f"experiment={spec.experiment}", *(spec.quick_base if quick else ()), *extra]
    return count_for_study(overrides, needed, kept=counts) if needed else {}


def parse_pairs(option: str, values: list[str]) -> dict[str, float]:
    """`<name>=<ms>` pairs of a repeatable option (also comma-separated)."""
    pairs = {}
    for value in (v for item in values for v in item.split(",") if v):
        name, _, number = value.partition("=")
        try:
            pairs[name] = float(number)
        except ValueError:
            raise SystemExit(f"{option} {value}: expected <name>=<ms>, e.g. {option} resnet18=8") from None
    return pairs


def all_sweeps(names: list[str], quick: bool) -> list[Sweep]:
    """The convergence sweep (the other factor, convergence.py), then every study's sweeps (each
    study's longest first, studies.py): taken two at a time, the cores finish close together."""
    return [*convergence_sweeps([STUDIES[name] for name in names], quick), *(sweep for name in names for sweep in STUDIES[name].sweeps(quick))]


def answer(names: list[str], out: Path, options: argparse.Namespace, networks: list[NetworkModel],
           profile: ComputeProfile, given: list) -> tuple[dict[str, dict], str]:
    """Every study's grid, figures, ratios (the laptop sweep's and the `given`) and verdicts, and the page's text."""
    workers = sorted(int(w) for w in options.workers.split(",") if w)
    compute_ms, select_ms = parse_pairs("--compute-ms", options.compute_ms), parse_pairs("--select-ms", options.select_ms)
    ratios = verdicts.laptop_ratios(out, options.tolerance / 100) + given
    studies, sections = {}, []
    for name in names:
        spec = STUDIES[name]
        study = model_study(spec, out / spec.name, networks, profile, workers, options.quick, compute_ms, select_ms)
        study["figures"] = {net: report.figure(study["grid"], net, spec.title, out / f"endtoend_{name}_{net}.png").name
                            for net in study["networks"]}
        study["ratios"] = [verdicts.ratio_json(r) for r in ratios]
        study["verdicts"] = verdicts.verdicts(study["grid"], ratios)
        studies[name] = study
        sections.append(report.study_markdown(study, study["grid"], study["figures"]))
    return studies, "# Does sparsification pay?\n\n" + "\n".join(sections)


def publish(out: Path, argv: list[str] | None, studies: dict[str, dict], wall: float | None,
            pages: Path = measured.PAGES) -> Path:
    """docs/measured/endtoend.md from endtoend.json, its figures copied beside it."""
    pages.mkdir(parents=True, exist_ok=True)
    for study in studies.values():
        for png in study["figures"].values():
            shutil.copyfile(out / png, pages / png)
    return measured.publish(
        "endtoend", "Does sparsification pay? As make endtoend measured it",
        "make endtoend" + (f" ARGS=\"{' '.join(argv)}\"" if argv else ""),
        "experiments.studies.endtoend.report:measured_page", json.loads((out / "endtoend.json").read_text()),
        measured.provenance([out], wall), pages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make endtoend", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="output directory (default outputs/endtoend/<time>)")
    parser.add_argument("--studies", default=None, help=f"comma list of {', '.join(STUDIES)} (default resnet18; quickstart with --quick)")
    parser.add_argument("--networks", default=",".join(NETWORKS), help="cluster presets (conf/network/) or YAML paths")
    parser.add_argument("--compute-profile", default="h200", help="h200 (default: the GPU measured) | v100 | a100 | h100 | measured (this machine) (conf/compute_profile/) or a YAML path")
    parser.add_argument("--compute-ms", action="append", default=[], help="<study or model>=<ms>: compute per step on the modelled GPU")
    parser.add_argument("--select-ms", action="append", default=[], help="<method>=<ms>: selection per rank on the modelled GPU, every W")
    parser.add_argument("--workers", default=",".join(map(str, WORKERS)), help="modelled worker counts")
    parser.add_argument("--steps-from", type=Path, default=None, help="a folder of runs (a dense baseline and sparsifiers of one workload): their steps ratios")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE * 100,
                        help="the target: the best dense baseline's final accuracy less this many points (default 0.5)")
    parser.add_argument("--quick", action="store_true", help="the test suite's cut-down run")
    parser.add_argument("--skip-runs", action="store_true", help="model what --out already holds")
    parser.add_argument("--publish", action="store_true", help="write the page to docs/measured/endtoend.md")
    parser.add_argument("--jobs", type=int, default=min(MAX_JOBS, os.cpu_count() or 1),
                        help=f"sweeps run at once (default: one per core, at most {MAX_JOBS})")
    options = parser.parse_args(argv)
    studies = options.studies or ("quickstart" if options.quick else "resnet18")  # --quick: the cut-down study
    names = [name for name in studies.split(",") if name]
    unknown = [name for name in names if name not in STUDIES]
    if unknown:
        raise SystemExit(f"--studies: unknown {', '.join(unknown)}; choose from {', '.join(STUDIES)}")
    if options.steps_from is not None and not options.steps_from.is_dir():
        raise SystemExit(f"--steps-from {options.steps_from}: no such folder (a folder of runs, e.g. make reproduce LONG=1's)")
    if options.tolerance < 0:
        raise SystemExit(f"--tolerance {options.tolerance}: expected points at or above 0 (the target is dense's final less it)")
    if options.jobs < 1:
        raise SystemExit(f"--jobs {options.jobs}: expected at least 1 (sweeps run at once)")
    networks = [NetworkModel.preset(name) for name in options.networks.split(",") if name]  # ConfigError names a bad one
    profile = ComputeProfile.load(options.compute_profile)
    given = verdicts.given_ratios(options.steps_from, options.tolerance / 100)  # refused before any run
    out = start_study(options.out, "endtoend")
    started = time.monotonic()
    if not options.skip_runs:
        say_if_busy(TIMED)
        # The cores shared between the sweeps at once: left to itself a hosted run takes them all
        # (launcher.threads_per_process: cores / processes), and two such runs side by side spin
        # against each other (OpenMP's waiting threads): a ResNet-18 step took 2-3 s, not 0.2.
        threads = threads_override(options.jobs)
        sweeps = all_sweeps(names, options.quick)
        run_sweeps([replace(sweep, args=(*sweep.args, threads)) for sweep in sweeps], out, options.jobs)
    elif not out.is_dir():
        raise SystemExit(f"--skip-runs: {out} does not exist")
    studies, text = answer(names, out, options, networks, profile, given)
    (out / "endtoend.md").write_text(text)
    report.write_json(out / "endtoend.json", studies)
    print(text)
    wall = time.monotonic() - started
    print(f"make endtoend: {minutes(wall)}, results in {out}")
    if options.publish:
        # A study modelled again (--skip-runs) did not time its runs: its page says no wall time.
        print(f"published: {publish(out, argv, studies, None if options.skip_runs else wall)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
