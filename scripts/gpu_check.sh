#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one go, for a GPU machine (CI has none):
#   1. every test marked `gpu` (tests/engines/test_cuda_path.py: engine, learner, reference,
#      critic and a whole LoRA run on the GPU);
#   2. the CUDA-only test not marked gpu: the memory predictor against measured peaks
#      (tests/run/test_memory_fit_accuracy.py::test_prediction_within_25_percent_on_a_gpu);
#   3. the SmolLM2-shape engine-vs-learner log-prob tests (tests/engines/test_smollm2_shape.py).
#      They have no device switch and run on the CPU: this checks the machine's torch/transformers;
#   4. the RL-step benchmark (benchmarks/gpu_rl_step.py): random Qwen2.5-0.5B/1.5B-shaped models in
#      bf16, tokens/s/GPU, MFU, peak memory, engine vs transformers decode, into gpu_rl_step.json.
# Estimated on one H100/H200: steps 1-3 about 3 minutes, step 4 prints its own (about 3.5 minutes):
# under 8 minutes in all.
# Every step runs and is reported even when an earlier one failed; the script exits non-zero at
# the end if any did. Logs go to $OUT (when set) or $LOG_DIR (default: gpu-check-logs/).
#
# The package must be installed (`python3 -m pip install --no-deps -e .`): the recipes the LoRA
# run and the memory test load live in the package `reinforge.recipes`, which only an install maps.
# A machine with no package index (the lent GPU machines: torch and transformers but no pydantic)
# gets our other dependencies as wheels in .gpu_wheels/ (git-ignored; scripts/gpu_wheels.sh fetches
# them on a machine with one): when that folder exists, this script installs them into
# $GPU_SITE (default /tmp/reinforge-gpu-site) and reinforge itself (--no-deps --no-build-isolation -e .)
# where reinforge cannot be imported yet.
# REINFORGE_GPU_TEST_DEVICE=cpu runs step 1 on the CPU (to check the script and the tests' logic
# on a machine without a GPU); step 2 then skips. STEP_TIMEOUT (seconds, default 300; 900 on the CPU) bounds each step.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG_DIR="${OUT:-${LOG_DIR:-gpu-check-logs}}"
mkdir -p "$LOG_DIR"
# The gpu group on a busy 2-core CPU (REINFORGE_GPU_TEST_DEVICE=cpu) took 270 s of pytest alone: more time there.
[[ "${REINFORGE_GPU_TEST_DEVICE:-cuda}" == cpu ]] && STEP_TIMEOUT="${STEP_TIMEOUT:-900}"
STEP_TIMEOUT="${STEP_TIMEOUT:-300}"
export PYTHONUNBUFFERED=1
PYTHON="${PYTHON:-python3}"

{
    echo "== machine"
    nvidia-smi -L 2>&1 || echo "(no nvidia-smi)"
    "$PYTHON" -c "import sys, torch, transformers; print('python', sys.version.split()[0], '| torch', torch.__version__, '| transformers', transformers.__version__); print('cuda available:', torch.cuda.is_available(), '|', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"
} 2>&1 | tee "$LOG_DIR/env.log"

if [[ -d .gpu_wheels ]] && ! "$PYTHON" -c "import reinforge.recipes, reinforge.config" 2>/dev/null; then
    GPU_SITE="${GPU_SITE:-/tmp/reinforge-gpu-site}"
    echo "== installing .gpu_wheels/ into $GPU_SITE, and reinforge (editable, no dependencies)"
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$GPU_SITE" .gpu_wheels/*.whl || exit 2
    export PYTHONPATH="$GPU_SITE${PYTHONPATH:+:$PYTHONPATH}"
    "$PYTHON" -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 2
fi

if ! "$PYTHON" -c "import reinforge.recipes" 2>/dev/null; then
    echo "gpu_check: reinforge is not installed (the package reinforge.recipes is missing); install it first:" >&2
    echo "  $PYTHON -m pip install --no-deps -e .   (add --no-build-isolation where no package index can be reached)" >&2
    exit 2
fi

if [[ "${REINFORGE_GPU_TEST_DEVICE:-cuda}" == cuda* ]] && ! "$PYTHON" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "gpu_check: torch sees no CUDA GPU here, so every GPU test would skip; run this on a GPU machine" >&2
    echo "  (or set REINFORGE_GPU_TEST_DEVICE=cpu to check the script and the tests' logic on the CPU)" >&2
    exit 2
fi

failed=()
step() {  # step NAME PYTEST-ARGS...: one pytest run, its log in $LOG_DIR/NAME.log
    local name="$1"
    shift
    echo "== $name: $PYTHON -m pytest $*"
    timeout "$STEP_TIMEOUT" "$PYTHON" -m pytest "$@" 2>&1 | tee "$LOG_DIR/$name.log"
    local rc="${PIPESTATUS[0]}"
    # Exit 1 with only modules that failed to import ("ERROR tests/x.py", no test id) and no failed
    # or erroring test: the tests that ran passed (the gpu step collects every module, see below).
    if ((rc == 1)) && ! grep -qE '^(FAILED |ERROR [^ ]*::)' "$LOG_DIR/$name.log" && grep -qE '^ERROR ' "$LOG_DIR/$name.log"; then
        echo "== $name: tests passed; test modules that could not be imported here: $(grep -cE '^ERROR ' "$LOG_DIR/$name.log")"
        return
    fi
    echo "== $name: exit $rc"
    ((rc == 0)) || failed+=("$name (exit $rc)")
}

# -m gpu replaces the default run's marker filter, and collects every test module: those whose
# packages a GPU machine lacks (openai, datasets, reasoning-gym, wandb) fail to import, which is
# reported without failing the step.
step gpu -q -m gpu --continue-on-collection-errors tests/
step memory_fit -q tests/run/test_memory_fit_accuracy.py -k on_a_gpu
step smollm2_shape -q tests/engines/test_smollm2_shape.py

echo "== rl_step_benchmark: $PYTHON benchmarks/gpu_rl_step.py (REINFORGE_GPU_TEST_DEVICE=cpu: tiny, on the CPU)"
timeout "$STEP_TIMEOUT" "$PYTHON" benchmarks/gpu_rl_step.py --out "$LOG_DIR/gpu_rl_step.json" 2>&1 | tee "$LOG_DIR/rl_step_benchmark.log"
rc="${PIPESTATUS[0]}"
echo "== rl_step_benchmark: exit $rc"
((rc == 0)) || failed+=("rl_step_benchmark (exit $rc)")

if ((${#failed[@]})); then
    echo "gpu_check: FAILED: ${failed[*]} (logs in $LOG_DIR)"
    exit 1
fi
echo "gpu_check: all steps passed (logs in $LOG_DIR)"
