"""keras.layers.StringLookup: strings to vocabulary indices (and back with invert=True). Tokens
are kept as UTF-8 bytes, as TF keeps strings; get_vocabulary() shows them as str."""
import numpy as np

from mdtrain.keras.layers.preprocessing.index_lookup import IndexLookup
from mdtrain.keras.layers.preprocessing.preprocessing_layer import PREPROCESSING_CLASSES, is_string_array


class StringLookup(IndexLookup):
    _lookup_name = "StringLookup"

    def __init__(self, max_tokens=None, num_oov_indices=1, mask_token=None, oov_token="[UNK]", vocabulary=None,
                 idf_weights=None, invert=False, output_mode="int", pad_to_max_tokens=False, sparse=False,
                 encoding="utf-8", name=None, salt=None, **kwargs):
        kwargs.pop("vocabulary_dtype", None)
        self.encoding = encoding
        super().__init__(max_tokens=max_tokens, num_oov_indices=num_oov_indices, mask_token=mask_token,
                         oov_token=oov_token, vocabulary=vocabulary, idf_weights=idf_weights, invert=invert,
                         output_mode=output_mode, pad_to_max_tokens=pad_to_max_tokens, sparse=sparse, name=name,
                         salt=salt, vocabulary_dtype="string", **kwargs)

    def _key(self, token):
        if isinstance(token, (bytes, np.bytes_)):
            return bytes(token)
        if isinstance(token, str):
            return token.encode(self.encoding)
        raise TypeError(f'StringLookup "{self.name}": tokens must be strings, got {token!r}')

    def _keys_of(self, array):
        if not is_string_array(array):
            raise TypeError(f'StringLookup "{self.name}" takes strings, got an array of dtype {array.dtype}; use '
                            "IntegerLookup for integers")
        return [self._key(v) for v in array.reshape(-1).tolist()]

    def _shown(self, key):
        return key.decode(self.encoding)

    def _as_output_tokens(self, keys, shape):
        out = np.empty(len(keys), dtype=object)
        out[:] = keys
        return out.reshape(shape)

    def _config(self):
        config = super()._config()
        del config["vocabulary_dtype"]
        config["encoding"] = self.encoding
        return config


PREPROCESSING_CLASSES["StringLookup"] = StringLookup
