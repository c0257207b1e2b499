#!/usr/bin/env bash
# Installs the Python package (scripts/install_python.sh, same environment variables) and runs
# its tests, pytest tests/python, from the tests' folder so that `import ringpack` is the
# installed package. Extra arguments go to pytest (e.g. -k torch).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="$(scripts/install_python.sh)"
cd tests/python
"$PY" -m pytest -q "$@"
