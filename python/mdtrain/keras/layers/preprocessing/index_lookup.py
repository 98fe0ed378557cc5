"""The vocabulary lookup StringLookup and IntegerLookup share (Keras's IndexLookup): a vocabulary
(given, read from a file, or learnt by adapt() by frequency), the mask index 0, out-of-vocabulary
indices (hashed into num_oov_indices buckets as TF hashes), invert=True back to tokens, and the
"one_hot" / "multi_hot" / "count" / "tf_idf" encodings of the indices."""
import collections
import os

import numpy as np

from mdtrain.keras.layers.preprocessing.category_encoding import (check_not_sparse, check_output_mode,
                                                                  encode_categorical)
from mdtrain.keras.layers.preprocessing.hashing import hash_to_bins
from mdtrain.keras.layers.preprocessing.preprocessing_layer import PreprocessingLayer, as_array, batches_of

_DROPPED = np.iinfo(np.int64).max  # where a mask token goes in the encoded modes: past every bin


def salt_pair(salt, owner):
    if salt is None:
        return None
    if isinstance(salt, (tuple, list)) and len(salt) == 2:
        return [int(s) for s in salt]
    if isinstance(salt, (int, np.integer)) and not isinstance(salt, bool):
        return [int(salt), int(salt)]
    raise ValueError(f"The `salt` argument for `{owner}` can only be a tuple of 2 integers, or a single integer. "
                     f"Received: salt={salt}.")


class IndexLookup(PreprocessingLayer):
    """Tokens to indices: [mask] [OOV x num_oov_indices] [vocabulary...]. Subclasses say how a
    token is kept (_key: bytes for strings, int for integers) and shown (_shown)."""

    _lookup_name = "IndexLookup"

    def __init__(self, max_tokens, num_oov_indices, mask_token, oov_token, vocabulary_dtype, vocabulary=None,
                 idf_weights=None, invert=False, output_mode="int", sparse=False, pad_to_max_tokens=False,
                 oov_method="floormod", salt=None, vocabulary_size=None, has_input_vocabulary=None, **kwargs):
        owner = self._lookup_name
        if max_tokens is not None and max_tokens <= 1:
            raise ValueError(f"{owner}: If set, `max_tokens` must be greater than 1. Received: max_tokens={max_tokens}")
        if pad_to_max_tokens and max_tokens is None:
            raise ValueError(f"{owner}: If pad_to_max_tokens is True, must set `max_tokens`. "
                             f"Received: max_tokens={max_tokens}")
        if not isinstance(num_oov_indices, (int, np.integer)) or num_oov_indices < 0:
            raise ValueError(f"{owner}: `num_oov_indices` must be greater than or equal to 0. "
                             f"Received: num_oov_indices={num_oov_indices}")
        if oov_method not in ("floormod", "farmhash"):
            raise ValueError(f"{owner}: oov_method must be one of ('floormod', 'farmhash'), got {oov_method!r}")
        if salt is not None and vocabulary_dtype != "string" and oov_method != "farmhash":
            raise ValueError(f"{owner}: `salt` can only be used when `oov_method='farmhash'`. "
                             f"Received: oov_method={oov_method}")
        salt = salt_pair(salt, owner)
        output_mode = {"binary": "multi_hot", "tf-idf": "tf_idf"}.get(output_mode, output_mode)
        check_output_mode(output_mode, ("int", "one_hot", "multi_hot", "count", "tf_idf"), owner)
        if invert and output_mode != "int":
            raise ValueError(f"{owner}: `output_mode` must be `'int'` when `invert` is true. "
                             f"Received: output_mode={output_mode}")
        check_not_sparse(sparse, owner)
        if idf_weights is not None and output_mode != "tf_idf":
            raise ValueError(f"{owner}: `idf_weights` should only be set if `output_mode` is `'tf_idf'`. "
                             f"Received: idf_weights={idf_weights} and output_mode={output_mode}")
        kwargs.pop("dtype", None)  # the output's dtype follows output_mode
        super().__init__(**kwargs)
        self.invert = bool(invert)
        self.max_tokens = max_tokens
        self.num_oov_indices = int(num_oov_indices)
        self.mask_token = mask_token
        self.oov_token = oov_token
        self.output_mode = output_mode
        self.sparse = sparse
        self.pad_to_max_tokens = pad_to_max_tokens
        self.vocabulary_dtype = vocabulary_dtype
        self.oov_method = oov_method
        self.salt = salt
        self.input_vocabulary = None if isinstance(vocabulary, (str, os.PathLike)) else vocabulary
        self.input_idf_weights = idf_weights
        self._has_input_vocabulary = vocabulary is not None if has_input_vocabulary is None else has_input_vocabulary
        self._frozen_vocab_size = vocabulary_size
        self._tokens = []        # the learnt or given tokens, as keys, in index order
        self._table = {}         # key -> index
        self.idf_weights = None  # float32 per index (tf_idf)
        self._reset_counts()
        if output_mode == "tf_idf" and self._has_input_vocabulary and idf_weights is None:
            raise ValueError(f"{owner}: When specifying the `vocabulary` argument, in TF-IDF output mode, the "
                             "`idf_weights` argument must also be provided.")
        if vocabulary is not None:
            self.set_vocabulary(vocabulary, idf_weights)
        self._built = True

    @property
    def dtype(self):
        if self.invert:
            return self.vocabulary_dtype
        return "float32" if self.output_mode == "tf_idf" else "int64"

    # ---- subclasses: how tokens are keyed ------------------------------------------------------
    def _key(self, token):
        raise NotImplementedError

    def _keys_of(self, array):
        """The keys of an input array (flattened)."""
        raise NotImplementedError

    def _shown(self, key):
        """A key as get_vocabulary() shows it."""
        return key

    def _as_output_tokens(self, keys, shape):
        raise NotImplementedError

    # ---- indices -------------------------------------------------------------------------------
    def _oov_start_index(self):
        return 1 if self.mask_token is not None and self.output_mode == "int" else 0

    def _token_start_index(self):
        return self._oov_start_index() + self.num_oov_indices

    def vocabulary_size(self):
        """The size of the vocabulary, the mask and OOV indices included."""
        return len(self._tokens) + self._token_start_index()

    def get_vocabulary(self, include_special_tokens=True):
        vocab = [self.oov_token] * self._token_start_index() + [self._shown(k) for k in self._tokens]
        if self.mask_token is not None and self.output_mode == "int":
            vocab[0] = self.mask_token
        return vocab if include_special_tokens else vocab[self._token_start_index():]

    def set_vocabulary(self, vocabulary, idf_weights=None):
        owner = f'{self._lookup_name} "{self.name}"'
        if self.output_mode == "tf_idf":
            if idf_weights is None:
                raise ValueError(f"{owner}: `idf_weights` must be set if output_mode is 'tf_idf'.")
        elif idf_weights is not None:
            raise ValueError(f"{owner}: `idf_weights` should only be set if output_mode is `'tf_idf'`. "
                             f"Received: output_mode={self.output_mode} and idf_weights={idf_weights}")
        if isinstance(vocabulary, (str, os.PathLike)):
            if not os.path.exists(vocabulary):
                raise ValueError(f"{owner}: Vocabulary file {vocabulary} does not exist.")
            if self.output_mode == "tf_idf":
                raise ValueError(f"{owner}: output_mode `'tf_idf'` does not support loading a vocabulary from file.")
            with open(vocabulary, encoding="utf-8") as f:
                vocabulary = f.read().splitlines()
            while vocabulary and vocabulary[-1] == "":
                vocabulary.pop()
            if self.vocabulary_dtype != "string":
                vocabulary = [int(v) for v in vocabulary]
        keys = [self._key(t) for t in np.asarray(vocabulary).reshape(-1).tolist()] if not isinstance(
            vocabulary, (list, tuple)) else [self._key(t) for t in vocabulary]
        if not keys:
            raise ValueError(f"{owner}: Cannot set an empty vocabulary. Received: vocabulary={vocabulary}")
        token_start = self._token_start_index()
        mask_key = None if self.mask_token is None else self._key(self.mask_token)
        oov_key = None if self.oov_token is None else self._key(self.oov_token)
        special = [mask_key] * self._oov_start_index() + [oov_key] * self.num_oov_indices
        tokens = keys[token_start:] if keys[:token_start] == special else keys
        repeated = [self._shown(k) for k, c in collections.Counter(tokens).items() if c > 1]
        if repeated:
            raise ValueError(f"{owner}: The passed vocabulary has at least one repeated term. Please uniquify your "
                             f"dataset. The repeated terms are: {repeated}")
        shown_special = [self._shown(k) if k is not None else None for k in special]
        if mask_key is not None and mask_key in tokens:
            raise ValueError(f"{owner}: Found reserved mask token at unexpected location in `vocabulary`. Note that "
                             "passed `vocabulary` does not need to include the OOV and mask tokens. Either remove "
                             "all mask and OOV tokens, or include them only at the start of the vocabulary in "
                             f"precisely this order: {shown_special}. Received: mask_token={self.mask_token}")
        if oov_key is not None and self.invert and oov_key in tokens:
            raise ValueError(f"{owner}: Found reserved OOV token at unexpected location in `vocabulary`. Either "
                             "remove all mask and OOV tokens, or include them only at the start of the vocabulary "
                             f"in precisely this order: {shown_special}. Received: oov_token={self.oov_token}")
        if self.max_tokens is not None and token_start + len(tokens) > self.max_tokens:
            raise ValueError(f"{owner}: Attempted to set a vocabulary larger than the maximum vocab size. Received "
                             f"vocabulary size is {token_start + len(tokens)}; `max_tokens` is {self.max_tokens}.")
        self._set_tokens(tokens)
        if self.output_mode == "tf_idf":
            idf_weights = np.asarray(idf_weights, dtype=np.float32).reshape(-1)
            if len(idf_weights) != len(keys):
                raise ValueError(f"{owner}: `idf_weights` must be the same length as vocabulary. "
                                 f"len(idf_weights) is {len(idf_weights)}; len(vocabulary) is {len(keys)}")
            if tokens is keys:  # no special tokens given: their weight is the average weight
                idf_weights = np.concatenate([np.full(token_start, idf_weights.mean(), np.float32), idf_weights])
            self._set_idf(idf_weights)
        self._frozen_vocab_size = self.vocabulary_size()

    def _set_tokens(self, tokens):
        self._tokens = list(tokens)
        start = self._token_start_index()
        self._table = {k: start + i for i, k in enumerate(self._tokens)}

    def _set_idf(self, weights):
        if self.pad_to_max_tokens and self.max_tokens is not None:
            weights = np.concatenate([weights, np.zeros(self.max_tokens - len(weights), np.float32)])
        self.idf_weights = weights.astype(np.float32)

    # ---- adapt ---------------------------------------------------------------------------------
    def _reset_counts(self):
        self._token_counts = collections.Counter()
        self._document_counts = collections.Counter()
        self._num_documents = 0

    def adapt(self, data, steps=None):
        """Learns the vocabulary from data: tokens by decreasing count, ties by decreasing token,
        the first max_tokens - (mask and OOV indices) kept. A Dataset or iterable is read batch by
        batch (each row a document for tf_idf); an array at once (a 1-D array: one token per
        document)."""
        self._adapt(data, steps, self._update_counts)

    def _adapt(self, data, steps, update):
        """adapt() with `update` counting the tokens of each batch (TextVectorization's tokenizes)."""
        owner = f'{self._lookup_name} "{self.name}"'
        if self._has_input_vocabulary:
            raise ValueError(f"Cannot adapt layer '{self.name}' after setting a static vocabulary via `vocabulary` "
                             "argument or `set_vocabulary()` method.")
        self._reset_counts()
        if isinstance(data, (np.ndarray, list, tuple)) or hasattr(data, "numpy"):
            array = as_array(data, owner)
            update(array[:, None] if array.ndim == 1 else array)
        else:
            for batch in batches_of(data, owner, steps):
                update(batch)
        self._finalize_counts()

    def _update_counts(self, batch):
        if batch.ndim == 0:
            batch = batch.reshape(1)
        if batch.ndim == 1:
            batch = batch[None]  # a 1-D batch is one document
        keys = self._keys_of(batch)
        self._token_counts.update(keys)
        if self.output_mode == "tf_idf":
            per_row = int(np.prod(batch.shape[1:], dtype=np.int64))
            for r in range(batch.shape[0]):
                self._document_counts.update(set(keys[r * per_row:(r + 1) * per_row]))
            self._num_documents += batch.shape[0]

    def _finalize_counts(self):
        counts = self._token_counts
        for special in (self.mask_token, self.oov_token):
            if special is not None:
                counts.pop(self._key(special), None)
        if not counts:
            self._frozen_vocab_size = self.vocabulary_size()
            return
        tokens = list(counts)
        order = np.lexsort((self._sortable(tokens), np.array([counts[t] for t in tokens])))[::-1]
        if self.max_tokens:
            order = order[:self.max_tokens - self._token_start_index()]
        tokens = [tokens[i] for i in order]
        self._set_tokens(tokens)
        if self.output_mode == "tf_idf":
            docs = np.array([self._document_counts[t] for t in tokens], dtype=np.float64)
            idf = np.log(1 + self._num_documents / (1 + docs)).astype(np.float32)
            self._set_idf(np.concatenate([np.full(self._token_start_index(), idf.mean(), np.float32), idf]))
        self._frozen_vocab_size = self.vocabulary_size()
        self._reset_counts()

    def _sortable(self, keys):
        out = np.empty(len(keys), dtype=object)
        out[:] = keys
        return out

    # ---- call ----------------------------------------------------------------------------------
    def _compute(self, x, training):
        owner = f'{self._lookup_name} "{self.name}"'
        if self.output_mode != "int" and not self.pad_to_max_tokens and self._frozen_vocab_size is None:
            raise RuntimeError(f"{owner}: When using `output_mode={self.output_mode}` and `pad_to_max_tokens=False`, "
                               "you must set the layer's vocabulary before calling it. Either pass a `vocabulary` "
                               "argument to the layer, or call `adapt` with some sample data.")
        scalar = x.ndim == 0
        if scalar:
            x = x.reshape(1)
        lookups = self._invert(x) if self.invert else self._lookup(x, owner)
        if self.output_mode == "int":
            return lookups[0] if scalar else lookups
        depth = self.max_tokens if self.pad_to_max_tokens else self._frozen_vocab_size
        if self.output_mode == "tf_idf":
            counts = encode_categorical(lookups, "count", depth, np.float32, owner=owner)
            return counts * self.idf_weights[:depth]
        return encode_categorical(lookups, self.output_mode, depth, np.int64, owner=owner)

    def _lookup(self, x, owner):
        keys = self._keys_of(x)
        default = self._oov_start_index() if self.num_oov_indices == 1 else -1
        table = self._table
        out = np.fromiter((table.get(k, default) for k in keys), dtype=np.int64, count=len(keys))
        if self.mask_token is not None:
            mask_key = self._key(self.mask_token)
            out[np.fromiter((k == mask_key for k in keys), dtype=bool, count=len(keys))] = \
                0 if self.output_mode == "int" else _DROPPED
        if self.num_oov_indices == 0:
            missing = out == -1
            if missing.any():
                found = [self._shown(k) for k, m in zip(keys, missing) if m]
                raise ValueError(f"{owner}: When `num_oov_indices=0` all inputs should be in vocabulary, found OOV "
                                 f"values {found}, consider setting `num_oov_indices=1`.")
        elif self.num_oov_indices > 1:
            missing = out == -1
            if missing.any():
                out[missing] = self._oov_buckets(x.reshape(-1)[missing]) + self._oov_start_index()
        return out.reshape(x.shape)

    def _oov_buckets(self, values):
        if values.dtype.kind in "iu" and self.oov_method != "farmhash":
            return np.mod(values, self.num_oov_indices)
        return hash_to_bins(values, self.num_oov_indices, self.salt)

    def _invert(self, x):
        if x.dtype.kind not in "iu":
            raise TypeError(f'{self._lookup_name} "{self.name}" (invert=True) takes integer indices, got dtype '
                            f"{x.dtype}")
        start = self._token_start_index()
        oov_key = None if self.oov_token is None else self._key(self.oov_token)
        flat = x.reshape(-1)
        keys = [self._tokens[i - start] if start <= i < start + len(self._tokens) else oov_key for i in flat.tolist()]
        if self.mask_token is not None:
            mask_key = self._key(self.mask_token)
            keys = [mask_key if i == 0 else k for i, k in zip(flat.tolist(), keys)]
        return self._as_output_tokens(keys, x.shape)

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        if self.output_mode == "int":
            return input_shape
        depth = self.max_tokens if self.pad_to_max_tokens else self._frozen_vocab_size
        if self.output_mode == "one_hot" and (not input_shape or input_shape[-1] != 1 or len(input_shape) == 1):
            return input_shape + (depth,)
        return input_shape[:-1] + (depth,)

    # ---- state ---------------------------------------------------------------------------------
    def get_weights(self):
        return [self.idf_weights.copy()] if self.output_mode == "tf_idf" and self.idf_weights is not None else []

    def set_weights(self, weights):
        weights = list(weights)
        if self.output_mode != "tf_idf":
            return super().set_weights(weights)
        if len(weights) != 1:
            raise ValueError(f'{self._lookup_name} "{self.name}": expected 1 weight (idf_weights), got {len(weights)}')
        self.idf_weights = np.asarray(weights[0], np.float32)

    def _config(self):
        def listed(v):
            return np.asarray(v).tolist() if isinstance(v, np.ndarray) else v

        return {"invert": self.invert, "max_tokens": self.max_tokens, "num_oov_indices": self.num_oov_indices,
                "oov_token": self.oov_token, "mask_token": self.mask_token, "output_mode": self.output_mode,
                "sparse": self.sparse, "pad_to_max_tokens": self.pad_to_max_tokens,
                "vocabulary_dtype": self.vocabulary_dtype, "idf_weights": listed(self.input_idf_weights),
                "vocabulary": listed(self.input_vocabulary), "vocabulary_size": self._frozen_vocab_size,
                "oov_method": self.oov_method, "salt": self.salt}
