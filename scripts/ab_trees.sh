#!/usr/bin/env bash
# A/B of several source trees in one device call: builds each tree's CLI, then times them in
# alternating rounds and prints the medians and ratios (scripts/ab_summary.py); also the loop of
# `AB_BASELINE=DIR scripts/gpu_check.sh ab` (sides baseline and ours).
#
#   SIDES="main=.ab/main exp=.ab/exp cand=." scripts/ab_trees.sh
#
# SIDES: NAME=DIR pairs, the first the reference of the ratios. Each side's CLI is built with the
# cuda-hopper preset: DIR "." (this tree) in BUILD_DIR (default build-gpu, where
# scripts/gpu_check.sh builds it; built here only if BUILD_DIR has no CLI yet), any other DIR
# (e.g. `git archive REV | tar -x -C .ab/NAME`, made where the commits are: the device copy's git
# metadata may lack them) in build-ab-NAME, every time.
# env: OUT (default out), AB_ROUNDS (default 3), BENCH_WORKLOADS (default
# dense-16k,packed-16k,packed-64k), BENCH_REPS (default 30), AB_FLAGS (more `ringpack bench`
# flags for every run, e.g. "--head-dim 64"). Needs .deps/ as scripts/gpu_check.sh does.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT="${OUT:-$PWD/out}"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
WORKLOADS="${BENCH_WORKLOADS:-dense-16k,packed-16k,packed-64k}"
mkdir -p "$OUT"
[[ -n "${SIDES:-}" ]] || { echo "SIDES is empty (NAME=DIR ...)" >&2; exit 2; }
names=()
declare -A cli
for spec in $SIDES; do
  name=${spec%%=*}
  dir=${spec#*=}
  [[ $spec == *=* && -n $name && -d $dir ]] || { echo "bad side '$spec' (NAME=DIR)" >&2; exit 2; }
  names+=("$name")
  # This tree in BUILD_DIR (built there only if it has no CLI yet), any other in build-ab-NAME.
  build="$PWD/build-ab-$name"
  if [[ $dir == . ]]; then
    build="$BUILD_DIR"
    [[ $build == /* ]] || build="$PWD/$build"
  fi
  if [[ $dir != . || ! -x $build/ringpack ]] &&
    ! (cd "$dir" && cmake --preset cuda-hopper -B "$build" -G Ninja \
          -DCMAKE_PREFIX_PATH="$OLDPWD/.deps/usr" >"$OUT/configure_$name.log" 2>&1 &&
        cmake --build "$build" -j16 --target ringpack_cli >"$OUT/build_$name.log" 2>&1); then
    tail -n 20 "$OUT/configure_$name.log" "$OUT/build_$name.log" >&2 2>/dev/null
    echo "build of $name ($dir) FAILED (configure_$name.log, build_$name.log)" >&2
    exit 1
  fi
  cli[$name]="$build/ringpack"
  [[ -x ${cli[$name]} ]] || { echo "no CLI for $name at ${cli[$name]}" >&2; exit 1; }
  echo "$name: $("${cli[$name]}" --version) ($dir)" | tee -a "$OUT/summary.txt"
done
for round in $(seq 1 "${AB_ROUNDS:-3}"); do
  for name in "${names[@]}"; do
    # shellcheck disable=SC2086  # AB_FLAGS: several flags
    "${cli[$name]}" bench --workloads "$WORKLOADS" --reps "${BENCH_REPS:-30}" --no-verify \
      ${AB_FLAGS:-} --json "$OUT/trees_${name}_$round.json" >"$OUT/trees_${name}_$round.txt" 2>&1 ||
      echo "$name round $round: FAILED (see $OUT/trees_${name}_$round.txt)"
  done
done
python3 scripts/ab_summary.py "$OUT" trees "${names[@]}" | tee -a "$OUT/summary.txt"
