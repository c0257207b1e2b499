#!/usr/bin/env bash
# The sanitizer job (docs/design.md §7), CPU only, MPI off:
#   1. the sanitize preset (AddressSanitizer + UBSan) into build/sanitize: every cpu test;
#   2. the tsan preset (ThreadSanitizer) into build/tsan: the communicator and schedule tests
#      (the tsan test preset's filter: InProcessComm, StagingCommunicator, CpSchedules, RunJob).
# Each builds through scripts/setup.sh (installing what is missing). Exits non-zero on the first
# build or test failure; a sanitizer report fails its test (halt_on_error in CMakePresets.json).
# Usage: scripts/sanitize.sh [asan|tsan]   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."

jobs="${1:-asan tsan}"
for job in $jobs; do
  case "$job" in
    asan) preset=sanitize ;;
    tsan) preset=tsan ;;
    *) echo "usage: scripts/sanitize.sh [asan|tsan]" >&2; exit 2 ;;
  esac
  start=$SECONDS
  echo "[sanitize] $job: building preset $preset into build/$preset"
  log="${TMPDIR:-/tmp}/ringpack-$preset-setup.log"
  RINGPACK_PRESET="$preset" scripts/setup.sh >"$log" 2>&1 || {
    tail -n 40 "$log"
    echo "[sanitize] $job: building preset $preset failed (log: $log)"
    exit 1
  }
  echo "[sanitize] $job: built in $((SECONDS - start))s; running ctest --preset $preset"
  ctest --preset "$preset" -j "$(nproc)"
  echo "[sanitize] $job: passed in $((SECONDS - start))s"
done
