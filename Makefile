# Two commands a new user needs: `make run` and `make test`. Both bootstrap .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
FASHION_DIR := /usr/share/datasets/fashion-mnist

# Keep every cache out of $HOME (W&B, matplotlib, Jupyter), see docs/results.md ("Caches").
export MPLCONFIGDIR ?= $(CURDIR)/.venv/cache/matplotlib
export JUPYTER_CONFIG_DIR ?= $(CURDIR)/.venv/cache/jupyter
export JUPYTER_DATA_DIR ?= $(CURDIR)/.venv/cache/jupyter

.PHONY: run test test-fast reproduce endtoend compare mutants data bench gpu-check example calibrate lock clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# constraints.txt pins the whole stack; torch 2.14.1 is served from local disk here.
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	touch $(STAMP)

run: $(STAMP) data
	$(PY) run.py -m experiment=quickstart $(ARGS)

# Two tests at a time (pytest-xdist): one at a time, a core sat idle whenever a test ran on one
# thread (the tests' own process, run.py's start-up, a bad input's exit). --dist loadscope keeps a
# module's tests on one worker, so a world its module-scoped fixture builds is built once.
# ARGS="-n 0" runs one test at a time; test-fast and mutants run one at a time.
XDIST := -n 2 --dist loadscope
# The suite's budget is 15 minutes of pytest on a fresh clone of this 2-core machine: its 25 slowest steps, printed at the end, say where it goes.
DURATIONS := --durations=25

# `data` too: the reproduce and selection-study tests compose make reproduce's own jobs, whose
# pre-flight checks that Fashion-MNIST is there (a machine without it failed 17 of them).
test: $(STAMP) data
	WANDB_MODE=disabled $(PY) -m pytest $(XDIST) $(DURATIONS) $(ARGS)

# The papers' claims judged at laptop scale: the laptop studies, then claims.md with a verdict per
# claim (docs/reproduce.md). About 15 min on 2 idle cores (the last wall time: docs/measured/claims.md);
# ARGS="--out DIR" chooses where. LONG=1: the long study (3,000 statistics steps, 30 epochs of
# convergence; about 45 min on 2 idle cores, docs/measured/claims_long.md) into outputs/reproduce/long/; stopped
# and started again, it reuses the runs that finished. LONG=1 ARGS=--publish writes
# docs/measured/claims_long.md and claims_compare.md (the 30-minute verdicts beside the long ones).
reproduce: $(STAMP) data
	$(PY) -m experiments.studies.reproduce $(if $(LONG),--long) $(ARGS)

# Does sparsification pay? Every sparsifier's per-step speedup over the strongest dense baseline
# (its break-even) on three H200 clusters at W = 4 to 1,024, and a verdict where its steps ratio is
# known (docs/endtoend.md). At most 20 minutes on 2 cores, the convergence sweep included, two
# sweeps at a time (the last wall time: docs/measured/endtoend.md); ARGS=--publish writes that page;
# ARGS="--steps-from DIR" adds the steps ratios of a folder of runs;
# ARGS="--skip-runs --out DIR --networks h100x8_400g_ib --compute-profile h100"
# models a finished study again on other hardware in seconds.
endtoend: $(STAMP) data
	$(PY) -m experiments.studies.endtoend $(ARGS)

# Your sparsifier against the field: the standard battery (statistics, convergence, selection
# replay, the per-step factor) for METHOD=<name>[,<name>...] and the references, then each method's
# generic verdicts and scorecard, ranked among every registered method (the baseline study, run
# beside it in outputs/compare/<commit>_<cpu>_<gpu>/ unless already there; BASELINE=1 runs it
# alone) (docs/compare.md). Runs are cached there by configuration: a second call runs only a new
# method's. ARGS="--out DIR" chooses where; ARGS="--publish" writes docs/measured/leaderboard.md.
compare: $(STAMP) data
	$(PY) -m experiments.studies.compare $(if $(BASELINE),--baseline,--method "$(METHOD)") $(ARGS)

test-fast: $(STAMP)
	WANDB_MODE=disabled $(PY) -m pytest -m "not slow" $(ARGS)

# Realistic bugs planted one at a time (tests/helpers/mutants.py); each must fail the fast tier.
mutants: $(STAMP)
	$(PY) tests/helpers/mutants.py $(ARGS)

# Fashion-MNIST for the default run: Debian's dataset-fashion-mnist package (no download
# beyond the package registry). Elsewhere, set data_dir=... or dataset.download=true.
data:
	@if [ -f $(FASHION_DIR)/train-images-idx3-ubyte.gz ] || [ -n "$(wildcard data/fashion_mnist/*)" ]; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		echo "Installing Debian's dataset-fashion-mnist (once)"; \
		(apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 || \
		 (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist >/dev/null)); \
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then \
		sudo apt-get install -y -qq dataset-fashion-mnist >/dev/null; \
	else \
		echo "Fashion-MNIST not found: run.py will say how to get it (or use: make run ARGS=dataset=digits)"; \
	fi

# Every benchmark, all in experiments/studies/benchmarks/ (docs/speed.md). MODE=select (default):
# selection time of every sparsifier at W = 1, 4, 16, 64 on a ResNet-18-sized vector. MODE=step:
# the whole sparsification step per phase in real gloo processes (W = 2, 4), kernels torch
# beside auto, plus 64 ranks hosted in one process. MODE=load: loading 1,000 runs of 1,000 steps
# for the analysis, cached and cold. MODE=memory: peak memory of hosted ranks beside the estimate.
# MODE=ddp: a torchvision ResNet-18 in real DDP, DDP's own all-reduce beside the sparsebench hook.
# MODE=startup: where a quickstart run's wall time goes besides training (run.py, 3 repeats).
# DEVICE=cuda (select, step and unit_topk): the same on the GPU, synchronized; select writes JSON with ARGS="--out F".
# MODE=ops: torch operations, host syncs and bytes per select of every method, the GPU path counted on the
# CPU, and the H200 selection model's reading of them. MODE=unit_topk: DEFT's per-unit top-k, the
# size classes beside the sorts they replaced (DEVICE=cuda: on the GPU).
MODE ?= select
DEVICE ?=
DEVICE_ARG := $(if $(DEVICE), --device $(DEVICE))
bench: $(STAMP)
ifeq ($(MODE),step)
	$(PY) -m experiments.studies.benchmarks.step --hosted 64$(DEVICE_ARG) $(ARGS)
else ifeq ($(MODE),select)
	$(PY) -m experiments.studies.benchmarks.select$(DEVICE_ARG) $(ARGS)
else ifeq ($(MODE),load)
	$(PY) -m experiments.studies.benchmarks.load $(ARGS)
else ifeq ($(MODE),memory)
	$(PY) -m experiments.studies.benchmarks.hosted_memory $(ARGS)
else ifeq ($(MODE),ddp)
	$(PY) -m experiments.studies.benchmarks.ddp_hook $(ARGS)
else ifeq ($(MODE),startup)
	$(PY) -m experiments.studies.benchmarks.startup $(ARGS)
else ifeq ($(MODE),ops)
	$(PY) -m experiments.studies.benchmarks.op_counts $(ARGS)
else ifeq ($(MODE),unit_topk)
	$(PY) -m experiments.studies.benchmarks.unit_topk$(DEVICE_ARG) $(ARGS)
else
	$(error MODE must be select, step, load, memory, ddp, startup, ops or unit_topk, got $(MODE))
endif

# Everything issue 36 measures on CUDA, on a machine with a GPU (docs/speed.md, "On a GPU"):
# selection and the hosted step on the GPU, the tests a GPU changes, hosted ResNet-18 at W = 16.
# About 6-8 minutes on one H200; OUT=DIR chooses where the results go.
OUT ?= outputs/gpu_check
gpu-check: $(STAMP)
	PY=$(PY) bash experiments/studies/benchmarks/gpu_check.sh $(OUT)

# The DDP example (docs/ddp_hook.md, "Use a sparsifier in your own DDP script"): NPROC gloo (or NCCL)
# processes under torchrun; e.g. make example ARGS="--sparsifier micro --steps 50 --out runs/m".
NPROC ?= 2
example: $(STAMP)
	@PYTHONPATH=$(CURDIR) $(PY) examples/ddp_train.py --check $(ARGS)  # bad input: one line, once
	PYTHONPATH=$(CURDIR) $(PY) -m torch.distributed.run --nproc-per-node=$(NPROC) --max-restarts=0 \
		--rdzv-backend=c10d --rdzv-endpoint=localhost:0 examples/ddp_train.py $(ARGS)

# Fit the network model to this machine's collectives (docs/network.md, "Calibration"): real gloo
# process groups on this host (NCCL, one process per GPU, where there are GPUs), W = 2, 4, 8, sizes
# 4 B to 64 MB; writes presets to outputs/calibration/network/. About 2 min on 2 cores;
# ARGS="--quick" (W = 2, up to 4 MB) or e.g. ARGS="--workers 2,4 --max-bytes 16MB --repeats 3".
calibrate: $(STAMP)
	$(PY) -m experiments.studies.calibrate $(ARGS)

lock: $(STAMP)
	{ echo "# Exact pins of the whole stack (pip freeze of a fresh .venv on x86_64, Python 3.11)."; \
	  echo "# Regenerate with: make lock"; $(PY) -m pip freeze --exclude-editable; } > constraints.txt

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache
