"""keras.layers.TextVectorization: strings standardized (lowercased, punctuation stripped),
split into tokens (whitespace or characters), joined into ngrams, and looked up in a vocabulary
(a StringLookup with mask token "" at index 0), as int sequences or one/multi-hot, count and
tf_idf vectors."""
import re

import numpy as np

from mdtrain.keras.layers.preprocessing.preprocessing_layer import (PREPROCESSING_CLASSES, PreprocessingLayer,
                                                                    as_bytes_array)
from mdtrain.keras.layers.preprocessing.string_lookup import StringLookup

# Keras's punctuation class (",-\." is the range from "," to ".", so "-" too).
_PUNCTUATION = re.compile(rb'[!"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~\']')
_STANDARDIZE = ("lower_and_strip_punctuation", "lower", "strip_punctuation")
_SPLIT = ("whitespace", "character")


def _ngrams(tokens, widths):
    """tf.strings.ngrams(tokens, widths, separator=" "): every ngram of each width, widths in order."""
    out = []
    for n in widths:
        out.extend(b" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
    return out


class TextVectorization(PreprocessingLayer):
    def __init__(self, max_tokens=None, standardize="lower_and_strip_punctuation", split="whitespace", ngrams=None,
                 output_mode="int", output_sequence_length=None, pad_to_max_tokens=False, vocabulary=None,
                 idf_weights=None, sparse=False, ragged=False, encoding="utf-8", name=None, **kwargs):
        if not (standardize is None or callable(standardize) or standardize in _STANDARDIZE):
            raise ValueError(f"TextVectorization: standardize must be one of {_STANDARDIZE}, None or a callable, "
                             f"got {standardize!r}")
        if not (split is None or callable(split) or split in _SPLIT):
            raise ValueError(f"TextVectorization: split must be one of {_SPLIT}, None or a callable, got {split!r}")
        if not (ngrams is None or isinstance(ngrams, int) or
                (isinstance(ngrams, (tuple, list)) and all(isinstance(n, int) for n in ngrams))):
            raise ValueError(f"`ngrams` must be None, an integer, or a tuple of integers. Received: ngrams={ngrams}")
        output_mode = {"binary": "multi_hot", "tf-idf": "tf_idf"}.get(output_mode, output_mode)
        if not (output_sequence_length is None or isinstance(output_sequence_length, int)):
            raise ValueError("`output_sequence_length` must be either None or an integer when `output_mode` is "
                             f"'int'. Received: output_sequence_length={output_sequence_length}")
        if output_mode != "int" and output_sequence_length is not None:
            raise ValueError("`output_sequence_length` must not be set if `output_mode` is not 'int'. Received "
                             f"output_sequence_length={output_sequence_length}.")
        if ragged:
            raise ValueError("TextVectorization: ragged=True is not supported (mdtrain has no ragged tensors); the "
                             "int output is padded with 0 instead")
        has_input_vocabulary = kwargs.pop("has_input_vocabulary", vocabulary is not None)
        vocabulary_size = kwargs.pop("vocabulary_size", None)
        kwargs.pop("dtype", None)
        super().__init__(name=name, **kwargs)
        self._lookup = StringLookup(max_tokens=max_tokens, vocabulary=vocabulary, idf_weights=idf_weights,
                                    pad_to_max_tokens=pad_to_max_tokens, mask_token="", output_mode=output_mode,
                                    sparse=sparse, has_input_vocabulary=has_input_vocabulary, encoding=encoding,
                                    vocabulary_size=vocabulary_size)
        self._standardize = standardize
        self._split = split
        self._ngrams_arg = tuple(ngrams) if isinstance(ngrams, list) else ngrams
        self._ngrams = tuple(range(1, ngrams + 1)) if isinstance(ngrams, int) else self._ngrams_arg
        self._output_mode = output_mode
        self._output_sequence_length = output_sequence_length
        self._encoding = encoding
        self._built = True

    @property
    def dtype(self):
        return self._lookup.dtype

    def get_vocabulary(self, include_special_tokens=True):
        return self._lookup.get_vocabulary(include_special_tokens)

    def vocabulary_size(self):
        return self._lookup.vocabulary_size()

    def set_vocabulary(self, vocabulary, idf_weights=None):
        self._lookup.set_vocabulary(vocabulary, idf_weights)

    def get_weights(self):
        return self._lookup.get_weights()

    def set_weights(self, weights):
        self._lookup.set_weights(weights)

    # ---- strings to tokens ---------------------------------------------------------------------
    def _rows(self, x):
        """The tokens of each input string (a list of lists of bytes), or the strings themselves
        (a 1-element list each) without split."""
        owner = f'TextVectorization "{self.name}"'
        if x.dtype.kind not in "OSU":
            raise TypeError(f"{owner} takes strings, got an array of dtype {x.dtype}")
        x = as_bytes_array(x)
        if self._standardize in ("lower", "lower_and_strip_punctuation"):
            x = np.vectorize(bytes.lower, otypes=[object])(x) if x.size else x
        if self._standardize in ("strip_punctuation", "lower_and_strip_punctuation"):
            x = np.vectorize(lambda s: _PUNCTUATION.sub(b"", s), otypes=[object])(x) if x.size else x
        if callable(self._standardize):
            x = as_bytes_array(np.asarray(self._standardize(x), dtype=object))
        if self._split is None:
            return None, x
        if x.ndim > 1:
            if x.shape[-1] != 1:
                raise ValueError("When using `TextVectorization` to tokenize strings, the input rank must be 1 or "
                                 f"the last shape dimension must be 1. Received: inputs.shape={x.shape} with "
                                 f"rank={x.ndim}")
            x = x[..., 0]
        if x.ndim != 1:
            x = x.reshape(-1)
        if self._split == "whitespace":
            rows = [s.split() for s in x]
        elif self._split == "character":
            rows = [[c.encode("utf-8") for c in s.decode("utf-8")] for s in x]
        else:
            rows = [[v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in row]
                    for row in self._split(x)]
        if self._ngrams is not None:
            rows = [_ngrams(row, self._ngrams) for row in rows]
        return rows, None

    def adapt(self, data, batch_size=None, steps=None):
        """Learns the vocabulary of the tokens of data (see StringLookup.adapt)."""
        self._lookup._adapt(data, steps, self._count_tokens)

    def _count_tokens(self, batch):
        lookup = self._lookup
        rows, whole = self._rows(batch)
        if rows is None:
            lookup._update_counts(whole)
            return
        for row in rows:
            lookup._token_counts.update(row)
        if self._output_mode == "tf_idf":
            for row in rows:
                lookup._document_counts.update(set(row))
            lookup._num_documents += len(rows)

    # ---- call ----------------------------------------------------------------------------------
    def _compute(self, x, training):
        rows, whole = self._rows(x)
        if rows is None:
            return self._lookup.call_numpy(whole)
        width = max([len(r) for r in rows] + [0])
        if self._output_mode == "int" and self._output_sequence_length is not None:
            width = self._output_sequence_length
        # Padding with the mask token "": index 0 in int mode, dropped from the encoded modes.
        padded = np.full((len(rows), width), b"", dtype=object)
        for i, row in enumerate(rows):
            row = row[:width]
            padded[i, :len(row)] = row
        return self._lookup.call_numpy(padded)

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        if self._output_mode == "int":
            return (input_shape[0], self._output_sequence_length)
        return self._lookup.compute_output_shape(input_shape[:1] + (None,))

    def _config(self):
        lookup = self._lookup
        return {"max_tokens": lookup.max_tokens, "standardize": self._standardize, "split": self._split,
                "ngrams": self._ngrams_arg, "output_mode": self._output_mode,
                "output_sequence_length": self._output_sequence_length,
                "pad_to_max_tokens": lookup.pad_to_max_tokens, "sparse": lookup.sparse, "ragged": False,
                "vocabulary": lookup._config()["vocabulary"], "idf_weights": lookup._config()["idf_weights"],
                "encoding": self._encoding, "vocabulary_size": self.vocabulary_size()}


PREPROCESSING_CLASSES["TextVectorization"] = TextVectorization
