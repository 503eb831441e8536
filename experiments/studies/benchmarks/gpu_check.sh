#!/usr/bin/env bash
# The GPU check of issue 36: everything sparsebench measures on CUDA, in one go, on a machine
# with at least one GPU. About 6-8 minutes on one H200 (docs/speed.md, "On a GPU"):
#
#   bash experiments/studies/benchmarks/gpu_check.sh OUT_DIR        (from the repository root)
#
#  1. selection on the GPU: make bench MODE=select DEVICE=cuda (W = 1..64, 15 synchronized
#     calls, the device copy and torch.topk baselines)        -> OUT/select.txt, OUT/select.json
#  2. the hosted step on the GPU: make bench MODE=step DEVICE=cuda, hosted W = 16, 64 (distributed
#     W skipped below one GPU per process)                     -> OUT/step.txt, OUT/step.json
#  3. the tests that need or change with a GPU: the layouts' device pins, the exchanges' syncs and
#     the rank-order accumulation on CUDA, the hosted-vs-processes command line, the NCCL hook,
#     env.json's GPU section, the benchmarks' device plumbing  -> OUT/tests.txt
#  4. DEFT's per-unit top-k (issue 48): classed_topk beside the sorts it replaced, rank 0's bin at
#     W = 1, 2, 4, 16, 64, checked equal on the GPU                -> OUT/unit_topk.txt
#  5. hosted ResNet-18 (3x32x32 synthetic), W = 16 on one GPU, Top-k, DEFT, MiCRO, ExDyna: the share
#     of the step outside the ranks' forward/backward (target <= 10%), and the host syncs and
#     operations of one hosted step                            -> OUT/hosted.txt, OUT/runs/
# A step that fails is reported and the others still run; the exit code says whether all passed.
set -u
OUT=${1:?usage: bash experiments/studies/benchmarks/gpu_check.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PY:-.venv/bin/python}
export WANDB_MODE=disabled PYTHONPATH=$PWD
failed=()
step() {  # step NAME LOGFILE COMMAND...: runs, keeps the output, notes a failure
  local name=$1 log=$2; shift 2
  echo "== $name ($(date +%T))"
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || failed+=("$name (exit $rc)")
}
"$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 2)" || {
  echo "gpu_check: no GPU here (torch.cuda.is_available() is False): run it on a machine with CUDA" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1 || true

step select "$OUT/select.txt" make -s -o .venv/.installed bench MODE=select DEVICE=cuda PY="$PY" \
  ARGS="--repeats 15 --workers 1,2,4,8,16,32,64 --out $OUT/select.json"
step step "$OUT/step.txt" make -s -o .venv/.installed bench MODE=step DEVICE=cuda PY="$PY" \
  ARGS="--workers 2 --hosted 16,64 --hosted-repeats 5 --json $OUT/step.json"
step tests "$OUT/tests.txt" "$PY" -m pytest -q -p no:cacheprovider -x \
  tests/test_layout_devices.py tests/test_exchange_syncs.py tests/test_environment.py \
  "tests/test_deterministic_reduction.py::test_the_command_line_logs_the_same_metrics_hosted_and_in_processes" \
  tests/test_ddp_hook.py::test_nccl_processes_on_gpus_equal_sparsebench_step
step "bench tests" "$OUT/bench_tests.txt" "$PY" -m pytest -q -p no:cacheprovider tests/test_benchmarks_entry.py -k "device or json or synchron"
step "unit topk" "$OUT/unit_topk.txt" make -s -o .venv/.installed bench MODE=unit_topk DEVICE=cuda PY="$PY" \
  ARGS="--workers 1,2,4,16,64 --repeats 15"

runs=()
for method in topk deft micro exdyna; do
  dir="$OUT/runs/hosted_resnet18_w16_$method"
  step "hosted $method" "$OUT/hosted_$method.log" "$PY" run.py model=resnet18 dataset=synthetic dataset.channels=3 \
    dataset.image_size=32 dataset.num_train=20480 dataset.num_test=512 workers=16 processes=1 device=cuda \
    sparsifier=$method sparsifier.density=0.001 max_steps=30 warmup_steps=10 logger=local logger.log_every=1 \
    logger.progress=false hydra.run.dir="$dir"
  runs+=("$dir")
done
step "hosted share" "$OUT/hosted.txt" "$PY" -c "import sys; from experiments.studies.benchmarks.outside_share import print_shares; print_shares(sys.argv[1:])" "${runs[@]}"
step "hosted syncs" "$OUT/hosted_syncs.txt" "$PY" - <<'PYEOF'
# One hosted step's operations and host syncs on CUDA (phases 2-5), W = 4 and 16, ResNet-18 size.
import torch
from experiments.studies.benchmarks.step import benchmark_layout, build_method, gaussian_gradient
from experiments.engine.core.sparsify import sparsify_and_exchange
from experiments.engine.core.sync_count import SyncCounter
from experiments.engine.core.world import init_world
for name in ("topk", "deft", "micro", "exdyna"):
    for workers in (4, 16):
        world = init_world(workers, "cuda", "nccl", 60)
        layout = benchmark_layout(None)
        methods = [build_method(name, workers, 0.001, layout, rank) for rank in range(workers)]
        accs = [gaussian_gradient(layout.numel, 1e-3, rank, 0).cuda() for rank in range(workers)]
        out = torch.zeros(layout.numel, device="cuda")
        for step in range(5):
            sparsify_and_exchange(world, methods, accs, out, step)
        with SyncCounter() as counter:
            sparsify_and_exchange(world, methods, accs, out, 5)
        print(f"{name:<7} W={workers:<3} ops {counter.ops:6d} syncs {counter.syncs:4d} (copies {counter.copies}) "
              f"{dict(counter.sync_ops.most_common(4))}", flush=True)
PYEOF

echo "== done ($(date +%T)): results in $OUT"
if [ ${#failed[@]} -gt 0 ]; then echo "failed: ${failed[*]}"; exit 1; fi
