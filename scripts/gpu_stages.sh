#!/usr/bin/env bash
# Several jobs in one device call, each under its own time limit, its logs packed into
# $OUT/NAME.tgz as soon as it ends, so that a call cut short (the call's limit, a machine taken
# back) still returns what finished; a summary line per stage, then its summary.txt, goes to
# stdout.
#
#   scripts/gpu_stages.sh "NAME LIMIT_S COMMAND..." ["NAME LIMIT_S COMMAND..." ...]
#   e.g. scripts/gpu_stages.sh "tests 330 scripts/gpu_check.sh tests" \
#          "ab64 300 env SIDES='main=.ab/main ours=.' AB_FLAGS='--head-dim 64' scripts/ab_trees.sh"
#
# Each stage runs `bash -c COMMAND` with OUT set to a directory of its own (the scripts here
# write their logs and summary.txt there) and the NCCL settings of one-GPU ranks
# (NCCL_NVLS_ENABLE=0, NCCL_SOCKET_IFNAME=lo, NCCL_IB_DISABLE=1). A stage that runs past
# LIMIT_S is stopped (exit 124) and the next one starts. env: OUT (default ./out), STAGE_DIR
# (where the stages' directories are made, default a temporary directory). Exits 1 if a stage
# failed, 2 on a malformed stage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
STAGE_DIR="${STAGE_DIR:-$(mktemp -d)}"
export NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
[[ $# -gt 0 ]] || { echo "no stages (\"NAME LIMIT_S COMMAND...\")" >&2; exit 2; }
declare -A seen
for spec in "$@"; do  # check them all before running any
  read -r name limit cmd <<<"$spec"
  [[ $name =~ ^[A-Za-z0-9_.-]+$ && $limit =~ ^[0-9]+$ && -n ${cmd:-} && -z ${seen[$name]:-} ]] ||
    { echo "bad stage '$spec' (NAME LIMIT_S COMMAND..., names unique)" >&2; exit 2; }
  seen[$name]=1
done
failed=0
for spec in "$@"; do
  read -r name limit cmd <<<"$spec"
  dir="$STAGE_DIR/$name"
  mkdir -p "$dir"
  start=$(date +%s)
  OUT="$dir" timeout "$limit" bash -c "$cmd" >"$dir/stdout.txt" 2>&1
  status=$?
  [[ $status -eq 0 ]] || failed=1
  note="exit $status"
  [[ $status -eq 124 ]] && note="stopped at its limit of $limit s (exit 124)"
  echo "== stage $name: $note in $(( $(date +%s) - start )) s"
  if [[ -s $dir/summary.txt ]]; then cat "$dir/summary.txt"; else tail -n 30 "$dir/stdout.txt"; fi
  tar czf "$OUT/$name.tgz" -C "$STAGE_DIR" "$name"
done
exit "$failed"
