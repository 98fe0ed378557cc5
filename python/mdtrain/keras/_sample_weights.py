"""Keras's sample_weight and class_weight, turned into the one float32 weight per sample that the
C++ step multiplies into each sample's loss and gradient (nn/loss.h: the weighted sum is divided by
the sample count, as Keras's sum_over_batch_size does)."""
import numbers

import numpy as np


def per_sample_weights(sample_weight, class_weight, y, where, several_outputs=False):
    """The (n,) float32 weights of fit/evaluate/train_on_batch/test_on_batch's arguments, or None.

    class_weight maps class ids to weights, read from y as Keras reads it (the argmax of one-hot
    rows, class ids otherwise, rounded); classes it does not name weigh 1."""
    if sample_weight is None and class_weight is None:
        return None
    if sample_weight is not None and class_weight is not None:
        raise ValueError("You cannot `class_weight` and `sample_weight` at the same time.")
    if several_outputs:
        raise NotImplementedError(f"{where}: sample_weight and class_weight of a model with several outputs are not "
                                  "supported yet")
    n = len(y)
    if class_weight is not None:
        return _class_weights(class_weight, y, where)
    try:
        weights = np.asarray(sample_weight, dtype=np.float32)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: sample_weight must be an array of numbers, got {type(sample_weight).__name__}") \
            from None
    if weights.ndim == 2 and weights.shape[1] == 1:
        weights = weights[:, 0]
    if weights.ndim != 1:
        raise NotImplementedError(f"{where}: sample_weight of shape {weights.shape} (one weight per step or "
                                  "position) is not supported yet; give one weight per sample, shape (samples,)")
    if len(weights) != n:
        raise ValueError(f"Data cardinality is ambiguous. Make sure all arrays contain the same number of samples. "
                         f"'y' sizes: {n}, 'sample_weight' sizes: {len(weights)}")
    return np.ascontiguousarray(weights)


def _class_weights(class_weight, y, where):
    if not isinstance(class_weight, dict):
        raise ValueError(f"{where}: `class_weight` must be a dict mapping class indices to weights, got "
                         f"{type(class_weight).__name__}")
    table = {}
    for key, value in class_weight.items():
        if isinstance(key, bool) or not isinstance(key, numbers.Integral):
            raise ValueError(f"{where}: class_weight keys must be integer class indices, got {key!r}")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{where}: class_weight[{key}] must be a number, got {value!r}")
        table[int(key)] = float(value)
    labels = np.asarray(y)
    if labels.ndim > 1:
        labels = np.argmax(labels, axis=-1) if labels.shape[-1] != 1 else labels[..., 0]
    if labels.ndim != 1:
        raise NotImplementedError(f"{where}: class_weight needs one label per sample, got labels of shape "
                                  f"{np.asarray(y).shape}")
    ids = np.round(labels).astype(np.int32)
    return np.array([table.get(int(c), 1.0) for c in ids], dtype=np.float32)
