#!/usr/bin/env bash
# One call on a GPU machine: build (Ninja, -j16), GPU tests, compute-sanitizer on small cases,
# and the benchmark with its peers; logs go to $OUT (or ./out), a short summary prints last.
#
#   scripts/gpu_check.sh [all|quick|tests|sanitize|bench|ab|profile] [gtest filter]
#     the filter selects the tests of mode tests, and in mode sanitize replaces its small cases;
#     quick = tests + bench without peers and sanitizer (fast iteration on kernels);
#     ab = only the A/B against AB_BASELINE (below);
#     profile (or PROFILE=1 with any mode) = ncu of one forward and one backward launch
#     (PROFILE_WORKLOAD, default packed-16k; PROFILE_FLAGS="--head-dim 64" adds `ringpack bench`
#     flags to that run, e.g. PROFILE_WORKLOAD=dense-16k PROFILE_FLAGS="--forward-schedule
#     persistent" against the same run without the flag)
#   env: OUT (log dir), BUILD_DIR (default build-gpu),
#        BENCH_WORKLOADS (default dense-16k,packed-16k,packed-64k), BENCH_REPS (default 30),
#        BENCH_FLAGS="--head-dim 64" adds `ringpack bench` flags to the benchmark with peers (its
#        layouts too, so the peers run the same shapes),
#        BENCH_VARIANTS="--flag a;--flag b --other c" also times ours under each set of
#        `ringpack bench` kernel flags against the defaults, in alternating rounds (AB_ROUNDS,
#        default 3; scripts/ab_summary.py prints the medians and ratios), e.g.
#        "--forward-overlap pingpong;--forward-schedule persistent",
#        AB_BASELINE=DIR (with mode all, bench or ab) builds the tree in DIR too (e.g. the commit
#        before a change: git archive REV | tar -x -C DIR) and times both CLIs in alternating
#        rounds (AB_ROUNDS) with scripts/ab_trees.sh: the medians and ours / baseline per
#        workload;
#        AB_FLAGS="--head-dim 256 --no-backward" adds `ringpack bench` flags to every timed run
#        of both kinds of A/B (flags both trees accept),
#        PACK_LOGS=1 packs the logs into $OUT/logs.tgz at the end, beside summary.txt and
#        bench.json (for the device tool, which brings back at most 8 files)
# Needs .deps/ from scripts/fetch_device_deps.sh (CLI11, nlohmann-json, yaml-cpp) on machines
# without network.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
MODE="${1:-all}"
FILTER="${2:-*}"
OUT="${OUT:-$PWD/out}"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
WORKLOADS="${BENCH_WORKLOADS:-dense-16k,packed-16k,packed-64k}"
REPS="${BENCH_REPS:-30}"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu \
  --format=csv >"$OUT/device.txt" 2>&1
note "device: $(sed -n 2p "$OUT/device.txt")  mode: $MODE"

# ---- build ----
start=$(date +%s)
cmake --preset cuda-hopper -B "$BUILD_DIR" -G Ninja -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" \
  >"$OUT/configure.log" 2>&1 ||
  { tail -30 "$OUT/configure.log"; note "configure: FAILED"; exit 1; }
cmake --build "$BUILD_DIR" -j16 --target ringpack_gpu_tests ringpack_cli >"$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -40; note "build: FAILED"; exit 1; }
note "build: ok ($(( $(date +%s) - start )) s): $("$BUILD_DIR/ringpack" --version)"

# ---- GPU tests ----
if [[ "$MODE" == all || "$MODE" == tests || "$MODE" == quick ]]; then
  start=$(date +%s)
  "$BUILD_DIR/ringpack_gpu_tests" --gtest_filter="$FILTER" >"$OUT/gpu_tests.log" 2>&1
  status=$?
  # The last summary line is the suite's (the NCCL tests' child processes print their own first).
  note "gpu tests: $(grep -E '^\[  PASSED  \]' "$OUT/gpu_tests.log" | tail -1) \
$(grep -E '^\[  FAILED  \] [0-9]+ test' "$OUT/gpu_tests.log" | tail -1) (exit $status, $(( $(date +%s) - start )) s)"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/gpu_tests.log" | sort -u | tee -a "$SUMMARY"
  grep -B2 -A6 "Failure" "$OUT/gpu_tests.log" | head -60
fi

# ---- the main job on the CUDA backend: PASS on the default batch ----
if [[ "$MODE" == all || "$MODE" == tests || "$MODE" == quick ]]; then
  for cp in 1 4; do
    "$BUILD_DIR/ringpack" run --backend cuda --cp "$cp" --verify >"$OUT/run_cuda_cp$cp.log" 2>&1
    note "ringpack run --backend cuda --cp $cp --verify: exit $? ($(tail -1 "$OUT/run_cuda_cp$cp.log"))"
  done
fi

# ---- compute-sanitizer on small shapes ----
# No known report: since session 22 the Hopper forward hands a K stage's key ids back by a named
# barrier every consumer thread arrives on (ping-pong kernels: each thread's own k_empty
# arrival), orders racecheck follows; before, one lane's release after __syncwarp was reported
# (docs/benchmarks.md, "Session 22"). Any report is a finding.
if [[ "$MODE" == all || "$MODE" == sanitize ]]; then
  SMALL="CudaForward.HeadDimsOnALongDocument:CudaForward.PersistentCtasOnFewSmsMatchReference:CudaForward.PingPongMatchesReference:CudaForward.UnequalQueryAndKeyLengthsMatchReference:CudaForward.TwoMergedStepsMatchReference:CudaBackendTest.DeviceGather*:CudaBackward.LongDocumentAcrossManyTiles:CudaBackward.PersistentScheduleOnOneSmMatchesReference"
  [[ "$MODE" == sanitize && "$FILTER" != "*" ]] && SMALL="$FILTER"
  for tool in memcheck racecheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 100000 \
      "$BUILD_DIR/ringpack_gpu_tests" --gtest_filter="$SMALL" >"$OUT/sanitize_$tool.log" 2>&1
    note "compute-sanitizer $tool: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | tail -1))"
    # The source lines of the hazards' two sides, counted (until session 22: kernel_sm90.h's
    # writes of the key ids against softmax.h's reads), so a report shows where it is.
    sites=$(grep -E '^=========  *(Error: Race reported between|and [A-Za-z]+ access at) ' \
      "$OUT/sanitize_$tool.log" | grep -oE ' in [A-Za-z0-9_.]+:[0-9]+( \[.*\])?$' |
      sed -E 's/ \[.*\]$//; s/^ in //' | sort | uniq -c | tr -s ' ' | tr '\n' ';')
    [[ -z $sites ]] || note "  $tool hazard sites (count): $sites"
    # The reports per kernel instance (template arguments as written, namespaces dropped), so a
    # report of one schedule or overlap (e.g. ping-pong's last bool) shows apart from the others.
    kernels=$(grep -E '^=========  *Error: Race reported between' "$OUT/sanitize_$tool.log" |
      grep -oE 'ringpack::cuda::[a-z0-9_]+<[^()]*\(int\)[0-9]+, [A-Za-z_0-9]+>(, \(bool\)[01])*' |
      sed -E 's/ringpack::cuda:://g; s/\((int|bool)\)//g; s/__nv_//g' | sort | uniq -c |
      tr -s ' ' | tr '\n' ';')
    [[ -z $kernels ]] || note "  $tool reports by kernel (count): $kernels"
  done
fi

# ---- benchmark with peers ----
if [[ "$MODE" == all || "$MODE" == bench || "$MODE" == quick ]]; then
  CLI="$BUILD_DIR/ringpack"
  read -ra BENCH_EXTRA <<<"${BENCH_FLAGS:-}"
  if [[ "$MODE" != quick ]]; then
    "$CLI" bench --workloads "$WORKLOADS" --reps "$REPS" "${BENCH_EXTRA[@]}" --layouts-only \
      --layouts-out "$OUT/layouts.json" || note "bench layouts: FAILED"
    PYTHONUNBUFFERED=1 timeout 300 python3 bench/peers.py --layouts "$OUT/layouts.json" \
      --json "$OUT/peers.json" >"$OUT/peers.log" 2>&1 || note "peers: FAILED (see peers.log)"
  fi
  IFS=';' read -ra VARIANTS <<<"${BENCH_VARIANTS:-}"
  if (( ${#VARIANTS[@]} > 0 )); then
    VARIANTS=("" "${VARIANTS[@]}")  # variant 0: the defaults
    # Timing only: the main bench below checks the kernels against the fp64 reference.
    for round in $(seq 1 "${AB_ROUNDS:-3}"); do
      for i in "${!VARIANTS[@]}"; do
        read -ra flags <<<"${VARIANTS[$i]}"
        # shellcheck disable=SC2086  # AB_FLAGS: several flags
        "$CLI" bench --workloads "$WORKLOADS" --reps "$REPS" --no-verify ${AB_FLAGS:-} \
          "${flags[@]}" --json "$OUT/variant_${i}_$round.json" \
          >"$OUT/variant_${i}_$round.txt" 2>&1 || note "variant [$i] round $round: FAILED"
      done
    done
    SIDES=("0=defaults")
    for i in "${!VARIANTS[@]}"; do (( i > 0 )) && SIDES+=("$i=${VARIANTS[$i]}"); done
    python3 scripts/ab_summary.py "$OUT" variant "${SIDES[@]}" | tee -a "$SUMMARY"
  fi
  PEERS=(); [[ -s "$OUT/peers.json" ]] && PEERS=(--peers "$OUT/peers.json")
  "$CLI" bench --workloads "$WORKLOADS" --reps "$REPS" "${BENCH_EXTRA[@]}" "${PEERS[@]}" \
    --json "$OUT/bench.json" >"$OUT/bench.txt" 2>"$OUT/bench.log"
  status=$?
  if [[ $status -ne 0 && ! -s "$OUT/bench.txt" ]]; then  # e.g. the backward failed: forward only
    tail -5 "$OUT/bench.log"
    note "bench with backward: FAILED (exit $status); forward only:"
    "$CLI" bench --workloads "$WORKLOADS" --reps "$REPS" "${BENCH_EXTRA[@]}" "${PEERS[@]}" \
      --no-backward --json "$OUT/bench.json" >"$OUT/bench.txt" 2>>"$OUT/bench.log"
  fi
  cat "$OUT/bench.txt" >>"$SUMMARY"
fi

# ---- A/B against another tree: AB_BASELINE=DIR, alternating rounds of both CLIs ----
# scripts/ab_trees.sh builds the baseline's CLI and runs the rounds (AB_ROUNDS, AB_FLAGS); its
# lines go to the summary.
if [[ -n "${AB_BASELINE:-}" && ( "$MODE" == all || "$MODE" == bench || "$MODE" == ab ) ]]; then
  SIDES="baseline=$AB_BASELINE ours=." OUT="$OUT" BUILD_DIR="$BUILD_DIR" \
    BENCH_WORKLOADS="$WORKLOADS" BENCH_REPS="$REPS" scripts/ab_trees.sh 2>"$OUT/ab_trees.log" ||
    note "A/B against $AB_BASELINE: FAILED ($(tail -1 "$OUT/ab_trees.log"); see ab_trees.log)"
fi

# ---- ncu of one forward and one backward launch (PROFILE=1 or mode profile) ----
# Full sections with the source counters: ncu_KERNEL.txt holds the details page and, from
# scripts/ncu_stalls.py, where the warps wait (stall reasons, wgmma and mbarrier waits, the top
# instructions); ncu_KERNEL_sass.csv the per-instruction samples.
if [[ "$MODE" == profile || "${PROFILE:-0}" == 1 ]]; then
  workload="${PROFILE_WORKLOAD:-packed-16k}"
  for kernel in forward_wgmma backward_wgmma; do
    report="$OUT/ncu_$kernel"
    # shellcheck disable=SC2086  # PROFILE_FLAGS: several flags
    timeout 240 ncu --kernel-name "regex:$kernel" --launch-skip 1 --launch-count 1 --set full \
      --import-source yes -o "$report" -f "$BUILD_DIR/ringpack" bench --workloads "$workload" \
      --reps 1 --warmup 1 --no-verify ${PROFILE_FLAGS:-} >"$OUT/ncu_$kernel.log" 2>&1
    status=$?
    ncu --import "$report.ncu-rep" --page details >"$OUT/ncu_$kernel.txt" 2>&1
    ncu --import "$report.ncu-rep" --page source --csv --print-source sass \
      >"$OUT/ncu_${kernel}_sass.csv" 2>>"$OUT/ncu_$kernel.log"
    python3 scripts/ncu_stalls.py "$OUT/ncu_${kernel}_sass.csv" 25 >>"$OUT/ncu_$kernel.txt" 2>&1
    rm -f "$report.ncu-rep"  # tens of MB; the text and the CSV hold what the summary needs
    note "ncu $kernel: exit $status ($(grep -E 'Duration|Compute \(SM\) Throughput' \
      "$OUT/ncu_$kernel.txt" | tr -s ' ' | tr '\n' ';') $(grep -E '^(stall reasons|sites):' \
      "$OUT/ncu_$kernel.txt" | tr '\n' ';'))"
  done
fi

if [[ "${PACK_LOGS:-0}" == 1 ]]; then
  (cd "$OUT" && find . -maxdepth 1 -type f ! -name summary.txt ! -name bench.json ! -name logs.tgz \
    -printf '%P\n' | tar czf logs.tgz -T - --remove-files)
fi
echo "==== summary ===="
cat "$SUMMARY"
