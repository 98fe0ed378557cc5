#!/usr/bin/env bash
# Every test: installs mdtrain with its test extras, builds and runs the C++ suite (GoogleTest
# via CTest), then the Python suite (pytest, including the notebooks and the C++ example).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system_deps.sh
python3 -m pip install -q ".[test]"

build=build/tests
cmake -S . -B "$build" -G Ninja -DMDTRAIN_TESTS=ON -DMDTRAIN_WERROR=ON >/dev/null
cmake --build "$build" -j2
ctest --test-dir "$build" --output-on-failure -j2 --timeout 600

# Run from outside the source tree so the installed package is what gets imported.
cd tests/py
python3 -m pytest -q -p no:cacheprovider "$@"
