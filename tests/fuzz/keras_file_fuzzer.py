"""atheris (libFuzzer for Python) target: the .keras reader, tf.keras.models.load_model on a zip.

    python tests/fuzz/keras_file_fuzzer.py [libFuzzer flags] [corpus dirs]
    (scripts/fuzz.sh runs it)

An input starting with "PK" is the file itself (the zip layer: its CRCs stop most mutations
there); any other input is "<config.json>\n--weights--\n<model.weights.h5>", zipped here into a
valid archive so mutations reach the config parser and the weights reader. The property: load_model returns a model, or raises ValueError whose
message starts with "load_model: " and names the path (or MemoryError, for a config declaring a layer too large
for the machine, naming the layer); any other exception, a crash, a hang or memory beyond
-rss_limit_mb is a finding. Seeds: small archives saved by mdtrain (tests/fuzz/corpus/keras_file/).
Fuzzes the installed mdtrain (pip install .), or the one PYTHONPATH names. Needs mdtrain's C++ extension (the model is built).
"""
import os
import sys
import zipfile

import mdtrain as tf  # noqa: E402
from mdtrain import _safe_hdf5  # noqa: E402
from mdtrain.keras import _keras_archive, _keras_config, _keras_weights  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import atheris_support  # noqa: E402

atheris_support.instrument(_keras_archive, _keras_config, _keras_weights, _safe_hdf5)
PATH = atheris_support.scratch_path("mdtrain_keras_fuzz_", "input.keras")


SEPARATOR = b"\n--weights--\n"


def test_one_input(data):
    if data.startswith(b"PK"):
        with open(PATH, "wb") as f:
            f.write(data)
    else:
        config, found, weights = data.partition(SEPARATOR)
        with zipfile.ZipFile(PATH, "w") as z:
            z.writestr("metadata.json", b'{"keras_version": "3.6.0"}')
            z.writestr("config.json", config)
            if found:
                z.writestr("model.weights.h5", weights)
    try:
        tf.keras.models.load_model(PATH)
    except ValueError as e:
        if not str(e).startswith("load_model: ") or PATH not in str(e):
            raise AssertionError(f"error does not name the file: {e}") from e
    except MemoryError as e:
        if "layer" not in str(e):
            raise AssertionError(f"MemoryError names no layer: {e}") from e


if __name__ == "__main__":
    atheris_support.fuzz(test_one_input, PATH)
