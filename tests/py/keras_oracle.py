"""Finding a Python with Keras 3 (the oracle the Keras interop tests compare against) and
running Keras code in it as a subprocess (Keras and mdtrain never share a process).

Looked for, in order: $MDTRAIN_KERAS_PYTHON, the venv scripts/test.sh makes
(~/.cache/mdtrain/tfenv), /opt/tfenv. The tests skip, saying why, when none has Keras 3.
"""
import functools
import os
import subprocess
import textwrap

import pytest

_CANDIDATES = [os.environ.get("MDTRAIN_KERAS_PYTHON"),
               os.path.expanduser("~/.cache/mdtrain/tfenv/bin/python"), "/opt/tfenv/bin/python"]


@functools.lru_cache(maxsize=None)
def keras_python():
    """(path, None) of a Python with Keras 3 and h5py, or (None, why not)."""
    tried = []
    for candidate in _CANDIDATES:
        if not candidate:
            continue
        if not os.path.exists(candidate):
            tried.append(f"{candidate}: missing")
            continue
        probe = subprocess.run([candidate, "-c", "import keras, h5py; print(keras.__version__)"],
                               capture_output=True, text=True, timeout=300, env=_env())
        version = probe.stdout.strip().splitlines()[-1] if probe.returncode == 0 and probe.stdout.strip() else ""
        if version.startswith("3."):
            return candidate, None
        tried.append(f"{candidate}: no Keras 3 ({probe.stderr.strip().splitlines()[-1:] or version})")
    return None, ("no Python with Keras 3 found (set MDTRAIN_KERAS_PYTHON, or run scripts/test.sh where PyPI is "
                  "reachable to make ~/.cache/mdtrain/tfenv); tried: " + "; ".join(tried))


def _env():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)
    return env


def require_keras():
    path, why = keras_python()
    if path is None:
        pytest.skip(why)
    return path


def run_keras(code, cwd):
    """Runs code (a Python snippet importing keras) in the Keras interpreter; fails with its output."""
    python = require_keras()
    result = subprocess.run([python, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                            timeout=600, env=_env())
    assert result.returncode == 0, f"Keras side failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout

