#!/usr/bin/env bash
# The main job: install mdtrain and train the seed model under MirroredStrategy on two logical
# CPU devices on Fashion-MNIST (5 epochs), then print the test accuracy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system_deps.sh
python3 -m pip install -q .
python3 examples/mirrored_fashion_mnist.py "$@"
