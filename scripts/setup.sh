#!/usr/bin/env bash
# Installs what is missing (Debian packages), configures and builds ringpack into build/.
# Usage: scripts/setup.sh            (RINGPACK_BUILD_DIR, RINGPACK_CMAKE_ARGS may be set)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ make pkg-config libcli11-dev nlohmann-json3-dev libyaml-cpp-dev libgtest-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build_dir="${RINGPACK_BUILD_DIR:-build}"
extra_args=()
[ "${CI:-}" = "true" ] && extra_args+=(-DRINGPACK_WERROR=ON)
# shellcheck disable=SC2206
[ -n "${RINGPACK_CMAKE_ARGS:-}" ] && extra_args+=(${RINGPACK_CMAKE_ARGS})
echo "[setup] configuring $build_dir"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "${extra_args[@]}" >/dev/null
echo "[setup] building with $(nproc) jobs (CUDA kernels compile too when nvcc is found)"
cmake --build "$build_dir" -j "$(nproc)"
echo "[setup] done: $build_dir/ringpack"
