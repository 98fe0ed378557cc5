"""keras.layers.IntegerLookup: integer tokens to vocabulary indices (and back with invert=True)."""
import numpy as np

from mdtrain.keras.layers.preprocessing.index_lookup import IndexLookup
from mdtrain.keras.layers.preprocessing.preprocessing_layer import PREPROCESSING_CLASSES


class IntegerLookup(IndexLookup):
    _lookup_name = "IntegerLookup"

    def __init__(self, max_tokens=None, num_oov_indices=1, mask_token=None, oov_token=-1, vocabulary=None,
                 vocabulary_dtype="int64", idf_weights=None, invert=False, output_mode="int", sparse=False,
                 pad_to_max_tokens=False, oov_method="floormod", salt=None, name=None, **kwargs):
        if max_tokens is not None and max_tokens <= 1:
            raise ValueError("If `max_tokens` is set for `IntegerLookup`, it must be greater than 1. "
                             f"Received: max_tokens={max_tokens}")
        if vocabulary_dtype != "int64":
            raise ValueError("Only `vocabulary_dtype='int64'` is supported at this time. Received: "
                             f"vocabulary_dtype={vocabulary_dtype}")
        super().__init__(max_tokens=max_tokens, num_oov_indices=num_oov_indices, mask_token=mask_token,
                         oov_token=oov_token, vocabulary=vocabulary, vocabulary_dtype=vocabulary_dtype,
                         idf_weights=idf_weights, invert=invert, output_mode=output_mode, sparse=sparse,
                         pad_to_max_tokens=pad_to_max_tokens, oov_method=oov_method, salt=salt, name=name, **kwargs)

    def _key(self, token):
        if isinstance(token, (bool, np.bool_)) or not isinstance(token, (int, np.integer)):
            if isinstance(token, (float, np.floating)) and float(token).is_integer():
                return int(token)
            raise TypeError(f'IntegerLookup "{self.name}": tokens must be integers, got {token!r}')
        return int(token)

    def _keys_of(self, array):
        if array.dtype.kind not in "iub":
            if array.dtype.kind == "f" and np.all(np.mod(array, 1) == 0):
                array = array.astype(np.int64)
            else:
                raise TypeError(f'IntegerLookup "{self.name}" takes integers, got an array of dtype {array.dtype}; '
                                "use StringLookup for strings")
        return array.reshape(-1).astype(np.int64).tolist()

    def _sortable(self, keys):
        return np.asarray(keys, dtype=np.int64)

    def _as_output_tokens(self, keys, shape):
        return np.asarray(keys, dtype=np.int64).reshape(shape)

    def _config(self):
        config = super()._config()
        for key in ("oov_token", "mask_token"):
            if config[key] is not None:
                config[key] = int(config[key])
        if config["vocabulary"] is not None:
            config["vocabulary"] = [int(v) for v in config["vocabulary"]]
        return config


PREPROCESSING_CLASSES["IntegerLookup"] = IntegerLookup
