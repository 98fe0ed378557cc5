"""The base of keras.layers: Layer, a thin Python handle on a C++ layer (weights and math live in
C++), and the registry of layer classes by Keras name (_CLASSES) that configs and files resolve.

Each layer checks its arguments here (Keras's messages), writes its Keras config and has C++
build the layer from it (_core.layer_from_config): the same path a model file takes, so a layer
made in Python and one loaded from a file cannot differ.
"""
import json

import numpy as np

from mdtrain import _core, _random
from mdtrain.keras import _keras_tensor, _naming
from mdtrain.keras._serialization import dumps

_BASE_KWARGS = {"name", "input_shape", "input_dim", "batch_input_shape", "batch_size", "dtype", "trainable"}

# Every layer class by its Keras name; each module of this package adds its own.
_CLASSES = {}


def _keras_layers():
    from mdtrain._eager import keras_layers  # here: mdtrain._eager imports keras lazily too

    return keras_layers


def _core_layer(class_name, config):
    """The C++ layer of a Keras config ({"name": ..., fields}; C++ checks the values)."""
    return _core.layer_from_config(dumps({"class_name": class_name, "config": config}))


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

    # True for a layer whose inputs are integer indices (Embedding): a model starting with one
    # converts x to int32 instead of float32, and it must be the first layer.
    _reads_indices = False

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
        self._trainable = _trainable_flag(trainable, self._name)
        self._core = None

    # The C++ layer. Setting it hands it the Python-side trainable flag (subclasses make it after
    # Layer.__init__ has read the trainable argument).
    @property
    def _core(self):
        return self.__dict__.get("_core_layer")

    @_core.setter
    def _core(self, core):
        self.__dict__["_core_layer"] = core
        self._hand_trainable_to_core()

    def _hand_trainable_to_core(self):
        core = self.__dict__.get("_core_layer")
        if core is not None and hasattr(core, "trainable"):
            core.trainable = self.trainable

    @property
    def trainable(self):
        """Keras's layer.trainable. False freezes the layer: the optimizer leaves its weights alone,
        they add no weight penalty, and a BatchNormalization normalizes with its moving statistics
        in training too. As in Keras, a model applies a change when it is compiled again."""
        return getattr(self, "_trainable", True)

    @trainable.setter
    def trainable(self, value):
        self._trainable = _trainable_flag(value, self.name)
        self._hand_trainable_to_core()

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

    @property
    def output(self):
        """The symbolic output of the layer's call in a functional model, or of its place in a built
        model (Keras's layer.output): what keras.Model(inputs, outputs) takes for feature extraction."""
        return self._connection("output").output

    @property
    def input(self):
        """The symbolic input of that call (a list for a merge layer)."""
        inputs = self._connection("input").inputs
        return inputs[0] if len(inputs) == 1 else list(inputs)

    def _connection(self, what):
        node = getattr(self, "_output_node", None)
        if node is None:
            model = self._owner()
            if model is not None and model.built:
                model._symbolic_io()  # a Sequential or loaded model's layers get theirs from its graph
                node = getattr(self, "_output_node", None)
        if node is None:
            raise AttributeError(f"The layer {self.name} has never been called and thus has no defined {what}.")
        return node

    def compute_output_shape(self, input_shape):
        return (input_shape[0], *self._core.compute_output_shape(list(input_shape[1:])))

    def build(self, input_shape):
        """Creates the layer's weights for inputs of input_shape (batch axis included, as in
        Keras: build((None, 784))), drawn from the seed stream as a first call would draw them.
        Building a built layer again for the same shape does nothing; for another shape, or a
        layer of a model that is not built yet, it is a ValueError."""
        if isinstance(input_shape, (list, tuple)) and input_shape and isinstance(input_shape[0], (list, tuple)):
            raise NotImplementedError(f"{type(self).__name__} \"{self.name}\": build() with several input shapes "
                                      "is not supported; call the layer on its inputs instead")
        shape = _shape_tuple(input_shape, "input_shape", self.name)
        if len(shape) < 2:
            raise ValueError(f"{type(self).__name__} \"{self.name}\": build() takes the input shape with its batch "
                             f"axis, e.g. (None, {shape[0] if shape else 4}), got {input_shape!r}")
        features = list(shape[1:])
        if self.built:
            if tuple(self._core.input_shape) != tuple(features):
                raise ValueError(f"{type(self).__name__} \"{self.name}\" is already built for input shape "
                                 f"{self.input_shape}, not {tuple(shape)}")
            return
        model = self._owner()
        if model is not None:
            raise ValueError(f"Layer '{self.name}' belongs to model '{model.name}', which is not built yet: build "
                             "the model instead.")

        def build(seed):
            _core.tape_build_layer(self._core, features, seed)
            return bool(self._core.weight_names())  # a layer without weights keeps the seed undrawn

        _random.build_with_seed(build)

    def _owner(self):
        """The model this layer belongs to (None when it is on its own)."""
        return self._model() if getattr(self, "_model", None) is not None else None

    def get_weights(self):
        # The layer holds the model's host weights: after training on GPUs they are refreshed
        # from the replicas when read, not after every step.
        model = self._owner()
        if model is not None:
            model._core.refresh_weights()
        return list(self._core.get_weights())

    def set_weights(self, weights):
        model = self._owner()
        if model is not None:
            model._core.refresh_weights()
        self._core.set_weights([np.ascontiguousarray(w, dtype=np.float32) for w in weights])
        # The layer object is replica 0's; a model training on several replicas copies the new
        # values to the others, or they would diverge.
        if model is not None:
            model._core.set_weights(model._core.get_weights())

    # Weights as variables (views of the C++ weights: reading copies them, assign writes them),
    # the objects GradientTape and optimizer.apply_gradients take (docs/eager.md).
    @property
    def variables(self):
        return _keras_layers().layer_variables(self)

    weights = variables

    @property
    def trainable_variables(self):
        return [v for v in self.variables if v.trainable]

    trainable_weights = trainable_variables

    @property
    def non_trainable_variables(self):
        """Weights the optimizer never updates (BatchNormalization's moving statistics), or all of
        them when the layer is not trainable."""
        return [v for v in self.variables if not v.trainable]

    non_trainable_weights = non_trainable_variables

    @property
    def losses(self):
        """The layer's weight penalty as a list of one scalar tensor (empty without regularizers)."""
        return _keras_layers().layer_losses(self)

    def __call__(self, inputs, training=None, **kwargs):
        """The layer on an eager tensor (recorded by GradientTape; builds a layer of no model), or on
        KerasTensors: a node of a functional model (_keras_tensor.call_symbolic)."""
        _refuse_call_kwargs(self, kwargs)
        if _keras_tensor.is_symbolic(inputs):
            return _keras_tensor.call_symbolic(self, inputs)
        return _keras_layers().call_layer(self, inputs, training)

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
        layer._trainable = bool(getattr(core_layer, "trainable", True))
        layer._core = core_layer
        return layer

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"


def _trainable_flag(value, owner):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"Layer '{owner}': trainable must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


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


class _KernelBias:
    """The kernel and (when use_bias) bias of Dense and Conv2D: their first two weights."""

    @property
    def kernel(self):
        return self.get_weights()[0]

    @property
    def bias(self):
        w = self.get_weights()
        return w[1] if len(w) > 1 else None


def _refuse_call_kwargs(layer, kwargs):
    """Keras passes other call arguments (mask=...) on to call(); mdtrain's layers take none, so
    they are refused rather than dropped."""
    if kwargs:
        raise TypeError(f'Layer "{layer.name}" ({type(layer).__name__}) was called with unexpected keyword arguments '
                        f"{sorted(kwargs)}; it takes inputs and training"
                        + (" (masks come from a Masking or Embedding(mask_zero=True) layer)" if "mask" in kwargs
                           else ""))


def _wrap_core_layer(core_layer):
    cls = _CLASSES.get(core_layer.class_name)
    if cls is None:
        raise ValueError(f"no Python class for layer type {core_layer.class_name}")
    return cls._wrap(core_layer)
