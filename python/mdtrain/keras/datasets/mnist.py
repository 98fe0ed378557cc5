"""MNIST handwritten digits, as `keras.datasets.mnist`."""

import os
import zipfile

import numpy as np

from . import _files, _idx

DATASET = "mnist"
ORIGIN = "mnist.npz"
# SHA-256 of mnist.npz at the download origin, the value Keras checks.
FILE_HASH = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"

_NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


def load_npz(path):
    """Loads ((x_train, y_train), (x_test, y_test)) from a Keras mnist.npz,
    checking keys, dtypes and shapes. Never unpickles (allow_pickle=False)."""
    try:
        # Opened here, not by np.load, which leaks its handle when the zip is corrupt.
        with open(path, "rb") as fh:
            f = np.load(fh, allow_pickle=False)
            if not isinstance(f, np.lib.npyio.NpzFile):
                raise ValueError(f"{path}: not an npz archive (a single {type(f).__name__})")
            with f:
                missing = [k for k in _NPZ_KEYS if k not in f.files]
                if missing:
                    raise ValueError(
                        f"{path}: not an MNIST npz: missing arrays {missing} "
                        f"(has {sorted(f.files)})"
                    )
                arrays = {k: f[k] for k in _NPZ_KEYS}
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise ValueError(f"{path}: corrupt or truncated npz file ({e})") from e
    except ValueError as e:
        if str(path) in str(e):
            raise
        raise ValueError(f"{path}: not a valid npz file ({e})") from e
    for split in ("train", "test"):
        x, y = arrays["x_" + split], arrays["y_" + split]
        if x.dtype != np.uint8 or y.dtype != np.uint8:
            raise ValueError(
                f"{path}: x_{split}/y_{split} have dtypes {x.dtype}/{y.dtype}, "
                f"expected uint8"
            )
        if x.ndim != 3 or x.shape[1:] != (28, 28) or y.ndim != 1:
            raise ValueError(
                f"{path}: x_{split} has shape {x.shape} and y_{split} {y.shape}, "
                f"expected (n, 28, 28) and (n,)"
            )
        if x.shape[0] != y.shape[0]:
            raise ValueError(
                f"{path}: image/label count mismatch: x_{split} holds {x.shape[0]} "
                f"images but y_{split} holds {y.shape[0]} labels"
            )
    return (arrays["x_train"], arrays["y_train"]), (arrays["x_test"], arrays["y_test"])


def load_data(path="mnist.npz"):
    """Loads the MNIST dataset.

    Returns `(x_train, y_train), (x_test, y_test)`: uint8 images of shape
    (60000, 28, 28) and (10000, 28, 28), and uint8 labels 0-9 of shape (60000,)
    and (10000,).

    `path` is the npz file name, relative to each directory searched:
    $MDTRAIN_DATA (directly or in an mnist/ subdirectory), then
    ~/.mdtrain/datasets/mnist. A directory holding the four IDX files
    (train-images-idx3-ubyte[.gz] etc.) instead of the npz serves as well.
    When nothing is found the npz is downloaded to ~/.mdtrain/datasets/mnist/<path>
    with its SHA-256 checked. An absolute `path` names the npz itself: it is
    loaded if present, else downloaded there. Raises `DatasetNotFoundError`
    (a FileNotFoundError) listing every place looked at, ValueError for a
    corrupt file.

    Yann LeCun and Corinna Cortes hold the copyright of the MNIST dataset,
    available under the terms of the Creative Commons Attribution-Share Alike
    3.0 license.
    """
    path = os.path.expanduser(os.fspath(path))
    cache = _files.cache_dir(DATASET)
    idx_names = ", ".join(s.names[0] for s in _files.mnist_idx_specs())
    if os.path.isabs(path):
        directory, name = os.path.split(path)
        dirs = [("path argument", directory)]
        layouts = [[_files.FileSpec((name,), origin=ORIGIN, sha256=FILE_HASH)]]
        download_dir = directory
        hints = [f"copy mnist.npz to {path}",
                 "pass a relative path to search $MDTRAIN_DATA and " + cache]
    else:
        dirs = _files.search_dirs(DATASET)
        layouts = [
            [_files.FileSpec((path,), origin=ORIGIN, sha256=FILE_HASH)],
            _files.mnist_idx_specs(),
        ]
        download_dir = cache
        hints = [
            f"set MDTRAIN_DATA to a directory holding {path} or the IDX files "
            f"{idx_names} (gzipped or not), directly or in a {DATASET}{os.sep} "
            f"subdirectory",
            f"copy {path} or those IDX files into {cache}{os.sep}",
        ]
    index, paths = _files.locate(DATASET, layouts, dirs, download_dir, hints)
    if index == 0:
        return load_npz(paths[0])
    return _idx.load_splits(paths)
