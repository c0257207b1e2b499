#!/usr/bin/env bash
# Fuzzing (docs/design.md §7): builds the fuzz preset (clang with libFuzzer, ASan + UBSan; CPU
# only) into build/fuzz through scripts/setup.sh, which installs clang when it is missing, then
# per harness of fuzz/ (layout, config, lengths, cli):
#   1. replays the saved reproducers in fuzz/regressions/<harness>/, if any;
#   2. fuzzes for SECONDS (default 60) on a copy of the seed corpus fuzz/corpus/<harness>, so the
#      repository's corpus does not grow (new inputs stay in the scratch folder).
# Exits 1 when a harness crashes, leaks, times out or runs out of memory, and prints the path of
# the input that did it. A longer run: scripts/fuzz.sh 3600.
# Usage: scripts/fuzz.sh [SECONDS]
#   RINGPACK_FUZZ_HARNESSES  the harnesses to run (default "layout config lengths cli")
#   RINGPACK_FUZZ_DIR        scratch folder for corpus copies, logs and findings (default: a new
#                            folder under ${TMPDIR:-/tmp}, kept afterwards)
#   RINGPACK_FUZZ_ARGS       more libFuzzer flags, e.g. "-max_len=65536" (inputs over 64 KiB are
#                            skipped by the harnesses; libFuzzer's default max_len is 4096)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh [seconds-per-harness] (a positive integer; default 60)" >&2
  exit 2
fi
harnesses="${RINGPACK_FUZZ_HARNESSES:-layout config lengths cli}"

RINGPACK_PRESET=fuzz scripts/setup.sh >"${TMPDIR:-/tmp}/ringpack-fuzz-setup.log" 2>&1 || {
  tail -n 40 "${TMPDIR:-/tmp}/ringpack-fuzz-setup.log"
  echo "[fuzz] building the fuzz preset failed (log: ${TMPDIR:-/tmp}/ringpack-fuzz-setup.log)"
  exit 1
}

work="${RINGPACK_FUZZ_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/ringpack-fuzz-run.XXXXXX")}"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# shellcheck disable=SC2206
extra_args=(${RINGPACK_FUZZ_ARGS:-})
echo "[fuzz] ${seconds}s per harness; corpus copies, logs and findings in $work"

failed=()
for h in $harnesses; do
  bin="$PWD/build/fuzz/fuzz/fuzz_$h"
  [ -x "$bin" ] || { echo "[fuzz] no harness $bin"; exit 2; }
  dir="$work/$h"
  mkdir -p "$dir/corpus" "$dir/findings"
  cp fuzz/corpus/"$h"/* "$dir/corpus/"
  dict=()
  [ -f "fuzz/$h.dict" ] && dict=(-dict="$PWD/fuzz/$h.dict")  # absolute: fuzz_cli changes folder

  if compgen -G "fuzz/regressions/$h/*" >/dev/null; then
    if ! "$bin" "$PWD"/fuzz/regressions/"$h"/* >"$dir/regressions.log" 2>&1; then
      input="$(grep -o "Running: .*" "$dir/regressions.log" | tail -n 1 | cut -d' ' -f2-)"
      grep -E "^(==[0-9]+==ERROR|SUMMARY|.*runtime error)" "$dir/regressions.log" | head -n 3
      echo "[fuzz] $h: FAILED on the saved reproducer $input (log: $dir/regressions.log)"
      failed+=("$h:$input")
    else
      echo "[fuzz] $h: the saved reproducers in fuzz/regressions/$h pass"
    fi
  fi

  status=0
  nice "$bin" "${dict[@]}" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$dir/findings/" "${extra_args[@]}" "$dir/corpus" \
    >"$dir/fuzz.log" 2>&1 || status=$?
  runs="$(grep -o "stat::number_of_executed_units: [0-9]*" "$dir/fuzz.log" | grep -o "[0-9]*$" || true)"
  last="$(grep -E "^#[0-9]+" "$dir/fuzz.log" | tail -n 1 || true)"
  echo "[fuzz] $h: ${runs:-?} runs; last status line: ${last:-none}"
  if [ "$status" -ne 0 ]; then
    grep -E "^(==[0-9]+==ERROR|SUMMARY|.*runtime error)" "$dir/fuzz.log" | head -n 3 || true
    found="$(find "$dir/findings" -type f | head -n 1)"
    echo "[fuzz] $h: FAILED (exit $status); input: ${found:-none saved} (log: $dir/fuzz.log)"
    failed+=("$h:${found:-?}")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "[fuzz] FAILED: ${failed[*]}"
  exit 1
fi
echo "[fuzz] passed: $harnesses (${seconds}s each)"
