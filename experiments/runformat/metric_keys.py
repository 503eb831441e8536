"""The keys of metrics.jsonl and summary.json, one constant per fact (docs/metrics.md).

The runner, the sparsifiers, the analysis and the tests' synthetic runs all name a metric through
these constants, so a key exists once: the one the runner logs. On the bottom floor (stdlib only):
the engine, the studies, the sparsifiers and the analysis may all import it.
"""
from __future__ import annotations

# -- fields of every row ----------------------------------------------------------------------
ROW_STEP = "step"
ROW_KIND = "kind"  # KIND_TRAIN or KIND_EVAL
ROW_EPOCH = "epoch"
KIND_TRAIN = "train"
KIND_EVAL = "eval"

# -- train/* ----------------------------------------------------------------------------------
LOSS = "train/loss"  # mean over ranks
LR = "train/lr"
SKIPPED = "train/skipped"  # 1.0 on a step the non-finite guard skipped (experiments/engine/core/skip.py)
SKIPPED_TOTAL = "train/skipped_total"
SKIPPED_RANK = "train/skipped_rank"
SKIPPED_STEPS = "train/skipped_steps"  # summary.json only
DIVERGED = "diverged"  # summary.json only: {"at_step", "why"} or null (experiments/runformat/divergence.py)

# -- eval/* (each task logs its own; analysis.tasks knows which is the headline) --------------
ACCURACY = "eval/accuracy"
EVAL_LOSS = "eval/loss"
TOP5 = "eval/top5"
PERPLEXITY = "eval/perplexity"
HR10 = "eval/hr10"
NDCG10 = "eval/ndcg10"
EVAL_PREFIX = "eval/"

# -- time/* (per-rank timings reduced over ranks on logging steps) ----------------------------
SELECT_MAX = "time/select_ms_max"
SELECT_MEAN = "time/select_ms_mean"
COMPUTE_MAX = "time/compute_ms_max"
COMPUTE_MEAN = "time/compute_ms_mean"
EXCHANGE = "time/exchange_ms"
EXCHANGE_MODEL = "time/exchange_model_ms"  # the network model's time for this step's exchange
DENSE_MODEL = "time/dense_model_ms"  # ... and for the dense allreduce of the same model
STEP = "time/step_ms"
ELAPSED = "time/elapsed_s"

# -- traffic/* (bytes per rank, known identically on every rank) ------------------------------
SENT_MAX = "traffic/sent_bytes_max"
SENT_MEAN = "traffic/sent_bytes_mean"
RECV_MAX = "traffic/recv_bytes_max"
RECV_MEAN = "traffic/recv_bytes_mean"
DENSE_BYTES = "traffic/dense_bytes"
RATIO = "traffic/ratio"
SENT_TOTAL_MAX = "traffic/sent_bytes_total_max"  # summary.json only: summed over every step
LEDGER = "traffic/ledger"  # metrics.jsonl only: the step's collectives as text (experiments/engine/core/ledger.py)

# -- density/*, build-up, selection/* ---------------------------------------------------------
DENSITY_ACTUAL = "density/actual"  # |U| / N
DENSITY_TARGET = "density/target"
DENSITY_ERROR = "density/error"  # |U| / k - 1
DENSITY_ABS_ERROR = "density/abs_error"  # summary.json only
DENSITY_ERROR_SETTLED = "density/error_settled"  # summary.json only: the later half of the logged rows holding a density error
DENSITY_TARGET_CONFIGURED = "density/target_configured"  # summary.json only: sparsifier.density
BUILDUP = "buildup"
OVERLAP = "selection/overlap"
K_MAX = "selection/k_max"
K_MEAN = "selection/k_mean"
LOAD_IMBALANCE = "selection/load_imbalance"
SCANNED = "selection/scanned"  # coordinates this rank's selection looked at
# metrics.jsonl only, with position_bins > 0 (experiments/engine/core/positions.py): where in the vector a
# step's coordinates lie, in position_bins equal bins of N: the aggregated coordinates (|U| per
# bin) and the squared entries of rank 0's accumulator before selection (its energy per bin).
POSITIONS = "selection/positions"
ENERGY = "selection/energy"

# -- ef/* (error feedback) --------------------------------------------------------------------
RESIDUAL = "ef/residual_norm"
REL_RESIDUAL = "ef/rel_residual"

# -- hook/* (the DDP hook, experiments/engine/ddp: this rank's own numbers; the counts-based keys above
# are the same on every rank) ------------------------------------------------------------------
HOOK_SELECT = "hook/select_ms"  # this rank's selection (the leader's plan included)
HOOK_EXCHANGE = "hook/exchange_ms"  # this rank's exchange
HOOK_TOTAL = "hook/total_ms"  # the step after the last bucket: accumulate to residual
HOOK_COPY = "hook/copy_ms"  # copying the buckets into the flat gradient and the aggregate back
HOOK_BUCKETS = "hook/buckets"  # DDP buckets assembled into this step's gradient
HOOK_RESIDUAL = "hook/residual_norm"  # ||residual|| after the step, this rank
HOOK_REL_RESIDUAL = "hook/rel_residual"  # ||residual|| / ||acc||, this rank

# -- method state: sparsifier/* (shared by several methods) -----------------------------------
SPARSIFIER_PREFIX = "sparsifier/"
THRESHOLD = "sparsifier/threshold"  # MiCRO, ExDyna, SAGE, DGC, the threshold baseline, Gaussian-k, SIDCo, Ok-Topk (local)
PARTITION_BOUNDARIES = "sparsifier/partition_boundaries"  # ExDyna: block indices, 0 to B
BLOCKS_MOVED = "sparsifier/blocks_moved"  # ExDyna
BLOCK_SIZE = "sparsifier/block_size"  # ExDyna
SCANS = "sparsifier/scans"  # Gaussian-k's threshold refinements
STAGES = "sparsifier/stages"  # SIDCo: threshold-estimation stages run this step

# -- method state: oktopk/* ------------------------------------------------------------------
GLOBAL_THRESHOLD = "oktopk/global_threshold"  # the owners' threshold (identical on every rank)
REGION_BOUNDARIES = "oktopk/region_boundaries"  # B_0 = 0 ... B_W = N (identical on every rank)

# -- method state: dgc/* ----------------------------------------------------------------------
DGC_DENSITY = "dgc/density"  # the warm-up stage's density
DGC_RETRIES = "dgc/retries"
DGC_CLIP_COEF = "dgc/clip_coef"

# -- method state: deft/* ---------------------------------------------------------------------
DEFT_MAX_BIN_LOAD_RATIO = "deft/max_bin_load_ratio"
DEFT_K_SUM = "deft/k_sum"
DEFT_COMMON_UNITS = "deft/common_units"
# Per-unit lists, logged every sparsifier.log_units_every steps:
DEFT_UNIT_K = "deft/unit_k"
DEFT_UNIT_COMMON = "deft/unit_common"
DEFT_UNIT_NORMS = "deft/unit_norms"
DEFT_BIN_LOADS = "deft/bin_loads"  # one per worker

# -- method state: accordion/* ----------------------------------------------------------------
ACCORDION_HIGH = "accordion/high"  # parameters at k_high in the current plan (identical on every rank)
ACCORDION_DETECTIONS = "accordion/detections"  # detections so far
# Per-parameter lists, logged on the steps of a detection only:
ACCORDION_PARAMETER_HIGH = "accordion/parameter_high"  # 1: k_high, 0: k_low
ACCORDION_PARAMETER_NORMS = "accordion/parameter_norms"  # rank 0's raw gradient norms it decided on


def sparsifier_key(name: str) -> str:
    """A method's own scalar under sparsifier/ (SAGE's alpha, beta, gamma, d_exam)."""
    return SPARSIFIER_PREFIX + name
