#!/usr/bin/env bash
# Installs the Debian packages mdtrain's tests and examples use, when missing and when we may
# (root or sudo). Everything the Python package itself needs comes from PyPI.
#   - dataset-fashion-mnist: the data set, so nothing is downloaded at run time
#   - cmake, g++, ninja-build: the C++ build (pip also gets cmake/ninja from PyPI if absent)
#   - ccache: the test command's builds share the objects they compile alike (scripts/test.sh)
#   - googletest: the C++ test suite
#   - nlohmann-json3-dev: the JSON library of plain CMake builds (pip builds take nlohmann-json
#     from PyPI instead)
#   - openmpi-bin, libopenmpi-dev, gcc: the MPI communicator (mpirun, mpi.h, libmpi; CMake's
#     FindMPI checks the C compiler too) and its tests
#   - libzmq3-dev, pkg-config: the parameter server's ZeroMQ transport (found by pkg-config)
#   - libssl-dev: libcrypto's HMAC-SHA256, which authenticates every parameter-server frame
#   - clang-16, libclang-rt-16-dev (and clang, libclang-rt-14-dev where that is the default):
#     the libFuzzer targets of scripts/fuzz.sh (clang >= 16 compiles the library; 14 does not)
set -euo pipefail
want=()
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || want+=(dataset-fashion-mnist)
command -v cmake >/dev/null || want+=(cmake)
command -v g++ >/dev/null || want+=(g++)
command -v ninja >/dev/null || want+=(ninja-build)
command -v ccache >/dev/null || want+=(ccache)
[ -f /usr/include/gtest/gtest.h ] || want+=(googletest libgtest-dev)
[ -f /usr/include/nlohmann/json.hpp ] || want+=(nlohmann-json3-dev)
command -v mpirun >/dev/null || want+=(openmpi-bin)
command -v mpicc >/dev/null || want+=(libopenmpi-dev)
command -v gcc >/dev/null || want+=(gcc)
[ -f /usr/include/zmq.h ] || want+=(libzmq3-dev)
command -v pkg-config >/dev/null || want+=(pkg-config)
[ -f /usr/include/openssl/hmac.h ] || want+=(libssl-dev)
# Fuzzing (scripts/fuzz.sh): clang with its libFuzzer and sanitizer runtimes.
command -v clang >/dev/null || want+=(clang)
[ -d /usr/lib/llvm-14/lib/clang ] && ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a \
  >/dev/null 2>&1 && want+=(libclang-rt-14-dev)
# (only where the distribution has them, e.g. Debian 12: elsewhere fuzz.sh says what it lacks)
if apt-cache show clang-16 >/dev/null 2>&1; then
  command -v clang++-16 >/dev/null || want+=(clang-16)
  ls /usr/lib/llvm-16/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || want+=(libclang-rt-16-dev)
fi
[ ${#want[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
  echo "system_deps: please install: ${want[*]}" >&2; exit 0; fi
echo "system_deps: installing ${want[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${want[@]}" >/dev/null
