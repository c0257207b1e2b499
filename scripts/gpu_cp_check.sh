#!/usr/bin/env bash
# The CP runtime on one GPU machine, in one call: builds (Ninja, -j16), runs the GPU tests of the
# communicators, whole runs on the device communicator (virtual ranks of one GPU) and on NCCL
# ranks (one process per rank sharing the GPU, each with its own NCCL_HOSTID over loopback
# sockets), the overlap measurement at cp 1 vs cp 4 on packed-64k, and a trace; logs go to $OUT.
#
#   scripts/gpu_cp_check.sh [all|tests|runs|nccl|perf]
#   env: OUT (log dir, default ./out), BUILD_DIR (default build-gpu)
# Needs .deps/ from scripts/fetch_device_deps.sh on machines without network.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-all}"
OUT="${OUT:-$PWD/out}"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off in every launch

start=$(date +%s)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" -DRINGPACK_CUDA=ON >"$OUT/configure.log" 2>&1 ||
  { tail -30 "$OUT/configure.log"; note "configure: FAILED"; exit 1; }
grep "ringpack:" "$OUT/configure.log" | tee -a "$SUMMARY"
cmake --build "$BUILD_DIR" -j16 --target ringpack_gpu_tests ringpack_cli >"$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -40; note "build: FAILED"; exit 1; }
note "build: ok ($(( $(date +%s) - start )) s)"
CLI="$BUILD_DIR/ringpack"

# ---- every GPU test (kernels, backend, communicators, CP schedules, whole runs) ----
if [[ "$MODE" == all || "$MODE" == tests ]]; then
  timeout 400 "$BUILD_DIR/ringpack_gpu_tests" >"$OUT/gpu_tests.log" 2>&1
  note "gpu tests: exit $? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/gpu_tests.log" | head -2 | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/gpu_tests.log" | sort -u | tee -a "$SUMMARY"
fi

# Layouts that break naive CP: 1-token documents, documents shorter than cp, interior and tail
# padding, a document longer than a shard, B = 2 with an all-padding row.
ADVERSARIAL=(
  "--segment-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32 --batch 1"
  "--segment-ids 1,1,1,0,0,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,3,3,3,3,3,3,3,3,3,0,0,4,4,4,4,4,4,4,4,4,4,4,4,4,0,0,0,0 --batch 1"
  "--lengths uniform --uniform-min 1 --uniform-max 3 --seq-len 48"
  "--layout tests/data/two_rows_one_padding.json"
)

# ---- whole runs on the device communicator: cp 2, 4, 8, both strategies ----
if [[ "$MODE" == all || "$MODE" == runs ]]; then
  fails=0; total=0
  for cp in 2 4 8; do
    for strategy in ring all_gather; do
      for i in "${!ADVERSARIAL[@]}"; do
        # shellcheck disable=SC2086
        "$CLI" run --backend cuda --comm device --cp "$cp" --strategy "$strategy" --reorder auto \
          --dtype bf16 --heads-q 4 --heads-kv 2 --head-dim 64 --verify --quiet ${ADVERSARIAL[$i]} \
          >"$OUT/run_device.log" 2>&1
        status=$?; total=$((total + 1))
        if [[ $status -ne 0 ]]; then
          fails=$((fails + 1)); note "device cp $cp $strategy layout $i: exit $status"
          tail -3 "$OUT/run_device.log" | tee -a "$SUMMARY"
        fi
      done
      "$CLI" run --backend cuda --comm device --cp "$cp" --strategy "$strategy" --verify --quiet \
        >"$OUT/run_device_default_cp${cp}_$strategy.log" 2>&1 || { fails=$((fails + 1));
        note "device cp $cp $strategy default batch: FAILED"; }
      total=$((total + 1))
    done
  done
  note "device communicator runs: $((total - fails))/$total PASS"
fi

# ---- NCCL ranks sharing the GPU: one process per rank, its own NCCL_HOSTID ----
if [[ "$MODE" == all || "$MODE" == nccl ]]; then
  export MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
  nccl_run() {  # nccl_run CP ARGS...: mpirun with per-rank NCCL_HOSTID
    local cp=$1; shift
    timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$cp" \
      -x MASTER_ADDR -x MASTER_PORT -x NCCL_SOCKET_IFNAME -x NCCL_IB_DISABLE -x NCCL_NVLS_ENABLE \
      sh -c 'NCCL_HOSTID=ringpack-rank-$OMPI_COMM_WORLD_RANK exec "$@"' sh \
      "$CLI" run --backend cuda --comm nccl --cp "$cp" --quiet "$@"
  }
  fails=0; total=0
  for cp in 2 4; do
    for strategy in ring all_gather; do
      for args in "" "${ADVERSARIAL[@]}"; do
        # shellcheck disable=SC2086
        nccl_run "$cp" --strategy "$strategy" --verify --dtype bf16 --heads-q 4 --heads-kv 2 \
          --head-dim 64 $args >"$OUT/run_nccl.log" 2>&1
        status=$?; total=$((total + 1))
        if [[ $status -ne 0 ]]; then
          fails=$((fails + 1)); note "nccl cp $cp $strategy [$args]: exit $status"
          grep -v "^\[" "$OUT/run_nccl.log" | tail -4 | tee -a "$SUMMARY"
        fi
      done
    done
  done
  note "nccl runs (mpirun, per-rank NCCL_HOSTID): $((total - fails))/$total PASS"
  nccl_run 4 --verify --trace "$OUT/trace_nccl_cp4.json" >"$OUT/run_nccl_cp4.txt" 2>&1
  note "nccl cp 4 default batch with trace: exit $?"
fi

# ---- overlap: the CP schedule's cost when one GPU does every rank's work (packed-64k) ----
if [[ "$MODE" == all || "$MODE" == perf ]]; then
  PACKED64K=(--seq-len 65536 --heads-q 32 --heads-kv 8 --head-dim 128 --dtype bf16 --seed 0)
  # The ring over every reorder (contiguous on one GPU isolates the schedule's own cost: the
  # imbalance it has is hidden when one GPU runs every rank), then all_gather.
  for variant in "ring contiguous" "ring dual_chunk_swap" "ring auto" \
                 "all_gather auto"; do
    read -r strategy reorder <<<"$variant"
    "$CLI" bench --cp "${BENCH_CP:-4}" --comm device --strategy "$strategy" --reorder "$reorder" \
      --workloads packed-64k,packed-16k --reps 5 --warmup 2 \
      >"$OUT/bench_cp.txt" 2>"$OUT/bench_cp.log"
    note "bench --cp ${BENCH_CP:-4} $strategy $reorder: exit $?"
    grep -v "^# TFLOP" "$OUT/bench_cp.txt" >>"$SUMMARY"
  done
  "$CLI" run --backend cuda --comm device --cp 4 "${PACKED64K[@]}" --no-verify \
    --trace "$OUT/trace_device_cp4.json" >"$OUT/run_device_cp4_64k.txt" 2>&1
  note "device cp 4 packed-64k with trace: exit $?"
  grep -A8 "^ranks:" "$OUT/run_device_cp4_64k.txt" | tee -a "$SUMMARY"
fi

# Traces and logs in one archive (the device tool returns a few files only).
tar -czf "$OUT/logs.tgz" -C "$OUT" --exclude=logs.tgz . 2>/dev/null
echo "==== summary ===="
cat "$SUMMARY"
