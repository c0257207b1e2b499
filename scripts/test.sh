#!/usr/bin/env bash
# Builds (installing what is missing, scripts/setup.sh) and runs the tests that need no GPU:
# the test preset of the same name as the build's preset (RINGPACK_PRESET, default "default"),
# which runs ctest -L cpu in that preset's build folder; then the Python package's tests
# (scripts/test_python.sh: pip install . into build/python-venv, pytest tests/python).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --preset "${RINGPACK_PRESET:-default}" -j "$(nproc)"
scripts/test_python.sh
