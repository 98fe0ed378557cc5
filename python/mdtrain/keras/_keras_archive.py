"""The .keras file of Keras 3: a zip of config.json, metadata.json and model.weights.h5.

Written to a temporary file and renamed over the target (mdtrain._atomic), so a failed save
leaves the previous file intact. Read back into an mdtrain Sequential or functional model; what mdtrain does
not support is named in the error.
"""
import datetime
import json
import os
import tempfile
import zipfile
import zlib

from mdtrain._atomic import atomic_path
from mdtrain.keras import _keras_config, _keras_weights

KERAS_VERSION = "3.6.0"  # the Keras 3 file layout this writer follows; Keras reads it from 3.0 on


def is_keras_archive(path):
    return os.fspath(path).endswith(".keras")


def is_keras_weights(path):
    return os.fspath(path).endswith(".weights.h5")


def save(model, path):
    config = _keras_config.model_to_keras(model)
    metadata = {"keras_version": KERAS_VERSION, "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S"),
                "mdtrain": True}
    with atomic_path(path) as tmp, tempfile.TemporaryDirectory(dir=os.path.dirname(tmp)) as scratch:
        weights = os.path.join(scratch, "model.weights.h5")
        _keras_weights.write(model, weights)
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr("metadata.json", json.dumps(metadata))
            z.writestr("config.json", json.dumps(config))
            z.write(weights, "model.weights.h5")


def save_weights(model, path):
    with atomic_path(path) as tmp:
        _keras_weights.write(model, tmp)


def _read_member(z, name, path):
    try:
        return z.read(name)
    except KeyError:
        raise ValueError(f"load_model: {path} has no {name}: not a Keras 3 .keras file") from None
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:  # a damaged member
        raise ValueError(f"load_model: {path} is corrupt: {name} cannot be read ({e})") from None


def load(path, compile=True):
    from mdtrain.keras.models import Sequential

    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ValueError(f"load_model: {path} is not a valid .keras file (a zip archive): {e}") from None
    with z:
        try:
            config = json.loads(_read_member(z, "config.json", path))
        except json.JSONDecodeError as e:
            raise ValueError(f"load_model: {path} has a malformed config.json: {e}") from None
        weights = _read_member(z, "model.weights.h5", path)
    try:
        if isinstance(config, dict) and config.get("class_name") in ("Functional", "Model"):
            model = _keras_config.functional_from_keras(config)
        else:
            name, input_shape, layers = _keras_config.model_from_keras(config)
            model = Sequential(layers, name=name)
            if input_shape is not None:
                model.build((None, *input_shape))
    except _keras_config.UnsupportedKerasObject as e:
        raise ValueError(f"load_model: {path}: {e}") from None
    compile_config = config.get("compile_config") if compile else None
    if compile_config and compile_config.get("loss") is not None:
        try:
            model.compile(**_keras_config.compile_from_keras(compile_config))
        except _keras_config.UnsupportedKerasObject as e:
            raise ValueError(f"load_model: {path}: {e}") from None
    with tempfile.TemporaryDirectory() as scratch:
        weights_path = os.path.join(scratch, "model.weights.h5")
        with open(weights_path, "wb") as f:
            f.write(weights)
        try:
            _keras_weights.read(model, weights_path, "model.weights.h5")
        except ValueError as e:
            raise ValueError(f"load_model: {path}: {e}") from None
    return model
