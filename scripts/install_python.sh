#!/usr/bin/env bash
# Builds and installs the Python package (`pip install .`: CMake builds ringpack._native, with the
# CUDA kernels when nvcc is found) and prints the interpreter it went into.
#
#   scripts/install_python.sh        # into a virtual environment, build/python-venv (made with
#                                    # PYTHON, default python3), with python/requirements-test.txt
#   RINGPACK_PYTHON_ENV=current scripts/install_python.sh
#                                    # into the current interpreter as it is, for a machine
#                                    # without network that has torch, jax, nanobind and
#                                    # scikit-build-core: --no-build-isolation --no-deps
# PIP_INSTALL_ARGS adds pip arguments, e.g. "-C cmake.define.RINGPACK_CUDA_ARCHS=90a".
# Progress goes to stderr; the pip log to build/python-install.log.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
if [[ "${RINGPACK_PYTHON_ENV:-venv}" == current ]]; then
  PY="$(command -v "${PYTHON:-python3}")"
  ISOLATION=(--no-build-isolation --no-deps)
else
  VENV="${RINGPACK_VENV:-build/python-venv}"
  if [[ ! -x "$VENV/bin/python" ]]; then
    echo "install_python.sh: creating $VENV with ${PYTHON:-python3}" >&2
    "${PYTHON:-python3}" -m venv "$VENV"
  fi
  PY="$PWD/$VENV/bin/python"
  echo "install_python.sh: installing python/requirements-test.txt (torch, jax, transformers)" >&2
  "$PY" -m pip install -q --disable-pip-version-check -r python/requirements-test.txt >&2
  ISOLATION=()
fi
echo "install_python.sh: pip install . (CMake build of ringpack._native; minutes on 2 cores)" >&2
start=$(date +%s)
# shellcheck disable=SC2086
if ! "$PY" -m pip install --disable-pip-version-check "${ISOLATION[@]}" ${PIP_INSTALL_ARGS:-} \
  -v . >build/python-install.log 2>&1; then
  tail -40 build/python-install.log >&2
  echo "install_python.sh: pip install . failed (log: build/python-install.log)" >&2
  exit 1
fi
echo "install_python.sh: installed in $(( $(date +%s) - start )) s" >&2
echo "$PY"
