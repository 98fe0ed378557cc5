#!/usr/bin/env bash
# Builds mdtrain's fuzz targets (clang libFuzzer, ASan+UBSan: -DMDTRAIN_FUZZ=ON) and runs each
# for a bounded time, starting from the committed seeds in tests/fuzz/corpus/<target>/.
#   scripts/fuzz.sh [seconds-per-target] [target...]       default: 60 s each, every target
#   targets: model_file (load_model_file, i.e. model files and BackupAndRestore backups),
#            model_load (Model::load: the reader plus layer/compile configs),
#            ps_frame (a parameter server's authenticated frames: FrameAuthenticator::open, then
#            parse_ps_message), idx (the IDX reader,
#            Python, via atheris; skipped with a message when atheris is not importable),
#            keras_file (load_model on .keras archives) and weights_h5 (load_weights on .weights.h5,
#            the HDF5 reader .keras and tf.train.Checkpoint share): Python via atheris, needing
#            mdtrain's extension built (skipped with a message when `import mdtrain` fails)
# Inputs that grew coverage are kept in build/fuzz/corpus/<target>/ (reused by the next run; the
# committed seeds are only read). Findings (crash-*, leak-*, timeout-*, oom-*) go to
# build/fuzz/findings/<target>/ and make the script exit 1; reproduce one with
#   build/fuzz/tests/fuzz/<target>_fuzzer <file>     (or python tests/fuzz/<target>_fuzzer.py <file>)
# then fix the cause and commit the input to tests/fuzz/corpus/<target>/ as a regression seed.
# Environment: MDTRAIN_FUZZ_CXX (default: the newest clang++-NN >= 16 found, else clang++),
# MDTRAIN_FUZZ_PYTHON (the Python with atheris and NumPy, default python3),
# MDTRAIN_FUZZ_JOBS (parallel build jobs, default 2), MDTRAIN_FUZZ_BUILD (a build directory already
# configured with clang and -DMDTRAIN_FUZZ=ON, e.g. the test command's ASan build, whose library
# then serves both: the targets are built there instead of in build/fuzz). See docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(model_file model_load ps_frame idx keras_file weights_h5)
work=build/fuzz   # corpora and findings
build=${MDTRAIN_FUZZ_BUILD:-$work}
python=${MDTRAIN_FUZZ_PYTHON:-python3}

needs_cxx=0
for t in "${targets[@]}"; do
  case "$t" in
    model_file|model_load|ps_frame) needs_cxx=1 ;;
    idx|keras_file|weights_h5) ;;
    *) echo "fuzz.sh: unknown target '$t' (model_file, model_load, ps_frame, idx, keras_file, weights_h5)" >&2; exit 2 ;;
  esac
done
cxx_targets_skipped=""
if [ "$needs_cxx" = 1 ]; then
  cxx=${MDTRAIN_FUZZ_CXX:-$(bash scripts/fuzz_clang.sh)}
  if [ -n "${MDTRAIN_FUZZ_BUILD:-}" ]; then
    grep -q "^MDTRAIN_FUZZ:BOOL=ON" "$build/CMakeCache.txt" 2>/dev/null || {
      echo "fuzz.sh: MDTRAIN_FUZZ_BUILD=$build is not a build configured with -DMDTRAIN_FUZZ=ON" >&2; exit 2; }
    cmake --build "$build" -j"${MDTRAIN_FUZZ_JOBS:-2}" --target model_file_fuzzer model_load_fuzzer ps_frame_fuzzer
  elif [ -z "$cxx" ]; then
    cxx_targets_skipped="no clang++ >= 16 found (apt-get install clang-16 libclang-rt-16-dev, or set MDTRAIN_FUZZ_CXX)"
  else
    cc=${cxx/clang++/clang}
    cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DMDTRAIN_FUZZ=ON \
      -DMDTRAIN_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER} >/dev/null
    cmake --build "$build" -j"${MDTRAIN_FUZZ_JOBS:-2}" --target model_file_fuzzer model_load_fuzzer ps_frame_fuzzer
  fi
fi

# Scratch files on tmpfs when there is one: the targets write a file per input (and the
# round-trip check fsyncs one).
if [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
# Inputs are at most 64 KiB: no read may allocate anywhere near 256 MiB in one block.
flags=(-max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -malloc_limit_mb=256 -max_len=65536
       -print_final_stats=1)
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

failed=()
for t in "${targets[@]}"; do
  corpus="$work/corpus/$t"
  findings="$work/findings/$t"
  mkdir -p "$corpus" "$findings"
  if [ "$t" = idx ]; then
    if ! "$python" -c "import atheris, numpy" 2>/dev/null; then
      echo "fuzz.sh: idx skipped: atheris is not importable by $python (pip install atheris)"
      continue
    fi
    cmd=("$python" tests/fuzz/idx_fuzzer.py)
  elif [ "$t" = keras_file ] || [ "$t" = weights_h5 ]; then
    # The installed mdtrain (the test command installs it first); the source tree has no extension.
    if ! "$python" -c "import atheris, h5py, mdtrain" 2>/dev/null; then
      echo "fuzz.sh: $t skipped: atheris, h5py or mdtrain (installed, with its extension) is not importable by $python"
      continue
    fi
    cmd=("$python" "tests/fuzz/${t}_fuzzer.py")
  else
    if [ -n "$cxx_targets_skipped" ]; then echo "fuzz.sh: $t skipped: $cxx_targets_skipped"; continue; fi
    cmd=("$build/tests/fuzz/${t}_fuzzer")
  fi
  echo "fuzz.sh: $t for ${seconds}s"
  start=$(date +%s)
  rc=0
  "${cmd[@]}" "${flags[@]}" -artifact_prefix="$findings/" "$corpus" "tests/fuzz/corpus/$t" \
    >"$findings/log.txt" 2>&1 || rc=$?
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|Done)" "$findings/log.txt" || true
  echo "fuzz.sh: $t ran $(( $(date +%s) - start ))s, corpus $(ls "$corpus" | wc -l) inputs, exit $rc"
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$findings/log.txt"
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: findings in: ${failed[*]} (see $work/findings/)" >&2
  exit 1
fi
