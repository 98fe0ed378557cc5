"""keras.layers: thin Python handles on C++ layers (weights and math live in C++).

Each layer checks its arguments here (Keras's messages), writes its Keras config and has C++
build the layer from it (_core.layer_from_config): the same path a model file takes, so a layer
made in Python and one loaded from a file cannot differ.
"""
import json

import numpy as np

from mdtrain import _core, _random
from mdtrain.keras import _keras_tensor, _naming
from mdtrain.keras._serialization import dumps, to_config

_BASE_KWARGS = {"name", "input_shape", "input_dim", "batch_input_shape", "batch_size", "dtype", "trainable"}


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


class _KernelBias:
    """The kernel and (when use_bias) bias of Dense and Conv2D: their first two weights."""

    @property
    def kernel(self):
        return self.get_weights()[0]

    @property
    def bias(self):
        w = self.get_weights()
        return w[1] if len(w) > 1 else None


class Dense(_KernelBias, Layer):
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
        self._core = _core_layer("Dense", {
            "name": self._name, "units": int(units), "activation": _activation_name(activation, f'Dense "{self._name}"'),
            "use_bias": bool(use_bias), "kernel_initializer": to_config(kernel_initializer, "initializer"),
            "bias_initializer": to_config(bias_initializer, "initializer"),
            "kernel_regularizer": to_config(kernel_regularizer, "regularizer"),
            "bias_regularizer": to_config(bias_regularizer, "regularizer")})
        self.units = int(units)

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        layer.units = json.loads(core_layer.config_json())["units"]
        return layer


class Activation(Layer):
    def __init__(self, activation, **kwargs):
        super().__init__(**kwargs)
        self._core = _core_layer("Activation", {
            "name": self._name, "activation": _activation_name(activation, f'Activation "{self._name}"')})


def _refuse_call_kwargs(layer, kwargs):
    """Keras passes other call arguments (mask=...) on to call(); mdtrain's layers take none, so
    they are refused rather than dropped."""
    if kwargs:
        raise TypeError(f'Layer "{layer.name}" ({type(layer).__name__}) was called with unexpected keyword arguments '
                        f"{sorted(kwargs)}; it takes inputs and training"
                        + (" (masks come from a Masking or Embedding(mask_zero=True) layer)" if "mask" in kwargs
                           else ""))


class Flatten(Layer):
    def __init__(self, data_format=None, **kwargs):
        # channels_first would flatten in another order (Keras moves the channels last first);
        # mdtrain's images are channels_last only.
        if data_format not in (None, "channels_last"):
            raise ValueError(f"Flatten: data_format={data_format!r} is not supported (only 'channels_last', as the "
                             "convolutions)")
        super().__init__(**kwargs)
        self._core = _core_layer("Flatten", {"name": self._name})


class Dropout(Layer):
    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(rate, (int, float)) or not 0 <= rate < 1:
            raise ValueError(f"Invalid value received for argument `rate`. Expected a float value between 0 and 1. Received: rate={rate!r}")
        if noise_shape is not None:
            raise NotImplementedError("Dropout: noise_shape is not supported yet")
        self.rate = float(rate)
        self._core = _core_layer("Dropout", {"name": self._name, "rate": self.rate,
                                             # its own stream: a Dropout shifts no weights' seeds
                                             "seed": _random.draw_mask_seed() if seed is None else int(seed)})


class Masking(Layer):
    """keras.layers.Masking(mask_value=0.0): on (batch, timesteps, ...) a step whose values all equal
    mask_value is padding: it is zeroed in the output, and the layers after it see a mask
    (batch, timesteps) (recurrent layers skip those steps; nn/masking.h). CPU only."""

    def __init__(self, mask_value=0.0, **kwargs):
        super().__init__(**kwargs)
        if isinstance(mask_value, bool) or not isinstance(mask_value, (int, float, np.integer, np.floating)):
            raise ValueError(f'Masking "{self._name}": mask_value must be a number, got {mask_value!r}')
        self._core = _core_layer("Masking", {"name": self._name, "mask_value": float(mask_value)})
        self.mask_value = float(mask_value)
        self.supports_masking = True

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        layer.mask_value = json.loads(core_layer.config_json())["mask_value"]
        layer.supports_masking = True
        return layer


# Keras's supports_masking layers that hand the mask on unchanged (nn/sequence_mask.cpp passes_mask).
_PASSES_MASK = ("Dense", "Dropout", "Activation", "LayerNormalization")


def mask_after(layer, mask_source):
    """Keras's mask propagation, as nn/layer_stack.cpp runs it: the name of the layer whose mask the
    output of `layer` carries, given the one its input carries (None: no mask). Embedding(mask_zero)
    and Masking make one; recurrent layers and Bidirectional read it and keep it with
    return_sequences; Dense, Dropout, Activation, LayerNormalization pass it on; the other layers
    drop it, as Keras's (Flatten, Reshape, ...). BatchNormalization would use it in Keras (moments
    over the kept steps only): refused."""
    if getattr(layer, "mask_zero", False) or isinstance(layer, Masking):
        return layer.name
    if mask_source is None:
        return None
    if getattr(layer, "_would_read_mask", False):
        return mask_source if _returns_sequences(layer) else None
    name = type(layer).__name__
    if name == "BatchNormalization":
        raise NotImplementedError(f'BatchNormalization layer "{layer.name}" receives the mask of "{mask_source}": '
                                  "Keras would compute its moments over the unmasked steps only, which mdtrain "
                                  "does not do yet")
    return mask_source if name in _PASSES_MASK else None


def _returns_sequences(layer):
    if isinstance(layer, Bidirectional):
        return bool(json.loads(layer._core.config_json())["layer"]["config"].get("return_sequences", False))
    return bool(layer.return_sequences)


class InputLayer:
    """Declares the input shape of a Sequential model (not a layer of its own in model.layers)."""

    def __init__(self, shape=None, batch_size=None, dtype=None, name=None, input_shape=None, batch_shape=None,
                 sparse=None, **kwargs):
        if kwargs:
            raise TypeError(f"InputLayer: unexpected keyword arguments {sorted(kwargs)}")
        if sparse:
            raise NotImplementedError("InputLayer: sparse=True is not supported (inputs are dense arrays)")
        if dtype is not None:
            try:
                kind = np.dtype(dtype).kind
            except TypeError:
                kind = None
            if kind not in ("f", "i", "u"):  # the model converts inputs for its first layer
                raise ValueError(f"InputLayer: dtype must be a numeric dtype, got {dtype!r}")
        if batch_shape is not None:
            if shape is not None or input_shape is not None:
                raise ValueError("InputLayer: give shape or batch_shape, not both")
            batch_shape = tuple(batch_shape)
            if not batch_shape:
                raise ValueError("InputLayer: batch_shape needs a batch axis, got ()")
            batch_size = batch_shape[0] if batch_size is None else batch_size
            shape = batch_shape[1:]
        shape = shape if shape is not None else input_shape
        if shape is None:
            raise ValueError("InputLayer: `shape` is required, e.g. InputLayer(shape=(784,))")
        self.shape = _shape_tuple(shape, "shape", "InputLayer")
        if any(d is None for d in self.shape):
            raise ValueError(f"InputLayer: every dimension of `shape` must be known, got {self.shape}")
        self.name = name or _naming.unique_name("input_layer")
        self.batch_size = batch_size


Input = _keras_tensor.Input


_CLASSES = {"Dense": Dense, "Activation": Activation, "Flatten": Flatten, "Dropout": Dropout, "Masking": Masking}


def _wrap_core_layer(core_layer):
    cls = _CLASSES.get(core_layer.class_name)
    if cls is None:
        raise ValueError(f"no Python class for layer type {core_layer.class_name}")
    return cls._wrap(core_layer)


# ---- convolutional layers (C++: nn/conv2d, nn/pooling2d, nn/global_average_pooling2d, nn/reshape) ----
# The C++ layers check every argument (counts, signs, padding, data_format) with messages naming the
# layer; Python only turns Keras's argument forms (an int for a pair, None for defaults) into lists.

def _keras_default_name(kwargs, prefix):
    """Keras names these conv2d, max_pooling2d, ... (its snake case keeps "2d" in one piece)."""
    if kwargs.get("name") is None:
        kwargs["name"] = _naming.unique_name(prefix)


def _int_pair(value, argname, layer_name):
    """Keras's standardize_tuple: an int n is (n, n); anything else must be a sequence of ints."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return [int(value)] * 2
    message = f'layer "{layer_name}": The `{argname}` argument must be a tuple of 2 integers. Received {argname}={value!r}'
    if isinstance(value, str):
        raise ValueError(message)
    try:
        items = tuple(value)
    except TypeError:
        raise ValueError(message) from None
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{message} including element {v!r} of type {type(v)}")
    return [int(v) for v in items]


def _string_arg(value, argname, layer_name, default=None):
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise ValueError(f'layer "{layer_name}": The `{argname}` argument must be a string. Received {argname}={value!r}')
    return value


def _set_attributes_from_config(layer, names):
    config = json.loads(layer._core.config_json())
    for name in names:
        value = config[name]
        setattr(layer, name, tuple(value) if isinstance(value, list) else value)


class Conv2D(_KernelBias, Layer):
    """keras.layers.Conv2D on channels_last images; kernel (kh, kw, in_channels, filters)."""
    _CONFIG_ATTRIBUTES = ("filters", "kernel_size", "strides", "padding", "data_format", "dilation_rate", "use_bias")

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None, dilation_rate=(1, 1),
                 groups=1, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, **kwargs):
        _keras_default_name(kwargs, "conv2d")
        super().__init__(**kwargs)
        name = self._name
        if isinstance(filters, bool) or not isinstance(filters, (int, np.integer)):
            raise ValueError(f'layer "{name}": Invalid value for argument `filters`. Expected a strictly positive '
                             f"value. Received filters={filters!r}.")
        if groups != 1:
            raise NotImplementedError(f'Conv2D "{name}": groups other than 1 are not supported yet')
        for arg, value in (("activity_regularizer", activity_regularizer), ("kernel_constraint", kernel_constraint),
                           ("bias_constraint", bias_constraint)):
            if value is not None:
                raise NotImplementedError(f'Conv2D "{name}": {arg} is not supported yet')
        self._core = _core_layer("Conv2D", {
            "name": name, "filters": int(filters), "kernel_size": _int_pair(kernel_size, "kernel_size", name),
            "strides": _int_pair(strides, "strides", name), "padding": _string_arg(padding, "padding", name),
            "data_format": _string_arg(data_format, "data_format", name, "channels_last"),
            "dilation_rate": _int_pair(dilation_rate, "dilation_rate", name),
            "activation": _activation_name(activation, f'Conv2D "{name}"'), "use_bias": bool(use_bias),
            "kernel_initializer": to_config(kernel_initializer, "initializer"),
            "bias_initializer": to_config(bias_initializer, "initializer"),
            "kernel_regularizer": to_config(kernel_regularizer, "regularizer"),
            "bias_regularizer": to_config(bias_regularizer, "regularizer")})
        _set_attributes_from_config(self, self._CONFIG_ATTRIBUTES)

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        _set_attributes_from_config(layer, cls._CONFIG_ATTRIBUTES)
        return layer


class _Pooling2D(Layer):
    _CORE_CLASS = None
    _DEFAULT_NAME = None
    _CONFIG_ATTRIBUTES = ("pool_size", "strides", "padding", "data_format")

    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", data_format=None, **kwargs):
        _keras_default_name(kwargs, self._DEFAULT_NAME)
        super().__init__(**kwargs)
        name = self._name
        self._core = _core_layer(self._CORE_CLASS, {
            "name": name, "pool_size": _int_pair(pool_size, "pool_size", name),
            "strides": None if strides is None else _int_pair(strides, "strides", name),
            "padding": _string_arg(padding, "padding", name),
            "data_format": _string_arg(data_format, "data_format", name, "channels_last")})
        _set_attributes_from_config(self, self._CONFIG_ATTRIBUTES)

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        _set_attributes_from_config(layer, cls._CONFIG_ATTRIBUTES)
        return layer


class MaxPooling2D(_Pooling2D):
    """keras.layers.MaxPooling2D (strides=None means pool_size)."""
    _CORE_CLASS = "MaxPooling2D"
    _DEFAULT_NAME = "max_pooling2d"


class AveragePooling2D(_Pooling2D):
    """keras.layers.AveragePooling2D; with padding="same" the padding is not counted, as in TF."""
    _CORE_CLASS = "AveragePooling2D"
    _DEFAULT_NAME = "average_pooling2d"


class GlobalAveragePooling2D(Layer):
    def __init__(self, data_format=None, keepdims=False, **kwargs):
        _keras_default_name(kwargs, "global_average_pooling2d")
        super().__init__(**kwargs)
        self._core = _core_layer("GlobalAveragePooling2D", {
            "name": self._name, "keepdims": bool(keepdims),
            "data_format": _string_arg(data_format, "data_format", self._name, "channels_last")})
        _set_attributes_from_config(self, ("data_format", "keepdims"))

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        _set_attributes_from_config(layer, ("data_format", "keepdims"))
        return layer


class Reshape(Layer):
    """keras.layers.Reshape: target_shape excludes the batch axis; one entry may be -1."""

    def __init__(self, target_shape, **kwargs):
        super().__init__(**kwargs)
        try:
            target = tuple(target_shape)
        except TypeError:
            raise ValueError(f'layer "{self._name}": target_shape must be a tuple of integers, '
                             f"got {target_shape!r}") from None
        if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) for d in target):
            raise ValueError(f'layer "{self._name}": target_shape must be a tuple of integers, got {target_shape!r}')
        self._core = _core_layer("Reshape", {"name": self._name, "target_shape": [int(d) for d in target]})
        self.target_shape = tuple(int(d) for d in target)

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        layer.target_shape = tuple(json.loads(core_layer.config_json())["target_shape"])
        return layer


Convolution2D = Conv2D
MaxPool2D = MaxPooling2D
AvgPool2D = AveragePooling2D
GlobalAvgPool2D = GlobalAveragePooling2D

_CLASSES.update({"Conv2D": Conv2D, "MaxPooling2D": MaxPooling2D, "AveragePooling2D": AveragePooling2D,
                 "GlobalAveragePooling2D": GlobalAveragePooling2D, "Reshape": Reshape})


# ---- normalization layers (C++: nn/batch_normalization, nn/layer_normalization) ------------------
# The C++ layers check values (axis, momentum, epsilon, initializer names) with messages naming the
# layer; Python checks the argument types and turns Keras's forms (an axis list of one) into them.

def _normalization_axis(axis, layer_name, cls_name):
    """Keras accepts an int or a list of ints; only the last axis is supported here."""
    if isinstance(axis, (list, tuple)):
        if len(axis) != 1:
            raise ValueError(f'{cls_name} "{layer_name}": only axis=-1 (the last axis) is supported, got axis={axis!r}')
        axis = axis[0]
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f'{cls_name} "{layer_name}": axis must be an integer, got {axis!r}')
    return int(axis)


def _number_arg(value, argname, layer_name, cls_name):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f'{cls_name} "{layer_name}": {argname} must be a number, got {value!r}')
    return float(value)


def _copy_config_attributes(layer, names):
    """Sets layer.<name> from the C++ layer's config (so a loaded layer reports its settings)."""
    config = json.loads(layer._core.config_json())
    for name in names:
        setattr(layer, name, config[name])


def _no_constraints(layer_name, cls_name, **constraints):
    for arg, value in constraints.items():
        if value is not None:
            raise NotImplementedError(f'{cls_name} "{layer_name}": {arg} is not supported yet')


class BatchNormalization(Layer):
    """keras.layers.BatchNormalization over the last (channels) axis.

    Training normalizes with the batch's mean and variance and updates moving_mean and
    moving_variance (non-trainable weights) by `momentum`; inference uses the moving statistics.
    Under MirroredStrategy each replica normalizes with its own slice's statistics (Keras's default)
    unless synchronized=True, which uses the global batch's; see docs/strategies.md."""
    _CONFIG_ATTRIBUTES = ("axis", "momentum", "epsilon", "center", "scale", "synchronized")

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True, beta_initializer="zeros",
                 gamma_initializer="ones", moving_mean_initializer="zeros", moving_variance_initializer="ones",
                 beta_regularizer=None, gamma_regularizer=None, beta_constraint=None, gamma_constraint=None,
                 synchronized=False, **kwargs):
        super().__init__(**kwargs)
        name, cls_name = self._name, "BatchNormalization"
        _no_constraints(name, cls_name, beta_constraint=beta_constraint, gamma_constraint=gamma_constraint)
        for arg, value in (("center", center), ("scale", scale), ("synchronized", synchronized)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f'{cls_name} "{name}": {arg} must be True or False, got {value!r}')
        self._core = _core_layer(cls_name, {
            "name": name, "axis": _normalization_axis(axis, name, cls_name),
            "momentum": _number_arg(momentum, "momentum", name, cls_name),
            "epsilon": _number_arg(epsilon, "epsilon", name, cls_name), "center": bool(center), "scale": bool(scale),
            "beta_initializer": to_config(beta_initializer, "initializer"),
            "gamma_initializer": to_config(gamma_initializer, "initializer"),
            "moving_mean_initializer": to_config(moving_mean_initializer, "initializer"),
            "moving_variance_initializer": to_config(moving_variance_initializer, "initializer"),
            "beta_regularizer": to_config(beta_regularizer, "regularizer"),
            "gamma_regularizer": to_config(gamma_regularizer, "regularizer"), "synchronized": bool(synchronized)})
        _copy_config_attributes(self, self._CONFIG_ATTRIBUTES)

    def _weight(self, name):
        for w, n in zip(self.get_weights(), self._core.weight_names()):
            if n.endswith("/" + name):
                return w
        return None

    @property
    def gamma(self):
        return self._weight("gamma")

    @property
    def beta(self):
        return self._weight("beta")

    @property
    def moving_mean(self):
        return self._weight("moving_mean")

    @property
    def moving_variance(self):
        return self._weight("moving_variance")

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        _copy_config_attributes(layer, cls._CONFIG_ATTRIBUTES)
        return layer


class LayerNormalization(Layer):
    """keras.layers.LayerNormalization over the last axis: each sample (and position) normalized
    by its own mean and variance, then scaled by gamma and shifted by beta (shape (last_dim,))."""
    _CONFIG_ATTRIBUTES = ("axis", "epsilon", "center", "scale")

    def __init__(self, axis=-1, epsilon=1e-3, center=True, scale=True, rms_scaling=False, beta_initializer="zeros",
                 gamma_initializer="ones", beta_regularizer=None, gamma_regularizer=None, beta_constraint=None,
                 gamma_constraint=None, **kwargs):
        super().__init__(**kwargs)
        name, cls_name = self._name, "LayerNormalization"
        _no_constraints(name, cls_name, beta_constraint=beta_constraint, gamma_constraint=gamma_constraint)
        if rms_scaling:
            raise NotImplementedError(f'{cls_name} "{name}": rms_scaling=True is not supported yet')
        for arg, value in (("center", center), ("scale", scale)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f'{cls_name} "{name}": {arg} must be True or False, got {value!r}')
        self._core = _core_layer(cls_name, {
            "name": name, "axis": _normalization_axis(axis, name, cls_name),
            "epsilon": _number_arg(epsilon, "epsilon", name, cls_name), "center": bool(center), "scale": bool(scale),
            "beta_initializer": to_config(beta_initializer, "initializer"),
            "gamma_initializer": to_config(gamma_initializer, "initializer"),
            "beta_regularizer": to_config(beta_regularizer, "regularizer"),
            "gamma_regularizer": to_config(gamma_regularizer, "regularizer")})
        _copy_config_attributes(self, self._CONFIG_ATTRIBUTES)

    @property
    def gamma(self):
        w = self.get_weights()
        return w[0] if self.scale else None

    @property
    def beta(self):
        w = self.get_weights()
        return w[-1] if self.center else None

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        _copy_config_attributes(layer, cls._CONFIG_ATTRIBUTES)
        return layer


_CLASSES.update({"BatchNormalization": BatchNormalization, "LayerNormalization": LayerNormalization})


# ---- Embedding (C++: nn/embedding, ops/embedding) ------------------------------------------------

def _positive_int(value, argname):
    """Keras's check of Embedding's sizes: an int (not a bool) ...; C++ then refuses values < 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"`{argname}` must be a positive integer. Received: {argname}={value!r} "
                         f"(of type {type(value).__name__}).")
    return int(value)


class Embedding(Layer):
    """keras.layers.Embedding: turns integer indices into rows of a trainable (input_dim, output_dim)
    table; inputs (batch, *shape) give outputs (batch, *shape, output_dim).

    Indices may come as any integer array (cast to int32, as Keras does) or as floats holding whole
    numbers; a float that is not a whole number, or an index outside [0, input_dim), is a ValueError
    naming the layer, the value and its position, raised before any step runs (Keras on TF truncates
    floats and fails inside the step). It must be a model's first layer: indices have no gradient.
    The table's gradient is dense (docs/layers.md). input_length (Keras 2) sets the input shape."""

    _reads_indices = True

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", embeddings_regularizer=None,
                 embeddings_constraint=None, mask_zero=False, weights=None, lora_rank=None, input_length=None,
                 activity_regularizer=None, **kwargs):
        input_dim = _positive_int(input_dim, "input_dim")
        output_dim = _positive_int(output_dim, "output_dim")
        if input_length is not None and "input_shape" not in kwargs and "batch_input_shape" not in kwargs:
            kwargs["input_shape"] = input_length if isinstance(input_length, (tuple, list)) else (input_length,)
        super().__init__(**kwargs)
        name = self._name
        if embeddings_constraint is not None:
            raise ValueError(f'Embedding "{name}": embeddings_constraint is not supported by mdtrain (no layer '
                             f"supports weight constraints yet), got {embeddings_constraint!r}")
        if not isinstance(mask_zero, (bool, np.bool_)):
            raise TypeError(f'Embedding "{name}": mask_zero must be True or False, got {mask_zero!r}')
        for arg, value in (("weights", weights), ("lora_rank", lora_rank),
                           ("activity_regularizer", activity_regularizer)):
            if value is not None:
                raise NotImplementedError(f'Embedding "{name}": {arg} is not supported yet')
        self._core = _core_layer("Embedding", {
            "name": name, "input_dim": input_dim, "output_dim": output_dim,
            "embeddings_initializer": to_config(embeddings_initializer, "initializer"),
            "embeddings_regularizer": to_config(embeddings_regularizer, "regularizer"),
            "mask_zero": bool(mask_zero)})
        self.input_length = input_length
        _copy_config_attributes(self, ("input_dim", "output_dim", "mask_zero"))

    @property
    def supports_masking(self):
        return self.mask_zero

    @property
    def embeddings(self):
        """The table, (input_dim, output_dim) (a copy, as get_weights returns)."""
        if not self.built:
            raise AttributeError("You must build the layer before accessing `embeddings`.")
        return self.get_weights()[0]

    def compute_mask(self, inputs, mask=None):
        """Keras's mask: inputs != 0 when mask_zero, else None (for layers that will read masks)."""
        if not self.mask_zero:
            return None
        return np.not_equal(np.asarray(inputs), 0)

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        layer.input_length = None
        _copy_config_attributes(layer, ("input_dim", "output_dim", "mask_zero"))
        return layer


_CLASSES["Embedding"] = Embedding


# ---- merge layers (C++: nn/merge_layer, nn/elementwise_merge, nn/concatenate) -------------------

class _Merge(Layer):
    """A layer called on a list of tensors (keras.layers.Add, Multiply, Concatenate). In a model it
    runs in C++; called on eager tensors it is the eager ops below (recorded by GradientTape)."""

    _merge = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._core = _core_layer(type(self).__name__, self._merge_config())

    def _merge_config(self):
        return {"name": self._name}

    def __call__(self, inputs, training=None, **kwargs):
        # training changes nothing in a merge (as in Keras); other arguments are refused.
        _refuse_call_kwargs(self, kwargs)
        if _keras_tensor.is_symbolic(inputs):
            return _keras_tensor.call_symbolic(self, inputs)
        if not isinstance(inputs, (list, tuple)) or len(inputs) < 2:
            raise ValueError(f'A merge layer should be called on a list of at least 2 inputs. Layer "{self.name}" '
                             f"({type(self).__name__}) got {type(inputs).__name__}")
        from mdtrain._eager import keras_layers

        tensors = [keras_layers._as_input(x) for x in inputs]
        self._core.merged_shape([list(t.shape[1:]) for t in tensors])  # Keras's shape checks
        return self._eager(tensors)


def _fold(op_name, tensors):
    """tensors[0] op tensors[1] op ..., in input order (as the C++ layer folds them)."""
    from mdtrain._eager import ops

    out = tensors[0]
    for t in tensors[1:]:
        out = getattr(ops, op_name)(out, t)
    return out


class Add(_Merge):
    """keras.layers.Add: the element-wise sum of inputs of one shape."""

    def _eager(self, tensors):
        return _fold("add", tensors)


class Multiply(_Merge):
    """keras.layers.Multiply: the element-wise product of inputs of one shape."""

    def _eager(self, tensors):
        return _fold("multiply", tensors)


class Concatenate(_Merge):
    """keras.layers.Concatenate(axis=-1): the inputs joined along `axis` (batch axis counted)."""

    def __init__(self, axis=-1, **kwargs):
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise TypeError(f"Concatenate: axis must be an integer, got {axis!r}")
        self.axis = int(axis)
        super().__init__(**kwargs)

    def _merge_config(self):
        return {"name": self._name, "axis": self.axis}

    def _eager(self, tensors):
        from mdtrain._eager import ops

        return ops.concat(tensors, axis=self.axis)

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        layer.axis = json.loads(core_layer.config_json())["axis"]
        return layer


def add(inputs, **kwargs):
    """keras.layers.add: Add()(inputs)."""
    return Add(**kwargs)(inputs)


def multiply(inputs, **kwargs):
    """keras.layers.multiply: Multiply()(inputs)."""
    return Multiply(**kwargs)(inputs)


def concatenate(inputs, axis=-1, **kwargs):
    """keras.layers.concatenate: Concatenate(axis)(inputs)."""
    return Concatenate(axis=axis, **kwargs)(inputs)


_CLASSES.update({"Add": Add, "Multiply": Multiply, "Concatenate": Concatenate})


# ---- recurrent layers (C++: nn/lstm, ops/recurrent) ---------------------------------------------

class _Recurrent(Layer):
    """Keras's recurrent layers on (batch, timesteps, features), with Keras's weights (kernel,
    recurrent_kernel, bias) so Keras weights load unchanged. Return the last output (batch, u), or
    (batch, timesteps, u) with return_sequences; go_backwards, dropout and recurrent_dropout as Keras.
    return_state / initial_state in eager calls (not in functional models yet).
    Not yet supported (NotImplementedError): stateful, constraints (docs/layers.md).
    C++: nn/recurrent_layer.h."""

    _GATES = True  # has recurrent_activation
    _would_read_mask = True  # skips masked steps (mask_after; C++ nn/recurrent_layer.h)
    _ONLY_ACTIVATION = "tanh"
    _ONLY_RECURRENT_ACTIVATION = "sigmoid"
    _EXTRA = ()  # (argument, config key) the subclass adds

    def _make(self, units, activation, recurrent_activation, use_bias, kernel_initializer, recurrent_initializer,
              bias_initializer, kernel_regularizer, recurrent_regularizer, bias_regularizer, activity_regularizer,
              kernel_constraint, recurrent_constraint, bias_constraint, dropout, recurrent_dropout, seed,
              return_sequences, return_state, go_backwards, stateful, unroll, extra):
        name = self._name
        cls_name = type(self).__name__
        if isinstance(units, bool) or not isinstance(units, (int, np.integer)) or units <= 0:
            raise ValueError(f"Received an invalid value for argument `units`, expected a positive integer, "
                             f"got {units!r}.")
        _no_constraints(name, cls_name, kernel_constraint=kernel_constraint,
                        recurrent_constraint=recurrent_constraint, bias_constraint=bias_constraint,
                        activity_regularizer=activity_regularizer)
        for arg, value, fine in (("stateful", stateful, False),):
            if value != fine:
                raise NotImplementedError(f'{cls_name} "{name}": {arg}={value!r} is not supported yet')
        for arg, value in (("dropout", dropout), ("recurrent_dropout", recurrent_dropout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f'{cls_name} "{name}": {arg} must be a float in [0, 1), got {value!r}')
        activation = _activation_name(activation, f'{cls_name} "{name}"')
        checks = [("activation", activation, self._ONLY_ACTIVATION)]
        config = {"name": name, "units": int(units), "activation": activation, "use_bias": bool(use_bias),
                  "kernel_initializer": to_config(kernel_initializer, "initializer"),
                  "recurrent_initializer": to_config(recurrent_initializer, "initializer"),
                  "bias_initializer": to_config(bias_initializer, "initializer"),
                  "kernel_regularizer": to_config(kernel_regularizer, "regularizer"),
                  "recurrent_regularizer": to_config(recurrent_regularizer, "regularizer"),
                  "bias_regularizer": to_config(bias_regularizer, "regularizer"),
                  "return_sequences": bool(return_sequences), "go_backwards": bool(go_backwards),
                  "dropout": float(dropout), "recurrent_dropout": float(recurrent_dropout),
                  # The masks' seed: drawn from the global seed when not given, as Dropout's.
                  "seed": _random.draw_seed() if seed is None else int(seed), **extra}
        if self._GATES:
            config["recurrent_activation"] = _activation_name(recurrent_activation, f'{cls_name} "{name}"')
            checks.append(("recurrent_activation", config["recurrent_activation"], self._ONLY_RECURRENT_ACTIVATION))
        for arg in ("activation", "recurrent_activation"):
            if config.get(arg) in ("softmax", "gelu"):
                raise NotImplementedError(f'{cls_name} "{name}": {arg}={config[arg]!r} is not supported (linear, relu, '
                                          "sigmoid or tanh)")
        for arg, value, only in checks:
            if only is not None and value != only:
                raise NotImplementedError(f'{cls_name} "{name}": {arg}={value!r} is not supported yet '
                                          f'(only "{only}")')
        self._core = _core_layer(cls_name, config)
        self.unroll = bool(unroll)
        self.return_state = bool(return_state)
        _copy_config_attributes(self, self._attributes())

    @classmethod
    def _attributes(cls):
        base = ("units", "activation", "use_bias", "return_sequences", "go_backwards", "dropout",
                "recurrent_dropout", "seed")
        return base + (("recurrent_activation",) if cls._GATES else ()) + tuple(k for _, k in cls._EXTRA)

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        layer.unroll = False
        layer.return_state = False
        _copy_config_attributes(layer, cls._attributes())
        return layer

    def get_config(self):
        config = super().get_config()
        config["unroll"] = self.unroll
        config["return_state"] = self.return_state
        return config

    def __call__(self, inputs, training=None, initial_state=None, **kwargs):
        # initial_state / return_state: eager calls only (_eager/recurrent_state.py, C++ state API).
        _refuse_call_kwargs(self, kwargs)
        if initial_state is None and not self.return_state:
            return super().__call__(inputs, training, **kwargs)
        symbolic = [_keras_tensor.is_symbolic(t) for t in [inputs] + list(
            initial_state if isinstance(initial_state, (list, tuple)) else [initial_state])]
        if any(symbolic):
            raise NotImplementedError(
                f'{type(self).__name__} "{self.name}": return_state=True / initial_state in a functional model are '
                "not supported yet: mdtrain's layer graph (nn/layer_graph.h) gives each node one output tensor and "
                "its layers one input, so a layer returning [y, h, c] or taking states cannot be a node; call the "
                "layer eagerly (it works there, with GradientTape)")
        from mdtrain._eager.recurrent_state import call_with_state
        return call_with_state(self, inputs, initial_state, training)


def _check_use_cudnn(use_cudnn, cls_name):
    """Keras raises when use_cudnn=True cannot be honoured; mdtrain has no cuDNN kernels (its own
    recurrent kernels give the same results), so only "auto" and False are accepted."""
    if use_cudnn is True:
        raise ValueError(f"{cls_name}: use_cudnn=True was specified, but mdtrain has no cuDNN kernels; use 'auto' or "
                         "False")
    if use_cudnn not in ("auto", False):
        raise ValueError(f"{cls_name}: use_cudnn must be 'auto', True or False, got {use_cudnn!r}")


class SimpleRNN(_Recurrent):
    """keras.layers.SimpleRNN: h = activation(x @ kernel + h_prev @ recurrent_kernel + bias);
    activation tanh (default), relu, sigmoid or linear."""

    _GATES = False
    _ONLY_ACTIVATION = None

    def __init__(self, units, activation="tanh", use_bias=True, kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", bias_initializer="zeros", kernel_regularizer=None,
                 recurrent_regularizer=None, bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                 recurrent_constraint=None, bias_constraint=None, dropout=0.0, recurrent_dropout=0.0,
                 return_sequences=False, return_state=False, go_backwards=False, stateful=False, unroll=False,
                 seed=None, **kwargs):
        super().__init__(**kwargs)
        self._make(units, activation, None, use_bias, kernel_initializer, recurrent_initializer, bias_initializer,
                   kernel_regularizer, recurrent_regularizer, bias_regularizer, activity_regularizer,
                   kernel_constraint, recurrent_constraint, bias_constraint, dropout, recurrent_dropout, seed,
                   return_sequences, return_state, go_backwards, stateful, unroll, {})


class LSTM(_Recurrent):
    """keras.layers.LSTM: kernel (features, 4u), recurrent_kernel (u, 4u), bias (4u), gates i, f, c, o;
    unit_forget_bias starts the forget gate's bias at 1. activation and recurrent_activation: linear,
    relu, sigmoid or tanh."""

    _ONLY_ACTIVATION = None
    _ONLY_RECURRENT_ACTIVATION = None

    _EXTRA = (("unit_forget_bias", "unit_forget_bias"),)

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal", bias_initializer="zeros",
                 unit_forget_bias=True, kernel_regularizer=None, recurrent_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, recurrent_constraint=None, bias_constraint=None,
                 dropout=0.0, recurrent_dropout=0.0, seed=None, return_sequences=False, return_state=False,
                 go_backwards=False, stateful=False, unroll=False, use_cudnn="auto", **kwargs):
        _check_use_cudnn(use_cudnn, type(self).__name__)
        super().__init__(**kwargs)
        self._make(units, activation, recurrent_activation, use_bias, kernel_initializer, recurrent_initializer,
                   bias_initializer, kernel_regularizer, recurrent_regularizer, bias_regularizer,
                   activity_regularizer, kernel_constraint, recurrent_constraint, bias_constraint, dropout,
                   recurrent_dropout, seed, return_sequences, return_state, go_backwards, stateful, unroll,
                   {"unit_forget_bias": bool(unit_forget_bias)})


class GRU(_Recurrent):
    """keras.layers.GRU: kernel (features, 3u), recurrent_kernel (u, 3u), gates z, r, h; bias (2, 3u)
    with reset_after=True (Keras's default), (3u,) with reset_after=False."""

    _EXTRA = (("reset_after", "reset_after"),)

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal", bias_initializer="zeros",
                 kernel_regularizer=None, recurrent_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, recurrent_constraint=None, bias_constraint=None, dropout=0.0,
                 recurrent_dropout=0.0, seed=None, return_sequences=False, return_state=False, go_backwards=False,
                 stateful=False, unroll=False, reset_after=True, use_cudnn="auto", **kwargs):
        _check_use_cudnn(use_cudnn, type(self).__name__)
        super().__init__(**kwargs)
        self._make(units, activation, recurrent_activation, use_bias, kernel_initializer, recurrent_initializer,
                   bias_initializer, kernel_regularizer, recurrent_regularizer, bias_regularizer,
                   activity_regularizer, kernel_constraint, recurrent_constraint, bias_constraint, dropout,
                   recurrent_dropout, seed, return_sequences, return_state, go_backwards, stateful, unroll,
                   {"reset_after": bool(reset_after)})


class Bidirectional(Layer):
    """keras.layers.Bidirectional(layer, merge_mode="concat", backward_layer=None): a forward and a
    backward copy of a SimpleRNN/LSTM/GRU ("forward_<name>", "backward_<name>"), or the given
    backward_layer (which must have go_backwards opposite to layer's, and the same units and
    return_sequences); the backward output flipped back in time with return_sequences, then merged:
    "concat" on the last axis, "sum", "mul" or "ave". merge_mode=None (Keras: a list of two outputs)
    is NotImplementedError: mdtrain layers have one output. With a mask and return_sequences the
    outputs at masked steps are zeros (Keras's zero_output_for_mask). Weights: forward's, then
    backward's."""

    _would_read_mask = True
    _MERGE_MODES = ("concat", "sum", "mul", "ave")

    def __init__(self, layer, merge_mode="concat", weights=None, backward_layer=None, **kwargs):
        if isinstance(layer, dict):  # from_config
            layer = _CLASSES[layer["class_name"]].from_config(layer["config"])
        super().__init__(**kwargs)
        if not isinstance(layer, _Recurrent):
            raise ValueError(f'Bidirectional "{self._name}": layer must be a SimpleRNN, LSTM or GRU instance, '
                             f"got {layer!r}")
        if merge_mode is None:
            raise NotImplementedError(f'Bidirectional "{self._name}": merge_mode=None (a list of the two outputs) is '
                                      'not supported: an mdtrain layer has one output; use "concat", "sum", "mul" '
                                      'or "ave"')
        if merge_mode not in self._MERGE_MODES:
            raise ValueError(f'Invalid merge mode. Received: {merge_mode!r}. Merge mode should be one of '
                             f'{{"sum", "mul", "ave", "concat", None}}')
        if weights is not None:
            raise NotImplementedError(f'Bidirectional "{self._name}": weights= is not supported yet')
        inner = {"class_name": type(layer).__name__, "config": json.loads(layer._core.config_json())}
        config = {"name": self._name, "layer": inner, "merge_mode": merge_mode}
        if isinstance(backward_layer, dict):  # from_config
            config["backward_layer"] = backward_layer
        elif backward_layer is not None:
            if not isinstance(backward_layer, _Recurrent):
                raise ValueError(f'Bidirectional "{self._name}": backward_layer must be a SimpleRNN, LSTM or GRU '
                                 f"instance, got {backward_layer!r}")
            back = json.loads(backward_layer._core.config_json())
            for key in ("return_sequences", "units"):
                if back.get(key) != inner["config"].get(key):
                    raise ValueError(f'Bidirectional "{self._name}": backward_layer {key}={back.get(key)!r} differs '
                                     f"from the forward layer's {inner['config'].get(key)!r}")
            if bool(back.get("go_backwards")) == bool(inner["config"].get("go_backwards")):
                raise ValueError(f'Bidirectional "{self._name}": backward_layer must have go_backwards opposite to '
                                 "the forward layer's")
            config["backward_layer"] = {"class_name": type(backward_layer).__name__, "config": back}
        self._core = _core_layer("Bidirectional", config)
        self.merge_mode = merge_mode

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        layer.merge_mode = json.loads(core_layer.config_json())["merge_mode"]
        return layer


_CLASSES.update({"SimpleRNN": SimpleRNN, "LSTM": LSTM, "GRU": GRU, "Bidirectional": Bidirectional})


# Defined in its own module (it needs Layer, above); exported here as keras.layers.PipelineSplit.
from mdtrain.keras.pipeline_split import PipelineSplit  # noqa: E402

_CLASSES.update({"PipelineSplit": PipelineSplit})
