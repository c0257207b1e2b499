#!/usr/bin/env bash
# `ringpack run --comm mpi` under mpirun, end to end (CTest runs one group per test, label cpu).
#
# Usage: tests/mpi/run_cli_cases.sh MPIRUN RINGPACK GROUP
#        tests/mpi/run_cli_cases.sh MPIRUN RINGPACK_MPI_TESTS abort
#   cp2, cp3, cp4  adversarial layouts (1-token documents, documents shorter than cp, a document
#                  longer than a shard, interior and tail padding, an all-padding row next to a
#                  normal one, S not a power of two; batch 2) x ring|all_gather x every reorder,
#                  fp32 and bf16, forward and backward, against the fp64 reference: every rank
#                  exits 0 and only rank 0 prints the report, which says PASS; --trace writes
#                  one trace with every rank
#   bad_input      a world size that does not match --cp, a reorder the row does not divide
#                  into, ranks with different batches: every rank stops with status 2
#   abort          Communicator::abort() of the mpi communicator on one of 3 ranks (the binary is
#                  ringpack_mpi_tests here): every rank stops with status 2, the error printed
#   kill           one of 3 ranks is killed (SIGKILL) in the step loop: mpirun exits non-zero,
#                  in time
#   hang           one of 3 ranks stops (SIGSTOP) in the step loop, or never starts: the others
#                  give up after --comm-timeout 3 and the job exits non-zero, in time
# Each case prints one line with its time; a failed case prints its command and output, and the
# script exits 1 after all cases of the group ran.
set -uo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 MPIRUN RINGPACK GROUP (cp2|cp3|cp4|bad_input|abort|kill|hang)" >&2
  exit 2
fi
mpirun_bin=$1
ringpack_bin=$2
group=$3
mpirun=("$mpirun_bin" --allow-run-as-root --oversubscribe)
# Small problems: the cost of a case is mostly process start-up.
small=(--heads-q 2 --heads-kv 1 --head-dim 16 --threads 1 --quiet)

work=$(mktemp -d "${TMPDIR:-/tmp}/ringpack_mpi_cli.XXXXXX")
cleanup() {
  # Ranks a fault case stopped or left behind (their pids are in $work/*.pid) must not outlive
  # the test.
  for f in "$work"/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    kill -CONT "$pid" 2>/dev/null
    kill -KILL "$pid" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT

failures=0
cases=0
out="$work/out"
err="$work/err"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

fail_case() {  # name, reason, command...
  local name=$1 reason=$2
  shift 2
  failures=$((failures + 1))
  echo "[FAIL] $name: $reason"
  echo "       command: $*"
  echo "       --- stdout (last 25 lines)"
  tail -n 25 "$out" | sed 's/^/       /'
  echo "       --- stderr (last 25 lines)"
  tail -n 25 "$err" | sed 's/^/       /'
}

# A run that must pass: status 0, one report (rank 0 only) that says PASS and names cp.
expect_pass() {  # name, ranks, ringpack run arguments...
  local name=$1 ranks=$2
  shift 2
  local command=("${mpirun[@]}" -np "$ranks" "$ringpack_bin" run --comm mpi --cp "$ranks" "$@")
  local start
  start=$(now)
  cases=$((cases + 1))
  timeout -k 5 120 "${command[@]}" >"$out" 2>"$err"
  local status=$?
  local seconds
  seconds=$(elapsed "$start")
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    fail_case "$name" "still running after 120 s (hang)" "${command[@]}"
  elif [ "$status" -ne 0 ]; then
    fail_case "$name" "exit status $status, expected 0" "${command[@]}"
  elif [ "$(grep -c '^PASS$' "$out")" -ne 1 ]; then
    fail_case "$name" "expected one report with PASS (rank 0 only)" "${command[@]}"
  elif [ "$(grep -c '^ringpack run: ' "$out")" -ne 1 ] ||
    ! grep -q "^ringpack run: cp $ranks," "$out"; then
    fail_case "$name" "expected one report header 'ringpack run: cp $ranks, ...'" "${command[@]}"
  else
    echo "[ ok ] $name (${seconds} s)"
  fi
}

# A passing run with --trace: rank 0 writes one trace (JSON) with a process for every rank.
expect_trace() {  # name, ranks
  local name=$1 ranks=$2
  local trace="$work/trace.json"
  rm -f "$trace"
  local failures_before=$failures
  expect_pass "$name" "$ranks" --layout "$work/mixed.json" --backward --trace "$trace" "${small[@]}"
  [ "$failures" -eq "$failures_before" ] || return
  local reason=""
  if [ ! -s "$trace" ]; then
    reason="no trace written"
  elif command -v python3 >/dev/null && ! python3 -m json.tool "$trace" >/dev/null 2>&1; then
    reason="the trace is not valid JSON"
  else
    for ((r = 0; r < ranks; ++r)); do
      grep -q "\"rank $r\"" "$trace" || reason="the trace has no process \"rank $r\""
    done
  fi
  [ -z "$reason" ] || fail_case "$name" "$reason" "(the command above)"
}

# A run that every rank must refuse with status 2 and an error line.
expect_bad_input() {  # name, ranks, pattern the error must match, command after mpirun -np N...
  local name=$1 ranks=$2 pattern=$3
  shift 3
  local command=("${mpirun[@]}" -np "$ranks" "$@")
  local start
  start=$(now)
  cases=$((cases + 1))
  timeout -k 5 60 "${command[@]}" >"$out" 2>"$err"
  local status=$?
  local seconds
  seconds=$(elapsed "$start")
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    fail_case "$name" "still running after 60 s (hang)" "${command[@]}"
  elif [ "$status" -ne 2 ]; then
    fail_case "$name" "exit status $status, expected 2" "${command[@]}"
  elif ! grep -Eq "^ringpack: error: .*$pattern" "$err"; then
    fail_case "$name" "no error line matching '$pattern'" "${command[@]}"
  elif grep -q '^PASS$' "$out"; then
    fail_case "$name" "printed PASS" "${command[@]}"
  else
    echo "[ ok ] $name (${seconds} s)"
  fi
}

# ---- layouts (segment ids; 0 = padding) ----------------------------------------------------------
# S = 24, 36 and 72 divide by cp 2, 3, 4 and are not powers of two; 24 and 72 also by 2 cp
# (dual_chunk_swap).
write_layouts() {
  # Row 0: 1-token documents, documents shorter than cp, interior and tail padding.
  # Row 1: a document longer than a shard at every cp (20 of 24 tokens), then a short one.
  cat >"$work/mixed.json" <<'EOF'
{"segment_ids": [[1, 2, 3, 3, 0, 4, 4, 4, 5, 6, 6, 0, 0, 7, 8, 8, 8, 8, 9, 10, 11, 11, 0, 0],
                 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 0, 0]]}
EOF
  # Row 0 is all padding; row 1 starts with padding and has interior padding.
  cat >"$work/padding.json" <<'EOF'
{"segment_ids": [[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                 [0, 0, 1, 1, 1, 1, 1, 2, 0, 0, 0, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 4]]}
EOF
  # One row: a document of 50 tokens (longer than two shards at cp 4), documents of 3, 1 and 10
  # tokens, tail padding.
  local row
  row="$(repeat 1 50), 2, 2, 2, 3, $(repeat 4 10), $(repeat 0 8)"
  echo "{\"segment_ids\": [[$row]]}" >"$work/long.json"
}

repeat() {  # value, count: "value, value, ..."
  local values=() k
  for ((k = 0; k < $2; ++k)); do values+=("$1"); done
  local IFS=,
  echo "${values[*]}"
}

layout_cases() {  # cp
  local cp=$1
  local strategies=(ring all_gather)
  local reorders=(contiguous dual_chunk_swap striped auto)
  local layouts=(mixed padding long)
  for l in "${!layouts[@]}"; do
    for s in "${!strategies[@]}"; do
      for r in "${!reorders[@]}"; do
        # fp32 and bf16 alternate, so that each meets every strategy, reorder and layout.
        local dtype=fp32
        [ $(((l + s + r) % 2)) -eq 1 ] && dtype=bf16
        local name="cp $cp ${layouts[l]} ${strategies[s]} ${reorders[r]} $dtype"
        expect_pass "$name" "$cp" --layout "$work/${layouts[l]}.json" --strategy "${strategies[s]}" \
          --reorder "${reorders[r]}" --dtype "$dtype" --verify --backward "${small[@]}"
      done
    done
  done
  # One row given inline, S = 36, with the realistic packer's neighbour: --segment-ids.
  local ids="1,1,1,2,0,3,3,3,3,3,3,3,3,3,3,3,3,3,3,4,5,5,6,6,6,6,6,6,6,6,7,0,0,0,8,0"
  expect_pass "cp $cp inline segment ids, causal window 5" "$cp" --segment-ids "$ids" \
    --strategy ring --reorder striped --dtype bf16 --window 5 --verify --backward "${small[@]}"
  expect_trace "cp $cp --trace" "$cp"
  expect_pass "cp $cp packed batch 2, non-causal" "$cp" --seq-len $((cp * 30)) --batch 2 --packing \
    --lengths uniform --uniform-min 1 --uniform-max 17 --non-causal --strategy all_gather \
    --dtype fp32 --verify --backward "${small[@]}"
}

bad_input_cases() {
  expect_bad_input "world size 2 with --cp 3" 2 "--cp" \
    "$ringpack_bin" run --comm mpi --cp 3 --seq-len 24 "${small[@]}"
  expect_bad_input "dual_chunk_swap at cp 4 on S = 36" 4 "36" \
    "$ringpack_bin" run --comm mpi --cp 4 --seq-len 36 --reorder dual_chunk_swap "${small[@]}"
  # Every rank draws its own batch (a different seed): the ranks must notice, not compute garbage.
  # shellcheck disable=SC2016 # expanded by the rank's shell
  expect_bad_input "ranks with different batches" 2 "different batch" sh -c \
    'exec "$0" run --comm mpi --cp 2 --seq-len 48 --packing --lengths uniform --uniform-max 20 \
       --seed "$OMPI_COMM_WORLD_RANK" "$@"' "$ringpack_bin" "${small[@]}"
}

# Rank 1 of 3 fails in the way `fault` says, and the job must end non-zero within `limit` seconds:
#   KILL, STOP  rank 1 sends itself the signal 1 s after it printed "running" (the step loop has
#               begun; the run lasts about 15 s more on 2 cores when nothing stops it)
#   absent      rank 1 never starts ringpack (it sleeps), so the others wait for it in MPI_Init
# Rank 1's progress lines go to $work/rank1.err, the others' to the job's stderr.
fault_case() {  # name, fault, limit, extra ringpack arguments...
  local name=$1 fault=$2 limit=$3
  shift 3
  rm -f "$work/signalled" "$work/rank1.err"
  # shellcheck disable=SC2016 # expanded by the rank's shell
  local wrapper='
      echo $$ >"$0/rank$OMPI_COMM_WORLD_RANK.pid"
      fault=$1
      shift
      [ "$OMPI_COMM_WORLD_RANK" = 1 ] || exec "$@"
      [ "$fault" = absent ] && { touch "$0/signalled"; exec sleep 600; }
      (
        tries=0
        until grep -q "running " "$0/rank1.err" 2>/dev/null; do
          tries=$((tries + 1))
          { [ "$tries" -gt 1200 ] || ! kill -0 $$; } && exit 0
          sleep 0.1
        done
        sleep 1
        kill -0 $$ || exit 0
        touch "$0/signalled"
        kill -"$fault" $$
      ) </dev/null >/dev/null 2>&1 &
      exec "$@" 2>"$0/rank1.err"'
  local command=("${mpirun[@]}" -np 3 sh -c "$wrapper" "$work" "$fault"
    "$ringpack_bin" run --comm mpi --cp 3 --backend cpu --backward --no-verify "$@")
  local start
  start=$(now)
  cases=$((cases + 1))
  timeout -k 5 "$limit" "${command[@]}" >"$out" 2>"$err"
  local status=$?
  local seconds
  seconds=$(elapsed "$start")
  if [ "$status" -eq 124 ] || { [ "$status" -eq 137 ] && [ "${seconds%.*}" -ge "$limit" ]; }; then
    fail_case "$name" "the job was still running after $limit s" "${command[@]}"
  elif [ "$status" -eq 0 ]; then
    fail_case "$name" "exit status 0, expected non-zero" "${command[@]}"
  elif [ ! -e "$work/signalled" ]; then
    fail_case "$name" "the run ended (status $status) before rank 1 failed: make it longer" \
      "${command[@]}"
  elif grep -q '^PASS$' "$out"; then
    fail_case "$name" "printed PASS" "${command[@]}"
  else
    echo "[ ok ] $name: exit status $status (${seconds} s)"
    return 0
  fi
  return 1
}

# A run whose step loop lasts about 15 s on 2 cores (forward and backward, no verification).
# Without --quiet: rank 1's "running" line starts the fault.
long_run=(--seq-len 24576 --heads-q 4 --heads-kv 2 --head-dim 64 --dtype fp32 --threads 1)

# abort() of the MPI communicator (tests/mpi/test_mpi_communicator.cpp runs it; here $2 is the
# ringpack_mpi_tests executable): rank 1 aborts while the others wait in a barrier.
abort_cases() {
  expect_bad_input "abort() on rank 1 of 3 stops every rank with status 2" 3 \
    "rank 1: deliberate failure of the abort test" "$ringpack_bin" \
    --gtest_also_run_disabled_tests --gtest_filter=MpiComm.DISABLED_AbortStopsEveryRank
}

kill_cases() {
  fault_case "rank 1 of 3 killed (SIGKILL) in the step loop" KILL 60 "${long_run[@]}"
}

# Fails the case `name` unless the job's stderr has an error line matching `pattern`.
expect_error_line() {  # name, pattern
  if ! grep -Eq "^ringpack: error: .*$2" "$err"; then
    fail_case "$1" "no error line matching '$2'" "(the command above)"
  fi
}

hang_cases() {
  # The others notice when they wait for rank 1 (after at most one step of compute), give up
  # after 3 s and abort the job; one line names the timeout.
  local name="rank 1 of 3 stopped (SIGSTOP) in the step loop, --comm-timeout 3"
  fault_case "$name" STOP 60 "${long_run[@]}" --comm-timeout 3 &&
    expect_error_line "$name" "did not complete within 3 s \(--comm-timeout\)"
  # MPI_Init waits for every rank and has no deadline of its own: the communicator's watchdog.
  name="rank 1 of 3 never joins MPI, --comm-timeout 3"
  fault_case "$name" absent 60 --seq-len 24 "${small[@]}" --comm-timeout 3 &&
    expect_error_line "$name" "MPI_Init_thread did not complete within 3 s \(--comm-timeout\)"
}

case "$group" in
  cp2 | cp3 | cp4)
    write_layouts
    layout_cases "${group#cp}"
    ;;
  bad_input) bad_input_cases ;;
  abort) abort_cases ;;
  kill) kill_cases ;;
  hang) hang_cases ;;
  *)
    echo "unknown group '$group': use cp2, cp3, cp4, bad_input, abort, kill or hang" >&2
    exit 2
    ;;
esac

echo "$((cases - failures)) of $cases cases passed ($group)"
[ "$failures" -eq 0 ]
