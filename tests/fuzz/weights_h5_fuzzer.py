"""atheris (libFuzzer for Python) target: the .weights.h5 reader (model.load_weights, and through it
the weights inside .keras archives and tf.train.Checkpoint files: one reader, mdtrain._safe_hdf5).

    python tests/fuzz/weights_h5_fuzzer.py [libFuzzer flags] [corpus dirs]
    (scripts/fuzz.sh runs it)

The input is the file, loaded into a fixed compiled model (Dense(4) on 3 inputs, Dense(2), Adam).
The property: load_weights sets weights of the model's shapes, or raises ValueError whose message
starts with "load_weights: " and names the path, and leaves the weights as they were; any other exception, a
crash, a hang or memory beyond -rss_limit_mb is a finding. HDF5 reads past the end of a file as
zeros, so a 64 KiB input can declare any size: the reader must check before it reads.
Fuzzes the installed mdtrain (pip install .), or the one PYTHONPATH names. Needs mdtrain's C++ extension.
"""
import os
import sys

import numpy as np  # noqa: E402

import mdtrain as tf  # noqa: E402
from mdtrain import _safe_hdf5  # noqa: E402
from mdtrain.keras import _keras_weights  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import atheris_support  # noqa: E402

atheris_support.instrument(_keras_weights, _safe_hdf5)
PATH = atheris_support.scratch_path("mdtrain_weights_fuzz_", "input.weights.h5")
L = tf.keras.layers
tf.keras.utils.set_random_seed(0)
MODEL = tf.keras.Sequential([L.Dense(4, input_shape=(3,)), L.Dense(2)])
MODEL.compile(optimizer="adam", loss="mse")
SHAPES = [w.shape for w in MODEL.get_weights()]


def test_one_input(data):
    with open(PATH, "wb") as f:
        f.write(data)
    before = MODEL.get_weights()
    try:
        MODEL.load_weights(PATH)
    except ValueError as e:
        if not str(e).startswith("load_weights: ") or PATH not in str(e):
            raise AssertionError(f"error does not name the file: {e}") from e
        after = MODEL.get_weights()
        assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(before, after)), "a refused file changed weights"
        return
    assert [w.shape for w in MODEL.get_weights()] == SHAPES


if __name__ == "__main__":
    atheris_support.fuzz(test_one_input, PATH)
