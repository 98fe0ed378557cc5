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

# The threads communicator and the replica pool under ThreadSanitizer (the communicator suite and
# the mirrored-training tests of the C++ API).
tsan=build/tsan
cmake -S . -B "$tsan" -G Ninja -DMDTRAIN_TESTS=ON -DMDTRAIN_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$tsan" -j2 --target test_distribute test_model
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir "$tsan" -L "distribute|model" --output-on-failure -j2 --timeout 900

# Run from outside the source tree so the installed package is what gets imported.
cd tests/py
python3 -m pytest -q -p no:cacheprovider "$@"
