"""keras.activations: each activation as a function on arrays and tensors (Keras 3's names,
arguments and formulas), with get / serialize / deserialize.

The functions are written in mdtrain's ops (mdtrain._eager), so they return tensors that
GradientTape differentiates; gelu's exact (erf) form runs the C++ activation the layers use. A
layer's activation (Dense/Conv2D(activation=...), Activation(...)) runs in its C++ step, by name or
as one of these functions: linear, relu, sigmoid, tanh, softmax, gelu, elu, selu, softplus,
softsign, silu (swish), relu6, hard_sigmoid, hard_silu (hard_swish), exponential, mish, leaky_relu
and log_sigmoid, with their default arguments (_core.activation_names()); the others here (celu,
hard_tanh, tanh_shrink, log_softmax, ...) and calls with other arguments are for use on tensors.
"""
import math

from mdtrain._eager import ops as _ops
from mdtrain._eager.tensor import convert_to_tensor as _tensor
from mdtrain.keras import _custom_objects
from mdtrain.keras import layers as _layers
from mdtrain.keras.saving import serialization_lib as _serialization_lib


def _float(x):
    x = _tensor(x)
    return x if x.dtype.is_floating else _ops.cast(x, "float32")


def linear(x):
    return _float(x)


def relu(x, negative_slope=0.0, max_value=None, threshold=0.0):
    """max(x, 0), with Keras's negative_slope, max_value and threshold."""
    x = _float(x)
    if negative_slope != 0.0:
        if max_value is None and threshold == 0:
            return leaky_relu(x, negative_slope=negative_slope)
        negative_part = _ops.relu(threshold - x) if threshold != 0 else _ops.relu(-x)
    clip_max = max_value is not None
    if threshold != 0:
        x = x * _ops.cast(_ops.greater(x, threshold), x.dtype)
    else:
        x = _ops.relu(x)
    if clip_max:
        x = _ops.clip_by_value(x, 0.0, float(max_value))
    if negative_slope != 0.0:
        x = x - negative_slope * negative_part
    return x


def leaky_relu(x, negative_slope=0.2):
    x = _float(x)
    return _ops.where(_ops.greater(x, 0.0), x, x * negative_slope)


def relu6(x):
    return _ops.clip_by_value(_float(x), 0.0, 6.0)


def elu(x, alpha=1.0):
    x = _float(x)
    return _ops.where(_ops.greater(x, 0.0), x, alpha * (_ops.exp(_ops.minimum(x, 0.0)) - 1.0))


def selu(x):
    alpha, scale = 1.67326324, 1.05070098
    return scale * elu(x, alpha)


def celu(x, alpha=1.0):
    x = _float(x)
    return _ops.maximum(x, 0.0) + alpha * (_ops.exp(_ops.minimum(x, 0.0) / alpha) - 1.0)


def softplus(x):
    return _ops.softplus(_float(x))


def softsign(x):
    x = _float(x)
    return x / (_ops.abs(x) + 1.0)


def sigmoid(x):
    return _ops.sigmoid(_float(x))


def hard_sigmoid(x):
    """relu6(x + 3) / 6, Keras 3's form."""
    return relu6(_float(x) + 3.0) / 6.0


def log_sigmoid(x):
    return -softplus(-_float(x))


def silu(x):
    x = _float(x)
    return x * sigmoid(x)


def hard_silu(x):
    x = _float(x)
    return x * hard_sigmoid(x)


def mish(x):
    x = _float(x)
    return x * _ops.tanh(softplus(x))


def tanh(x):
    return _ops.tanh(_float(x))


def hard_tanh(x):
    return _ops.clip_by_value(_float(x), -1.0, 1.0)


def tanh_shrink(x):
    x = _float(x)
    return x - _ops.tanh(x)


def exponential(x):
    return _ops.exp(_float(x))


def softmax(x, axis=-1):
    return _ops.softmax(_float(x), axis=axis)


def log_softmax(x, axis=-1):
    return _ops.log_softmax(_float(x), axis=axis)


def gelu(x, approximate=False):
    """x * Phi(x): the exact (erf) form by default, as the C++ layers compute it; approximate=True
    uses the tanh approximation."""
    x = _float(x)
    if approximate:
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + _ops.tanh(c * (x + 0.044715 * x * x * x)))
    shape = x.shape.as_list()
    flat = x if len(shape) >= 2 else _ops.reshape(x, [1, -1])  # the layer reads axis 0 as the batch
    out = _layers.Activation("gelu", name="gelu")(flat)
    return out if len(shape) >= 2 else _ops.reshape(out, shape)


ALL_OBJECTS = [relu, leaky_relu, relu6, softmax, celu, elu, selu, softplus, softsign, silu, gelu, tanh, tanh_shrink,
               sigmoid, exponential, hard_sigmoid, hard_silu, hard_tanh, linear, mish, log_softmax, log_sigmoid]
ALL_OBJECTS_DICT = {fn.__name__: fn for fn in ALL_OBJECTS}
ALL_OBJECTS_DICT["swish"] = swish = silu
ALL_OBJECTS_DICT["hard_swish"] = hard_swish = hard_silu
_serialization_lib.register_functions("keras.activations", ALL_OBJECTS_DICT)


def serialize(activation):
    """The name of a built-in activation ("relu"); a registered one's config."""
    config = _serialization_lib.serialize_keras_object(activation)
    if not isinstance(config, dict) or "config" not in config:
        raise ValueError(f"Unknown activation function '{activation}' cannot be serialized due to invalid "
                         "function name. Make sure to use an activation name that matches the references defined "
                         "in activations.py or use `@keras.saving.register_keras_serializable()` to register any "
                         f"custom activations. config={config}")
    if not callable(activation) or hasattr(activation, "get_config"):
        return config
    if ALL_OBJECTS_DICT.get(config["config"]) is activation:
        return config["config"]
    config["config"] = _custom_objects.get_registered_name(activation)
    return config


def deserialize(config, custom_objects=None):
    """The activation a name or serialized config names (custom_objects and registered
    functions first, as in Keras)."""
    if isinstance(config, str):
        found = _custom_objects.find(config, None, custom_objects)
        if found is not None:
            return found
        if config in ALL_OBJECTS_DICT:
            return ALL_OBJECTS_DICT[config]
        raise ValueError(f"Unknown activation function: '{config}'")
    return _serialization_lib.deserialize_keras_object(config, custom_objects=custom_objects)


def get(identifier):
    """None → linear; a name → that function; a dict → deserialize; a callable → itself."""
    if identifier is None:
        return linear
    if isinstance(identifier, dict):
        obj = _serialization_lib.deserialize_keras_object(identifier)
    elif isinstance(identifier, str):
        obj = ALL_OBJECTS_DICT.get(identifier, None)
    else:
        obj = identifier
    if callable(obj):
        return obj
    raise ValueError(f"Could not interpret activation function identifier: {identifier}")


__all__ = sorted(ALL_OBJECTS_DICT) + ["deserialize", "get", "serialize"]
