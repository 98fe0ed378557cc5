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

from mdtrain._atomic import atomic_path, scratch_path
from mdtrain.keras import _keras_config, _keras_weights

KERAS_VERSION = "3.6.0"  # the Keras 3 file layout this writer follows; Keras reads it from 3.0 on


def is_keras_archive(path):
    return os.fspath(path).endswith(".keras")


def is_keras_weights(path):
    return os.fspath(path).endswith(".weights.h5")


MAX_JSON_BYTES = 64 << 20  # config.json, metadata.json: Keras's are kilobytes
MAX_MEMBERS = 10000  # Keras writes three (plus assets/ for layers that have some)
MAX_JSON_DEPTH = 100  # a Functional config nests about a dozen levels
_CHUNK = 1 << 20


def save(model, path):
    config = _keras_config.model_to_keras(model)
    metadata = {"keras_version": KERAS_VERSION, "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S"),
                "mdtrain": True}
    # The weights are written to a scratch file named like the archive's temporary, so a writer
    # killed midway leaves nothing the next save does not remove.
    with atomic_path(path) as tmp, scratch_path(path) as weights:
        _keras_weights.write(model, weights)
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr("metadata.json", json.dumps(metadata))
            z.writestr("config.json", json.dumps(config))
            z.write(weights, "model.weights.h5")


def save_weights(model, path):
    with atomic_path(path) as tmp:
        _keras_weights.write(model, tmp)


def _member(z, name, path, limit):
    """The ZipInfo of `name`, its declared size checked against `limit` before anything is read."""
    try:
        info = z.getinfo(name)
    except KeyError:
        raise ValueError(f"load_model: {path} has no {name}: not a Keras 3 .keras file") from None
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        # What Keras writes; bzip2 and LZMA would inflate a read's input without bound.
        raise ValueError(f"load_model: {path}: {name} is compressed with method {info.compress_type}; .keras "
                         "members are stored or deflated")
    if info.file_size > limit:
        raise ValueError(f"load_model: {path}: {name} declares {info.file_size} bytes uncompressed ({info.compress_size} "
                         f"compressed), more than the {limit} this model can need")
    return info


def _stream_member(z, info, path, limit, out):
    """Copies a member to `out` in chunks, stopping past `limit` bytes whatever the member
    declares (a zip may lie about its sizes)."""
    written = 0
    try:
        with z.open(info) as member:
            while written <= limit:
                chunk = member.read(_CHUNK)
                if not chunk:
                    break
                written += len(chunk)
                if written <= limit:
                    out(chunk)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, zlib.error, NotImplementedError,
            RuntimeError, ValueError) as e:  # a damaged, encrypted or unsupported member (a bad name: ValueError)
        raise ValueError(f"load_model: {path} is corrupt: {info.filename} cannot be read ({e})") from None
    if written > limit:
        raise ValueError(f"load_model: {path}: {info.filename} inflates past {limit} bytes (it declares "
                         f"{info.file_size})")


def _json_depth(value):
    """The nesting depth of parsed JSON, iteratively (no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            break
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return deepest


def _read_config(z, path):
    info = _member(z, "config.json", path, MAX_JSON_BYTES)
    parts = []
    _stream_member(z, info, path, MAX_JSON_BYTES, parts.append)
    try:
        config = json.loads(b"".join(parts))
    except RecursionError:
        raise ValueError(f"load_model: {path}: config.json nests deeper than JSON can be parsed here") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise ValueError(f"load_model: {path} has a malformed config.json: {e}") from None
    if _json_depth(config) > MAX_JSON_DEPTH:
        raise ValueError(f"load_model: {path}: config.json nests deeper than {MAX_JSON_DEPTH} levels; Keras "
                         "configs nest about a dozen")
    if not isinstance(config, dict):
        raise ValueError(f"load_model: {path}: config.json holds a {type(config).__name__}, expected an object "
                         "with class_name and config")
    return config


def _build(config, path, compile):
    """The model config.json describes (compiled when asked and it says how); every error of a
    config that is not what Keras writes becomes a ValueError naming the file and config.json."""
    try:
        model = _keras_config.model_from_config_entry(config, compile=compile)
    except _keras_config.UnsupportedKerasObject as e:
        raise ValueError(f"load_model: {path}: {e}") from None
    except RecursionError:
        raise ValueError(f"load_model: {path}: config.json nests too deeply") from None
    except MemoryError:
        raise  # a layer too large for this machine: MemoryError names the layer and the bytes
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, RuntimeError) as e:
        # Wrong types, missing keys, impossible sizes: what the config says cannot be a model.
        raise ValueError(f"load_model: {path}: config.json does not describe a model mdtrain can build "
                         f"({type(e).__name__}: {e})") from e
    return model


def load(path, compile=True):
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
        raise ValueError(f"load_model: {path} is not a valid .keras file (a zip archive): {e}") from None
    with z:
        members = z.infolist()
        if len(members) > MAX_MEMBERS:
            raise ValueError(f"load_model: {path} has {len(members)} members, more than the {MAX_MEMBERS} a .keras "
                             "file can have")
        config = _read_config(z, path)
        model = _build(config, path, compile)
        # Bounded by what this model can need: its weights and optimizer state, plus HDF5's overhead.
        limit = _keras_weights.weights_file_bound(model)
        info = _member(z, "model.weights.h5", path, limit)
        # h5py reads a file: the member is streamed to a scratch file, removed at the end (and by
        # the next load, should this process be killed first).
        with scratch_path(os.path.join(tempfile.gettempdir(), "mdtrain-load-model.weights.h5")) as weights_path:
            with open(weights_path, "wb") as f:
                _stream_member(z, info, path, limit, f.write)
            _keras_weights.read(model, weights_path, f"load_model: {path}", display="model.weights.h5")
    return model
