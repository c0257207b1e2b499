#!/usr/bin/env bash
# Builds (installing what is missing) and runs the test suite that needs no GPU: ctest -L cpu.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir "${RINGPACK_BUILD_DIR:-build}" -L cpu --output-on-failure -j "$(nproc)"
