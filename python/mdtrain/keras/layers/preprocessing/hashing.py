"""keras.layers.Hashing: values (strings, integers) hashed into num_bins bins with TF's hashes
(string_hash.py), so a value falls in the bin it falls in under Keras on TF."""
import numpy as np

from mdtrain.keras.layers.preprocessing import string_hash
from mdtrain.keras.layers.preprocessing.category_encoding import (check_not_sparse, check_output_mode,
                                                                  encode_categorical)
from mdtrain.keras.layers.preprocessing.preprocessing_layer import (PREPROCESSING_CLASSES, PreprocessingLayer,
                                                                    as_bytes_array, is_string_array)


def as_hash_input(values):
    """The bytes TF hashes for each value: strings' UTF-8, integers' decimal text (tf.as_string);
    floats are truncated to integers first."""
    values = np.asarray(values)
    if is_string_array(values):
        return list(as_bytes_array(values).reshape(-1))
    if values.dtype.kind == "f":
        values = values.astype(np.int64)
    return [str(int(v)).encode() for v in values.reshape(-1)]


def hash_to_bins(values, num_bins, salt=None):
    """`values` hashed into [0, num_bins), in their shape."""
    values = np.asarray(values)
    buckets = string_hash.hash_buckets(as_hash_input(values), num_bins, None if salt is None else tuple(salt))
    return np.asarray(buckets, dtype=np.int64).reshape(values.shape)


class Hashing(PreprocessingLayer):
    def __init__(self, num_bins, mask_value=None, salt=None, output_mode="int", sparse=False, **kwargs):
        if kwargs.get("dtype") is None:
            kwargs["dtype"] = "int64" if output_mode == "int" else "float32"
        super().__init__(**kwargs)
        if num_bins is None or not isinstance(num_bins, (int, np.integer)) or num_bins <= 0:
            raise ValueError("The `num_bins` for `Hashing` cannot be `None` or non-positive values. "
                             f"Received: num_bins={num_bins}.")
        if output_mode == "int" and self.dtype not in ("int32", "int64"):
            raise ValueError('When `output_mode="int"`, `dtype` should be an integer type, \'int32\' or \'in64\'. '
                             f"Received: dtype={kwargs['dtype']}")
        check_output_mode(output_mode, ("int", "one_hot", "multi_hot", "count"), "Hashing")
        check_not_sparse(sparse, "Hashing")
        self.num_bins = int(num_bins)
        self.mask_value = mask_value
        self.output_mode = output_mode
        self.sparse = sparse
        self.strong_hash = salt is not None
        if salt is None:
            self.salt = None
        elif isinstance(salt, (tuple, list)) and len(salt) == 2:
            self.salt = [int(s) for s in salt]
        elif isinstance(salt, (int, np.integer)):
            self.salt = [int(salt), int(salt)]
        else:
            raise ValueError("The `salt` argument for `Hashing` can only be a tuple of size 2 integers, or a single "
                             f"integer. Received: salt={salt}.")

    def _bins(self, values):
        bins = self.num_bins
        mask = None
        if self.mask_value is not None and bins > 1:
            bins -= 1  # bin 0 is the mask's
            mask_value = self.mask_value
            if is_string_array(values):
                values = as_bytes_array(values)
                mask_value = mask_value.encode() if isinstance(mask_value, str) else mask_value
            mask = values == mask_value
        out = hash_to_bins(values, bins, self.salt)
        if mask is not None:
            out = np.where(mask, 0, out + 1)
        return out

    def _compute(self, x, training):
        if self.output_mode == "one_hot" and x.ndim and x.shape[-1] == 1:
            x = x[..., 0]
        return encode_categorical(self._bins(x), self.output_mode, self.num_bins, self.dtype,
                                  owner=f'Hashing "{self.name}"')

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        if self.output_mode == "int":
            return input_shape
        return (input_shape[:-1] if input_shape else ()) + (self.num_bins,)

    def _config(self):
        return {"num_bins": self.num_bins, "salt": self.salt, "mask_value": self.mask_value,
                "output_mode": self.output_mode, "sparse": self.sparse}


PREPROCESSING_CLASSES["Hashing"] = Hashing
