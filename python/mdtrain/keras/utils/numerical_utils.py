"""keras.utils.to_categorical: integer labels one-hot encoded, as Keras 3 does."""
import numpy as np

from mdtrain._eager import ops as _ops
from mdtrain._eager.tensor import EagerTensor


class LabelOutOfRange(ValueError, IndexError):
    """A label below 0 or at least num_classes (Keras raises IndexError for the latter)."""


def to_categorical(x, num_classes=None, dtype=None):
    """One-hot encodes integer labels. An array of shape (..., 1) is read as (...), so (N, 1)
    labels give (N, num_classes); num_classes None (or 0) is the largest label + 1. NumPy input
    gives a float64 array as in Keras 3 (dtype, tf.keras 2's argument, casts it); a tensor gives a
    float32 tensor (keras.ops.one_hot)."""
    if isinstance(x, EagerTensor):
        shape = x.shape.as_list()
        if len(shape) > 1 and shape[-1] == 1:
            x = _ops.reshape(x, shape[:-1])
        if not num_classes:
            num_classes = int(np.max(x.numpy())) + 1
        return _ops.one_hot(x, int(num_classes), dtype=dtype or "float32")
    x = np.array(x, dtype="int64")
    input_shape = x.shape
    if input_shape and input_shape[-1] == 1 and len(input_shape) > 1:
        input_shape = tuple(input_shape[:-1])
    x = x.reshape(-1)
    if not num_classes:
        num_classes = np.max(x) + 1  # an empty array: NumPy's ValueError, as in Keras
    num_classes = int(num_classes)
    if x.size and x.min() < 0:
        raise LabelOutOfRange(f"to_categorical: labels must be non-negative, got {x.min()}")
    if x.size and x.max() >= num_classes:
        raise LabelOutOfRange(f"to_categorical: label {x.max()} is out of range for num_classes={num_classes}")
    categorical = np.zeros((x.shape[0], num_classes), dtype=dtype or np.float64)
    categorical[np.arange(x.shape[0]), x] = 1
    return np.reshape(categorical, input_shape + (num_classes,))
