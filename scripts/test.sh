#!/usr/bin/env bash
# Every test: installs mdtrain with its test extras, builds and runs the C++ suite (GoogleTest
# via CTest), then the Python suite (pytest, including the notebooks and the C++ example).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage prints when it starts, in minutes:seconds since the start: where the time goes.
stage() { printf '== test.sh %02d:%02d %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
trap 'stage "ended (exit $?)"' EXIT
stage "system packages"
bash scripts/system_deps.sh
stage "commit subjects"
bash scripts/check_commit_subjects.sh
# ccache lets the builds below share what they compile alike: the CPU test build reuses the pip
# build's library objects, and the CUDA build every .cpp object of the CPU one (its extra -isystem
# for the CUDA headers only matters to ccache through the preprocessed text, which is the same for
# files that do not include them). So pip builds with the test builds' flags (-Werror) too.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DMDTRAIN_WERROR=ON -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
fi
stage "pip install (the library build)"
python3 -m pip install -q ".[test]"
# Keras 3 (tensorflow-cpu) in its own cached venv, for the tests that check files against Keras.
stage "Keras venv"
bash scripts/keras_env.sh

# The C++ sources are formatted with the repository's .clang-format (apply: clang-format -i FILES).
if command -v clang-format >/dev/null; then
  git ls-files 'cpp/*.h' 'cpp/*.cpp' 'cpp/*.cu' 'cpp/*.cuh' 'tests/cpp/*.h' 'tests/cpp/*.cpp' 'tests/fuzz/*.cpp' \
    'tests/fuzz/*.h' 'bench/*.cpp' 'examples/*.cpp' | xargs clang-format --dry-run --Werror
fi

# The CPU-only build (what `pip install` gives): CUDA off even where nvcc exists.
stage "CPU test build"
build=build/tests
cmake -S . -B "$build" -G Ninja -DMDTRAIN_TESTS=ON -DMDTRAIN_WERROR=ON -DMDTRAIN_CUDA=OFF "${launcher[@]}" >/dev/null
cmake --build "$build" -j2
stage "CPU tests"
ctest --test-dir "$build" --output-on-failure -j2 --timeout 600
# The GPU tests that go through the ops API, run with host tensors in place of GPU ones: a check of
# the tests themselves (inputs, tolerances, bookkeeping) where there is no GPU, not of CUDA.
MDTRAIN_GPU_TESTS_ON_CPU=1 "$build/tests/cpp/test_gpu" --gtest_brief=1

# The CUDA build: every kernel, cuBLAS and NCCL compile and link, the whole suite runs against it,
# and the GPU tests (label gpu) skip with the reason on a machine without a GPU (their lines are
# printed). One architecture here keeps nvcc's time small; the default is 80;90.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  stage "CUDA build"
  cuda=build/cuda
  cmake -S . -B "$cuda" -G Ninja -DMDTRAIN_TESTS=ON -DMDTRAIN_WERROR=ON -DMDTRAIN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=80 "${launcher[@]}" >/dev/null
  cmake --build "$cuda" -j2
  stage "CUDA-build tests"
  ctest --test-dir "$cuda" --output-on-failure -j2 --timeout 600 -LE gpu
  gpu_rc=0
  ctest --test-dir "$cuda" --timeout 600 -L gpu -V >"$cuda/gpu_tests.log" 2>&1 || gpu_rc=$?
  grep -E "tests passed|tests failed|\(Skipped\)" "$cuda/gpu_tests.log" || true
  grep -hoE "(no CUDA device|mdtrain was built without)[: ].*" "$cuda/gpu_tests.log" | sort | uniq -c || true
  if [ "$gpu_rc" -ne 0 ]; then cat "$cuda/gpu_tests.log"; exit "$gpu_rc"; fi
else
  echo "CUDA build skipped: nvcc not found (install the CUDA toolkit to build the GPU backend)"
fi

# The threads communicator and the replica pool under ThreadSanitizer (the communicator suite and
# the mirrored-training tests of the C++ API).
stage "TSan build"
tsan=build/tsan
cmake -S . -B "$tsan" -G Ninja -DMDTRAIN_TESTS=ON -DMDTRAIN_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMDTRAIN_CUDA=OFF "${launcher[@]}" >/dev/null
cmake --build "$tsan" -j2 --target test_distribute test_model
stage "TSan tests"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir "$tsan" -L "distribute|model" --output-on-failure -j2 --timeout 900

# The C++ suite under AddressSanitizer + UndefinedBehaviorSanitizer (issue #19): out-of-bounds
# and use-after-free accesses, leaks and undefined behaviour stop the run at the first report.
# (The MPI tests are left out: Open MPI's own allocations are reported as leaks.) -O1: with both
# sanitizers the compilers take 4x a plain build's CPU time at -O1 but 7-11x at -O2, for the same
# checks. Built with the fuzzers' clang where there is one: the same sanitized library then also
# links the libFuzzer targets (-DMDTRAIN_FUZZ=ON adds coverage counters), one build instead of two.
stage "ASan build"
asan=build/asan
fuzz_cxx=$(bash scripts/fuzz_clang.sh)
asan_compiler=()
[ -n "$fuzz_cxx" ] && asan_compiler=(-DCMAKE_CXX_COMPILER="$fuzz_cxx" -DCMAKE_C_COMPILER="${fuzz_cxx/clang++/clang}" -DMDTRAIN_FUZZ=ON)
cmake -S . -B "$asan" -G Ninja -DMDTRAIN_TESTS=ON -DMDTRAIN_SANITIZE=address,undefined "${asan_compiler[@]}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" -DMDTRAIN_CUDA=OFF "${launcher[@]}" >/dev/null
cmake --build "$asan" -j2
stage "ASan tests"
ASAN_OPTIONS="halt_on_error=1:detect_leaks=1" UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
  ctest --test-dir "$asan" -LE "gpu|mpi" --output-on-failure -j2 --timeout 900

# The fuzzers (libFuzzer and atheris, scripts/fuzz.sh) for 30 s each from the committed seeds:
# a reader that crashes, hangs or over-allocates on a known or nearby input fails the run.
stage "fuzzers"
if [ -n "$fuzz_cxx" ]; then MDTRAIN_FUZZ_BUILD=$asan bash scripts/fuzz.sh 30; else bash scripts/fuzz.sh 30; fi

# Run from outside the source tree so the installed package is what gets imported.
stage "pytest"
cd tests/py
python3 -m pytest -q -p no:cacheprovider --durations=25 "$@"
