#!/usr/bin/env bash
# Installs the Debian packages mdtrain's tests and examples use, when missing and when we may
# (root or sudo). Everything the Python package itself needs comes from PyPI.
#   - dataset-fashion-mnist: the data set, so nothing is downloaded at run time
#   - cmake, g++, ninja-build: the C++ build (pip also gets cmake/ninja from PyPI if absent)
#   - googletest: the C++ test suite
#   - nlohmann-json3-dev: the JSON library of plain CMake builds (pip builds take nlohmann-json
#     from PyPI instead)
#   - openmpi-bin, libopenmpi-dev, gcc: the MPI communicator (mpirun, mpi.h, libmpi; CMake's
#     FindMPI checks the C compiler too) and its tests
set -euo pipefail
want=()
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || want+=(dataset-fashion-mnist)
command -v cmake >/dev/null || want+=(cmake)
command -v g++ >/dev/null || want+=(g++)
command -v ninja >/dev/null || want+=(ninja-build)
[ -f /usr/include/gtest/gtest.h ] || want+=(googletest libgtest-dev)
[ -f /usr/include/nlohmann/json.hpp ] || want+=(nlohmann-json3-dev)
command -v mpirun >/dev/null || want+=(openmpi-bin)
command -v mpicc >/dev/null || want+=(libopenmpi-dev)
command -v gcc >/dev/null || want+=(gcc)
[ ${#want[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
  echo "system_deps: please install: ${want[*]}" >&2; exit 0; fi
echo "system_deps: installing ${want[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${want[@]}" >/dev/null
