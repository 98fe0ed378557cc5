"""keras.layers' activation layers with arguments (C++: nn/parametric_activation_layer, nn/prelu,
nn/softmax_layer): ReLU, LeakyReLU, ELU, PReLU, Softmax, with Keras 3's arguments, defaults and
messages. Activation(name) stays in core.py.

Python checks the argument types and Keras's value rules (its messages); C++ checks them again and
computes. Softmax takes an int or a list of axes; a mask reaching it (Keras's call-time mask) is
refused (mask_propagation)."""
import warnings

import numpy as np

from mdtrain.keras._serialization import to_config
from mdtrain.keras.layers._arguments import _copy_config_attributes, _no_constraints
from mdtrain.keras.layers.base_layer import _CLASSES, Layer, _core_layer


def _is_number(value):
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _number(value, argname, layer_name, cls_name):
    if not _is_number(value):
        raise TypeError(f'{cls_name} "{layer_name}": {argname} must be a number, got {value!r}')
    return float(value)


def _axes_config(axis, layer_name, cls_name):
    """Keras's axis: an int, or a list/tuple of ints (kept as a list in the config)."""
    if isinstance(axis, (list, tuple)):
        if not axis or any(isinstance(a, bool) or not isinstance(a, (int, np.integer)) for a in axis):
            raise TypeError(f'{cls_name} "{layer_name}": Invalid value for `axis` argument: expected an int or a '
                            f"list/tuple of ints. Received: axis={axis}")
        return [int(a) for a in axis]
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f'{cls_name} "{layer_name}": Invalid value for `axis` argument: expected an int or a '
                        f"list/tuple of ints. Received: axis={axis}")
    return int(axis)


class _ConfigAttributes(Layer):
    """Attributes read back from the C++ config, so a loaded layer reports the same."""
    _CONFIG_ATTRIBUTES = ()

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        _copy_config_attributes(layer, cls._CONFIG_ATTRIBUTES)
        layer.supports_masking = True
        return layer


class ReLU(_ConfigAttributes):
    """keras.layers.ReLU: x >= max_value -> max_value; threshold <= x < max_value -> x; otherwise
    negative_slope * (x - threshold)."""
    _CONFIG_ATTRIBUTES = ("max_value", "negative_slope", "threshold")

    def __init__(self, max_value=None, negative_slope=0.0, threshold=0.0, **kwargs):
        super().__init__(**kwargs)
        name = self._name
        if max_value is not None and _number(max_value, "max_value", name, "ReLU") < 0.0:
            raise ValueError(f"max_value of a ReLU layer cannot be a negative value. Received: max_value={max_value}")
        if negative_slope is None or _number(negative_slope, "negative_slope", name, "ReLU") < 0.0:
            raise ValueError("negative_slope of a ReLU layer cannot be None or a negative value. Received: "
                             f"negative_slope={negative_slope}")
        if threshold is None or _number(threshold, "threshold", name, "ReLU") < 0.0:
            raise ValueError("threshold of a ReLU layer cannot be None or a negative value. Received: "
                             f"threshold={threshold}")
        self._core = _core_layer("ReLU", {"name": name, "max_value": None if max_value is None else float(max_value),
                                          "negative_slope": float(negative_slope), "threshold": float(threshold)})
        _copy_config_attributes(self, self._CONFIG_ATTRIBUTES)
        self.supports_masking = True


class LeakyReLU(_ConfigAttributes):
    """keras.layers.LeakyReLU: x for x >= 0, negative_slope * x otherwise (alpha= is Keras's
    deprecated name for negative_slope)."""
    _CONFIG_ATTRIBUTES = ("negative_slope",)

    def __init__(self, negative_slope=0.3, **kwargs):
        if "alpha" in kwargs:
            negative_slope = kwargs.pop("alpha")
            warnings.warn("Argument `alpha` is deprecated. Use `negative_slope` instead.")
        super().__init__(**kwargs)
        if negative_slope is None or _number(negative_slope, "negative_slope", self._name, "LeakyReLU") < 0:
            raise ValueError("The negative_slope value of a Leaky ReLU layer cannot be None or negative value. "
                             f"Expected a float. Received: negative_slope={negative_slope}")
        self._core = _core_layer("LeakyReLU", {"name": self._name, "negative_slope": float(negative_slope)})
        _copy_config_attributes(self, self._CONFIG_ATTRIBUTES)
        self.supports_masking = True


class ELU(_ConfigAttributes):
    """keras.layers.ELU: x for x > 0, alpha * (exp(x) - 1) otherwise."""
    _CONFIG_ATTRIBUTES = ("alpha",)

    def __init__(self, alpha=1.0, **kwargs):
        super().__init__(**kwargs)
        self._core = _core_layer("ELU", {"name": self._name, "alpha": _number(alpha, "alpha", self._name, "ELU")})
        _copy_config_attributes(self, self._CONFIG_ATTRIBUTES)
        self.supports_masking = True


class PReLU(_ConfigAttributes):
    """keras.layers.PReLU: x for x > 0, alpha * x otherwise, with a trainable alpha shaped like the
    input without the batch, 1 on each of shared_axes (e.g. [1, 2] for one alpha per channel of an
    image). alpha_constraint is not supported."""
    _CONFIG_ATTRIBUTES = ("shared_axes",)

    def __init__(self, alpha_initializer="Zeros", alpha_regularizer=None, alpha_constraint=None, shared_axes=None,
                 **kwargs):
        super().__init__(**kwargs)
        name = self._name
        _no_constraints(name, "PReLU", alpha_constraint=alpha_constraint)
        if shared_axes is not None:
            shared_axes = list(shared_axes) if isinstance(shared_axes, (list, tuple)) else [shared_axes]
            if any(isinstance(a, bool) or not isinstance(a, (int, np.integer)) for a in shared_axes):
                raise TypeError(f'PReLU "{name}": shared_axes must be an int or a list of ints, got {shared_axes!r}')
            shared_axes = [int(a) for a in shared_axes]
        self._core = _core_layer("PReLU", {
            "name": name, "alpha_initializer": to_config(alpha_initializer, "initializer"),
            "alpha_regularizer": to_config(alpha_regularizer, "regularizer"), "alpha_constraint": None,
            "shared_axes": shared_axes})
        _copy_config_attributes(self, self._CONFIG_ATTRIBUTES)
        self.supports_masking = True

    @property
    def alpha(self):
        weights = self.get_weights()
        return weights[0] if weights else None


class Softmax(_ConfigAttributes):
    """keras.layers.Softmax(axis=-1): softmax along an axis or a list of axes (never the batch axis).
    Keras's call-time mask is not supported: a mask reaching the layer is refused."""
    _CONFIG_ATTRIBUTES = ("axis",)

    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        self._core = _core_layer("Softmax", {"name": self._name, "axis": _axes_config(axis, self._name, "Softmax")})
        _copy_config_attributes(self, self._CONFIG_ATTRIBUTES)
        self.supports_masking = True


_CLASSES.update({"ReLU": ReLU, "LeakyReLU": LeakyReLU, "ELU": ELU, "PReLU": PReLU, "Softmax": Softmax})
