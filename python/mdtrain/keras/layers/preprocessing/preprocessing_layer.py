"""The base of the preprocessing layers (Keras 3's keras.layers.Rescaling, StringLookup, ...).

Unlike the other layers, a preprocessing layer has no C++ layer: it transforms data on the host
(strings, vocabularies, hashing and resizing are input work, not part of the differentiable
step), so it runs on NumPy arrays. Called on a NumPy array, a list or a tensor it returns an
eager tensor (strings as TF's: object arrays of bytes), so it works inside
`mdtrain.data.Dataset.map` as in Keras; a model whose first layers are preprocessing layers runs
them on each batch before the C++ step (models.py).
"""
import numpy as np

from mdtrain import _random
from mdtrain._eager.tensor import EagerTensor, wrap
from mdtrain.keras import _keras_tensor, _naming

_STRING_KINDS = "OSU"

# The preprocessing layer classes by Keras name. Kept apart from base_layer._CLASSES, which
# holds the classes of C++ layers (what load_model and the ONNX export resolve).
PREPROCESSING_CLASSES = {}


def as_array(inputs, owner):
    """`inputs` (a tensor, NumPy array, list or scalar) as a NumPy array."""
    if isinstance(inputs, EagerTensor):
        return np.asarray(inputs)
    if isinstance(inputs, (dict, set)):
        raise TypeError(f"{owner}: expected an array or a tensor, got a {type(inputs).__name__}")
    try:
        return np.asarray(inputs)
    except ValueError as e:  # ragged lists
        raise ValueError(f"{owner}: inputs must be a rectangular array (ragged inputs are not supported): {e}") \
            from None


def is_string_array(array):
    return array.dtype.kind in _STRING_KINDS


def as_bytes_array(array):
    """A string array as an object array of bytes (TF's strings; str is encoded as UTF-8)."""
    out = np.empty(array.shape, dtype=object)
    flat = out.reshape(-1)
    for k, v in enumerate(array.reshape(-1)):
        flat[k] = v.encode("utf-8") if isinstance(v, str) else bytes(v)
    return out


def batches_of(data, owner, steps=None, lists_are_batches=False):
    """The batches adapt() reads: a Dataset's elements (the first component of (x, y) pairs), an
    iterable's items, or one array (a NumPy array, a tensor, or a list unless lists_are_batches)
    as a single batch."""
    if isinstance(data, (np.ndarray, EagerTensor)) or (isinstance(data, (list, tuple)) and not lists_are_batches):
        return [as_array(data, owner)]
    if not hasattr(data, "__iter__"):
        raise TypeError(f"{owner}: adapt() takes a NumPy array, a tensor, a Dataset or an iterable of batches, "
                        f"got {type(data).__name__}")

    def read():
        for k, batch in enumerate(data):
            if steps is not None and k >= steps:
                return
            if isinstance(batch, tuple):
                batch = batch[0]
            yield as_array(batch, owner)

    return read()


def not_in_a_model(layer, what):
    """The error for a preprocessing layer put in a model: fit runs a model's layers in the C++ step,
    where no host preprocessing runs yet."""
    return NotImplementedError(f'Layer "{layer.name}" ({type(layer).__name__}) {what}: preprocessing layers cannot '
                               "be part of a model in mdtrain yet; apply them to the data instead "
                               "(dataset.map(layer), or layer(x) before fit)")


class PreprocessingLayer:
    """A layer computed on the host in NumPy. Subclasses define `_compute(x, training)` on a NumPy
    array and `_config()` (their own arguments as Keras writes them)."""

    # Augmentation layers (Random*) change their inputs only in training.
    _augments = False
    _output_dtype = "float32"

    def __init__(self, name=None, dtype=None, trainable=True, **kwargs):
        kwargs.pop("autocast", None)
        if kwargs:
            raise TypeError(f"Unrecognized keyword arguments passed to {type(self).__name__}: {kwargs}")
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"{type(self).__name__}: name must be a non-empty string, got {name!r}")
        self._name = name or _naming.unique_name(_naming.to_snake_case(type(self).__name__))
        if isinstance(dtype, dict):  # a DTypePolicy's config
            dtype = dtype.get("config", {}).get("name")
        self._dtype = None if dtype is None else np.dtype(dtype).name if dtype != "string" else "string"
        self.trainable = trainable
        self._built = False
        self._core = None

    @property
    def name(self):
        return self._name

    @property
    def dtype(self):
        return self._dtype or self._output_dtype

    @property
    def built(self):
        return self._built

    def build(self, input_shape=None):
        self._built = True

    def _owner(self):
        return self._model() if getattr(self, "_model", None) is not None else None

    # A preprocessing layer has no trainable weights; the ones that keep state (Normalization's
    # statistics, IndexLookup's idf weights) override get_weights / set_weights.
    def get_weights(self):
        return []

    def set_weights(self, weights):
        if list(weights):
            raise ValueError(f"Layer {self.name} ({type(self).__name__}) has no weights, got {len(weights)}")

    @property
    def variables(self):
        return []

    weights = trainable_variables = trainable_weights = non_trainable_variables = non_trainable_weights = variables

    @property
    def losses(self):
        return []

    def count_params(self):
        return sum(int(np.size(w)) for w in self.get_weights())

    def __call__(self, inputs, training=None, **kwargs):
        if kwargs:
            raise TypeError(f'Layer "{self.name}" ({type(self).__name__}) was called with unexpected keyword '
                            f"arguments {sorted(kwargs)}; it takes inputs and training")
        if _keras_tensor.is_symbolic(inputs):
            raise not_in_a_model(self, "was called on a symbolic tensor")
        return wrap(self.call_numpy(inputs, training=training))

    def call_numpy(self, inputs, training=None):
        """The layer on `inputs`, as a NumPy array (what fit runs on each batch)."""
        x = as_array(inputs, f'Layer "{self.name}" ({type(self).__name__})')
        if not self._built:
            self.build(x.shape)
        if self._augments and not training:
            return x
        return np.asarray(self._compute(x, bool(training)))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable, "dtype": self.dtype}
        config.update(self._config())
        return config

    def _config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"


class SeededLayer(PreprocessingLayer):
    """An augmentation layer: random in training only, its draws from a NumPy generator seeded by
    `seed` (or, without one, by mdtrain's seed source, so keras.utils.set_random_seed fixes it)."""

    _augments = True

    def __init__(self, seed=None, **kwargs):
        super().__init__(**kwargs)
        if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool)):
            raise TypeError(f"{type(self).__name__}: seed must be an integer or None, got {seed!r}")
        self.seed = None if seed is None else int(seed)
        self._rng = np.random.default_rng(self.seed if self.seed is not None else _random.draw_mask_seed())

    def get_config(self):
        config = super().get_config()
        config["seed"] = self.seed
        return config
