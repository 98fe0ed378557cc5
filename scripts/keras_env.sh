#!/usr/bin/env bash
# The Keras 3 the interop tests compare against (tests/py/keras_oracle.py): a venv with
# tensorflow-cpu from PyPI at ~/.cache/mdtrain/tfenv, made once and reused (pip's cache keeps a
# rebuild small). Never fails the test command: offline, or where TensorFlow has no wheel, it says
# so and the Keras comparison tests skip with that reason.
set -uo pipefail
if [ -n "${MDTRAIN_KERAS_PYTHON:-}" ]; then
  echo "Keras oracle: $MDTRAIN_KERAS_PYTHON (MDTRAIN_KERAS_PYTHON)"
  exit 0
fi
env_dir="$HOME/.cache/mdtrain/tfenv"
if [ -f "$env_dir/.complete" ] && "$env_dir/bin/python" -c "import keras, h5py" 2>/dev/null; then
  echo "Keras oracle: $env_dir (cached)"
  exit 0
fi
if ! python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/tensorflow-cpu/', timeout=10)" \
    2>/dev/null; then
  echo "Keras oracle: PyPI is not reachable; the Keras comparison tests will skip"
  exit 0
fi
rm -rf "$env_dir"
mkdir -p "$(dirname "$env_dir")"
if python3 -m venv "$env_dir" && "$env_dir/bin/pip" install -q "tensorflow-cpu>=2.16" h5py; then
  touch "$env_dir/.complete"
  echo "Keras oracle: made $env_dir"
else
  rm -rf "$env_dir"
  echo "Keras oracle: installing tensorflow-cpu failed; the Keras comparison tests will skip"
fi
exit 0
