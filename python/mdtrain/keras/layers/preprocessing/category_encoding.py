"""keras.layers.CategoryEncoding, and the encoding of integer indices it shares with Hashing and
the lookup layers ("one_hot", "multi_hot", "count"), as Keras 3 on TF computes it."""
import numpy as np

from mdtrain._eager.tensor import wrap
from mdtrain.keras.layers.preprocessing.preprocessing_layer import PREPROCESSING_CLASSES, PreprocessingLayer, as_array


def encode_categorical(indices, output_mode, depth, dtype, count_weights=None, owner="CategoryEncoding"):
    """Integer `indices` encoded over `depth` classes. one_hot adds an axis (replacing a last axis
    of size 1); multi_hot and count reduce the last axis (a 1-D input is one sample). Indices
    outside [0, depth) are dropped, as TF's bincount drops them: the lookup layers map mask
    tokens past the end for that."""
    indices = np.asarray(indices)
    if indices.dtype.kind not in "iub":
        if indices.dtype.kind == "f" and np.all(np.mod(indices, 1) == 0):
            indices = indices.astype(np.int64)
        else:
            raise TypeError(f"{owner}: inputs must be integer indices, got dtype {indices.dtype}")
    if output_mode == "int":
        return indices.astype(dtype)
    if indices.ndim == 0:
        indices = indices.reshape(1)
    if output_mode == "one_hot":
        if indices.ndim > 1 and indices.shape[-1] == 1:
            indices = indices[..., 0]
        out = np.zeros(indices.shape + (depth,), dtype=dtype)
        valid = (indices >= 0) & (indices < depth)
        where = np.nonzero(valid)
        out[where + (indices[where],)] = 1
        return out
    if indices.ndim > 2:
        raise ValueError(f"{owner}: output_mode={output_mode!r} takes inputs of rank 1 or 2, got shape "
                         f"{indices.shape}")
    rows = indices.reshape(1, -1) if indices.ndim == 1 else indices
    if count_weights is not None:
        count_weights = np.asarray(count_weights, dtype=np.float64)
        if count_weights.shape != indices.shape:
            raise ValueError(f"{owner}: count_weights must have the shape of the inputs {indices.shape}, got "
                             f"{count_weights.shape}")
        count_weights = count_weights.reshape(rows.shape)
    out = np.zeros((rows.shape[0], depth), dtype=np.float64)
    r, c = np.nonzero((rows >= 0) & (rows < depth))
    np.add.at(out, (r, rows[r, c]), 1.0 if count_weights is None else count_weights[r, c])
    if output_mode == "multi_hot":
        out = np.minimum(out, 1)
    out = out.astype(dtype)
    return out[0] if indices.ndim == 1 else out


def check_output_mode(output_mode, allowed, owner):
    if output_mode not in allowed:
        raise ValueError(f"{owner}: Invalid value for argument `output_mode`. Expected one of {allowed}. "
                         f"Received: output_mode={output_mode!r}")


def check_not_sparse(sparse, owner):
    if sparse:
        raise ValueError(f"{owner}: sparse=True is not supported (mdtrain has no sparse tensors); use sparse=False")


class CategoryEncoding(PreprocessingLayer):
    """Integer features as one-hot, multi-hot or count vectors over num_tokens classes."""

    def __init__(self, num_tokens=None, output_mode="multi_hot", sparse=False, **kwargs):
        super().__init__(**kwargs)
        if output_mode == "binary":
            output_mode = "multi_hot"
        check_output_mode(output_mode, ("count", "one_hot", "multi_hot"), "CategoryEncoding")
        if num_tokens is None:
            raise ValueError("CategoryEncoding: num_tokens must be set to use this layer. If the number of tokens is "
                             "not known beforehand, use the IntegerLookup layer instead.")
        if not isinstance(num_tokens, (int, np.integer)) or num_tokens < 1:
            raise ValueError(f"CategoryEncoding: `num_tokens` must be >= 1. Received: num_tokens={num_tokens!r}.")
        check_not_sparse(sparse, "CategoryEncoding")
        self.num_tokens = int(num_tokens)
        self.output_mode = output_mode
        self.sparse = sparse

    def __call__(self, inputs, training=None, count_weights=None):
        if count_weights is None:
            return super().__call__(inputs, training=training)
        if self.output_mode != "count":
            raise ValueError("`count_weights` is not used when `output_mode` is not `'count'`. "
                             f"Received `count_weights={count_weights}`.")
        return wrap(encode_categorical(as_array(inputs, self.name), self.output_mode, self.num_tokens, self.dtype,
                                       as_array(count_weights, self.name), f'CategoryEncoding "{self.name}"'))

    def _compute(self, x, training):
        return encode_categorical(x, self.output_mode, self.num_tokens, self.dtype, None,
                                  f'CategoryEncoding "{self.name}"')

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        if not input_shape:
            return (self.num_tokens,)
        if self.output_mode == "one_hot" and (input_shape[-1] != 1 or len(input_shape) == 1):
            return input_shape + (self.num_tokens,)
        return input_shape[:-1] + (self.num_tokens,)

    def _config(self):
        return {"num_tokens": self.num_tokens, "output_mode": self.output_mode}


PREPROCESSING_CLASSES["CategoryEncoding"] = CategoryEncoding
