#!/usr/bin/env bash
# The Python package on a GPU machine (one call): pip install . into the machine's Python (no
# network: --no-build-isolation, .deps/ for the C++ dependencies), pytest tests/python on CUDA
# tensors (NCCL ranks share the GPU: one NCCL_HOSTID per rank), ringpack's op against
# FlexAttention on the standard packed workloads, and the transformers training example with
# ringpack, sdpa and flex_attention side by side. Logs go to $OUT (default ./out).
#
#   scripts/gpu_python_check.sh [all|tests|bench|train]
#   env: OUT, STEPS (training steps, default 8), CLI (a built ringpack CLI for the bench layouts,
#        default build-gpu/ringpack), TRAIN_ATTN (the training example's implementations, default
#        "ringpack sdpa flex_attention"), TRAIN_TIMEOUT (seconds for them, default 300; Flex's
#        compile alone can take most of it: TRAIN_ATTN=flex_attention TRAIN_TIMEOUT=500 gives it
#        a call of its own, its results in train_flex_attention.json)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
MODE="${1:-all}"
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT" build
SUMMARY="$OUT/python_summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_NVLS_ENABLE=0
export CMAKE_BUILD_PARALLEL_LEVEL=16
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # jax and torch share the GPU in one pytest process

start=$(date +%s)
RINGPACK_PYTHON_ENV=current PIP_INSTALL_ARGS="-C cmake.define.RINGPACK_CUDA_ARCHS=90a \
-C cmake.define.CMAKE_PREFIX_PATH=$PWD/.deps/usr -C build-dir=build/python-gpu" \
  timeout 300 scripts/install_python.sh >"$OUT/python_install.log" 2>&1
status=$?
cp build/python-install.log "$OUT/python_pip.log" 2>/dev/null
note "pip install .: exit $status ($(( $(date +%s) - start )) s)"
[[ $status -eq 0 ]] || { tail -30 "$OUT/python_pip.log"; exit 1; }
python3 -c "import ringpack, torch, jax; print('ringpack cuda', ringpack.cuda_built(), 'torch',
torch.__version__, 'jax', jax.__version__, jax.devices())" 2>&1 | tee -a "$SUMMARY"

if [[ "$MODE" == all || "$MODE" == tests ]]; then
  start=$(date +%s)
  (cd tests/python && timeout 420 python3 -m pytest -q -rs) >"$OUT/pytest.log" 2>&1
  note "pytest tests/python: exit $? ($(( $(date +%s) - start )) s): $(tail -1 "$OUT/pytest.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -20 | tee -a "$SUMMARY"
  # ringpack.jax on the GPU (the run above used jax's CPU devices); the shard_map tests need as
  # many GPUs as cp, so one GPU runs the single-device tests.
  start=$(date +%s)
  (cd tests/python && RINGPACK_JAX_PLATFORM=cuda timeout 300 python3 -m pytest -q -rs \
    test_jax.py -k "not cp and not context_parallel") >"$OUT/pytest_jax_cuda.log" 2>&1
  note "pytest test_jax.py on CUDA: exit $? ($(( $(date +%s) - start )) s): $(tail -1 "$OUT/pytest_jax_cuda.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/pytest_jax_cuda.log" | head -20 | tee -a "$SUMMARY"
fi

if [[ "$MODE" == all || "$MODE" == bench ]]; then
  CLI="${CLI:-build-gpu/ringpack}"
  if [[ -x "$CLI" ]]; then
    "$CLI" bench --layouts-only --layouts-out "$OUT/layouts.json" \
      --workloads packed-16k,packed-64k >/dev/null 2>&1
    start=$(date +%s)
    timeout 300 python3 bench/python_op_vs_flex.py --layouts "$OUT/layouts.json" \
      --json "$OUT/op_vs_flex.json" >"$OUT/op_vs_flex.log" 2>&1
    note "op vs flex: exit $? ($(( $(date +%s) - start )) s)"
    grep -E "^packed" "$OUT/op_vs_flex.log" | tee -a "$SUMMARY"
    tail -5 "$OUT/op_vs_flex.log"
  else
    note "op vs flex: skipped ($CLI not built: run scripts/gpu_check.sh first)"
  fi
fi

if [[ "$MODE" == all || "$MODE" == train ]]; then
  start=$(date +%s)
  read -ra attn <<<"${TRAIN_ATTN:-ringpack sdpa flex_attention}"
  name="train"; [[ ${#attn[@]} -eq 1 ]] && name="train_${attn[0]}"
  timeout "${TRAIN_TIMEOUT:-300}" python3 examples/train_packed_llama.py --device cuda \
    --attn "${attn[@]}" --steps "${STEPS:-8}" --json "$OUT/$name.json" >"$OUT/$name.log" 2>&1
  note "training example: exit $? ($(( $(date +%s) - start )) s)"
  grep -A8 "attn_implementation" "$OUT/$name.log" | tee -a "$SUMMARY"
  tail -3 "$OUT/$name.log"
fi
