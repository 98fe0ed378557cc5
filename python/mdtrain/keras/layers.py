"""keras.layers: thin Python handles on C++ layers (weights and math live in C++)."""
import json

import numpy as np

from mdtrain import _core, _random
from mdtrain.keras import _naming
from mdtrain.keras._serialization import dumps, to_config

_BASE_KWARGS = {"name", "input_shape", "input_dim", "batch_input_shape", "batch_size", "dtype", "trainable"}


def _shape_tuple(shape, argname, owner):
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        shape = tuple(None if d is None else int(d) for d in shape)
    except (TypeError, ValueError):
        raise TypeError(f"{owner}: {argname} must be a tuple of integers, got {shape!r}") from None
    for d in shape:
        if d is not None and d <= 0:
            raise ValueError(f"{owner}: {argname} must contain positive dimensions, got {shape}")
    return shape


class Layer:
    """Base of the layers. Subclasses create self._core (a C++ layer) in __init__."""

    def __init__(self, name=None, input_shape=None, input_dim=None, batch_input_shape=None, dtype=None,
                 trainable=True, **kwargs):
        if kwargs:
            raise TypeError(f"Unrecognized keyword arguments passed to {type(self).__name__}: {kwargs}")
        if dtype not in (None, "float32", np.float32):
            raise ValueError(f"{type(self).__name__}: only dtype='float32' is supported for now, got {dtype!r}")
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"{type(self).__name__}: name must be a non-empty string, got {name!r}")
        self._name = name or _naming.unique_name(_naming.to_snake_case(type(self).__name__))
        self._declared_input_shape = None
        if batch_input_shape is not None:
            self._declared_input_shape = _shape_tuple(batch_input_shape, "batch_input_shape", self._name)[1:]
        elif input_shape is not None:
            self._declared_input_shape = _shape_tuple(input_shape, "input_shape", self._name)
        elif input_dim is not None:
            self._declared_input_shape = _shape_tuple((input_dim,), "input_dim", self._name)
        self.trainable = trainable
        self._core = None

    @property
    def name(self):
        return self._name

    @property
    def built(self):
        return self._core.built

    @property
    def input_shape(self):
        return (None, *self._core.input_shape) if self.built else None

    @property
    def output_shape(self):
        return (None, *self._core.output_shape) if self.built else None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], *self._core.compute_output_shape(list(input_shape[1:])))

    def get_weights(self):
        return list(self._core.get_weights())

    def set_weights(self, weights):
        self._core.set_weights([np.ascontiguousarray(w, dtype=np.float32) for w in weights])

    @property
    def weights(self):
        return self.get_weights()

    @property
    def trainable_weights(self):
        return self.get_weights() if self.trainable else []

    @property
    def non_trainable_weights(self):
        return [] if self.trainable else self.get_weights()

    def count_params(self):
        if not self.built:
            raise ValueError(f"You tried to call `count_params` on layer '{self.name}', but the layer isn't built.")
        return self._core.count_params()

    def get_config(self):
        config = json.loads(self._core.config_json())
        if self._declared_input_shape is not None:
            config["batch_input_shape"] = (None, *self._declared_input_shape)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config.pop("dtype", None)
        bis = config.pop("batch_input_shape", None)
        if bis is not None:
            config["input_shape"] = tuple(bis[1:])
        return cls(**config)

    @classmethod
    def _wrap(cls, core_layer):
        """A Python handle on an existing C++ layer (a loaded model's)."""
        layer = cls.__new__(cls)
        layer._name = core_layer.name
        layer._declared_input_shape = None
        layer.trainable = True
        layer._core = core_layer
        return layer

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"


def _activation_name(activation, owner):
    if activation is None:
        return "linear"
    if callable(activation) and hasattr(activation, "__name__"):
        activation = activation.__name__
    if not isinstance(activation, str):
        raise TypeError(f"{owner}: activation must be a name such as 'relu' or None, got {activation!r}")
    try:
        return _core.parse_activation(activation)
    except ValueError as e:
        raise ValueError(f"{owner}: {e}") from None


class Dense(Layer):
    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(units, bool) or not isinstance(units, (int, np.integer)) or units <= 0:
            raise ValueError(f"Received an invalid value for `units`, expected a positive integer. Received: units={units!r}")
        for arg, value in (("activity_regularizer", activity_regularizer), ("kernel_constraint", kernel_constraint),
                           ("bias_constraint", bias_constraint)):
            if value is not None:
                raise NotImplementedError(f"Dense: {arg} is not supported yet")
        self._core = _core.Dense(
            self._name, int(units), _activation_name(activation, f'Dense "{self._name}"'), bool(use_bias),
            dumps(to_config(kernel_initializer, "initializer")), dumps(to_config(bias_initializer, "initializer")),
            dumps(to_config(kernel_regularizer, "regularizer")), dumps(to_config(bias_regularizer, "regularizer")))
        self.units = int(units)

    @property
    def kernel(self):
        return self.get_weights()[0]

    @property
    def bias(self):
        w = self.get_weights()
        return w[1] if len(w) > 1 else None

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        layer.units = json.loads(core_layer.config_json())["units"]
        return layer


class Activation(Layer):
    def __init__(self, activation, **kwargs):
        super().__init__(**kwargs)
        self._core = _core.Activation(self._name, _activation_name(activation, f'Activation "{self._name}"'))


class Flatten(Layer):
    def __init__(self, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self._core = _core.Flatten(self._name)


class Dropout(Layer):
    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(rate, (int, float)) or not 0 <= rate < 1:
            raise ValueError(f"Invalid value received for argument `rate`. Expected a float value between 0 and 1. Received: rate={rate!r}")
        if noise_shape is not None:
            raise NotImplementedError("Dropout: noise_shape is not supported yet")
        self.rate = float(rate)
        self._core = _core.Dropout(self._name, self.rate, _random.draw_seed() if seed is None else int(seed))


class InputLayer:
    """Declares the input shape of a Sequential model (not a layer of its own in model.layers)."""

    def __init__(self, shape=None, batch_size=None, dtype=None, name=None, input_shape=None, **kwargs):
        shape = shape if shape is not None else input_shape
        if shape is None:
            raise ValueError("InputLayer: `shape` is required, e.g. InputLayer(shape=(784,))")
        self.shape = _shape_tuple(shape, "shape", "InputLayer")
        if any(d is None for d in self.shape):
            raise ValueError(f"InputLayer: every dimension of `shape` must be known, got {self.shape}")
        self.name = name or _naming.unique_name("input_layer")
        self.batch_size = batch_size


def Input(shape=None, batch_size=None, dtype=None, name=None, **kwargs):
    """keras.Input: here the declaration of a Sequential model's input shape."""
    return InputLayer(shape=shape, batch_size=batch_size, dtype=dtype, name=name, **kwargs)


_CLASSES = {"Dense": Dense, "Activation": Activation, "Flatten": Flatten, "Dropout": Dropout}


def _wrap_core_layer(core_layer):
    cls = _CLASSES.get(core_layer.class_name)
    if cls is None:
        raise ValueError(f"no Python class for layer type {core_layer.class_name}")
    return cls._wrap(core_layer)
