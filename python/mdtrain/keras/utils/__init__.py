"""Utilities of the Keras-like front end (``mdtrain.keras.utils``)."""

from mdtrain._random import set_random_seed

from .progbar import Progbar


class experimental:  # noqa: N801 - keras.utils.experimental namespace
    from mdtrain._ps.fit import DatasetCreator


def to_categorical(y, num_classes=None, dtype="float32"):
    """One-hot encodes integer labels (keras.utils.to_categorical)."""
    import numpy as np

    y = np.asarray(y, dtype=np.int64)
    if y.size and y.min() < 0:
        raise ValueError(f"to_categorical: labels must be non-negative, got {y.min()}")
    num_classes = int(y.max()) + 1 if num_classes is None else int(num_classes)
    if y.size and y.max() >= num_classes:
        raise ValueError(f"to_categorical: label {y.max()} is out of range for num_classes={num_classes}")
    out = np.zeros((*y.shape, num_classes), dtype=dtype)
    np.put_along_axis(out, y[..., None], 1, axis=-1)
    return out


__all__ = ["experimental", "Progbar", "set_random_seed", "to_categorical"]
