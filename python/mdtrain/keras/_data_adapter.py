"""Turning what users pass to fit/evaluate/predict into the arrays the C++ loop reads.

Conversion happens once per call (never per epoch): float inputs become C-contiguous float32,
integer labels int32, as Keras casts them. Arrays already in that form are used without a copy.
"""
import numpy as np


def as_features(x, argname="x"):
    if x is None:
        raise ValueError(f"{argname} is required")
    try:
        arr = np.asarray(x)
    except Exception as e:  # ragged lists and the like
        raise TypeError(f"{argname} must be array-like, got {type(x).__name__}: {e}") from None
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise TypeError(f"{argname} must hold numbers, got an array of dtype {arr.dtype}")
    if arr.ndim < 1:
        raise ValueError(f"{argname} must have a batch axis, got a scalar")
    return np.ascontiguousarray(arr, dtype=np.float32)


def as_labels(y, argname="y"):
    if y is None:
        raise ValueError(f"{argname} is required")
    arr = np.asarray(y)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise TypeError(f"{argname} must hold numbers, got an array of dtype {arr.dtype}")
    if arr.ndim < 1:
        raise ValueError(f"{argname} must have a batch axis, got a scalar")
    if arr.dtype.kind in "biu":
        return np.ascontiguousarray(arr, dtype=np.int32)
    return np.ascontiguousarray(arr, dtype=np.float32)


def check_lengths(x, y, where):
    if y is not None and len(x) != len(y):
        raise ValueError(f"{where}: x and y must have the same number of samples, got x with shape {x.shape} "
                         f"and y with shape {y.shape}")


def check_batch_size(batch_size, where, default=32):
    if batch_size is None:
        return default
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
        raise ValueError(f"{where}: batch_size must be a positive integer, got {batch_size!r}")
    return int(batch_size)


def train_validation_split(x, y, validation_split):
    """Keras takes the last fraction of the (unshuffled) data for validation."""
    if not isinstance(validation_split, (int, float)) or not 0 <= validation_split < 1:
        raise ValueError(f"validation_split must be a float in [0, 1), got {validation_split!r}")
    if validation_split == 0:
        return x, y, None
    split = int(len(x) * (1 - validation_split))
    if split == 0 or split == len(x):
        raise ValueError(f"validation_split={validation_split} leaves no data for training or validation "
                         f"with {len(x)} samples")
    return x[:split], y[:split], (x[split:], y[split:])
