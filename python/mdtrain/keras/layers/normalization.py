"""keras.layers' normalization (C++: nn/batch_normalization, nn/layer_normalization,
nn/unit_normalization).

The C++ layers check values (axis, momentum, epsilon, initializer names) with messages naming the
layer; Python checks the argument types and turns Keras's forms (an axis list of one) into them."""
import numpy as np

from mdtrain.keras._serialization import to_config
from mdtrain.keras.layers._arguments import _copy_config_attributes, _no_constraints, _number_arg
from mdtrain.keras.layers.base_layer import _CLASSES, Layer, _core_layer


def _normalization_axis(axis, layer_name, cls_name):
    """Keras accepts an int or a list of ints; only the last axis is supported here."""
    if isinstance(axis, (list, tuple)):
        if len(axis) != 1:
            raise ValueError(f'{cls_name} "{layer_name}": only axis=-1 (the last axis) is supported, got axis={axis!r}')
        axis = axis[0]
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f'{cls_name} "{layer_name}": axis must be an integer, got {axis!r}')
    return int(axis)


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


class UnitNormalization(Layer):
    """keras.layers.UnitNormalization(axis=-1): each slice along axis (an int or a list of axes,
    never the batch axis) scaled to unit L2 norm as Keras 3 does, x * min(1 / sqrt(sum x^2), 1e12)."""

    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        if isinstance(axis, (list, tuple)):
            if any(isinstance(a, bool) or not isinstance(a, (int, np.integer)) for a in axis):
                raise TypeError("Invalid value for `axis` argument: expected an int or a list/tuple of ints. "
                                f"Received: axis={axis}")
            axis = [int(a) for a in axis]
        elif isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise TypeError("Invalid value for `axis` argument: expected an int or a list/tuple of ints. "
                            f"Received: axis={axis}")
        else:
            axis = int(axis)
        self._core = _core_layer("UnitNormalization", {"name": self._name, "axis": axis})
        _copy_config_attributes(self, ("axis",))
        self.supports_masking = True

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        _copy_config_attributes(layer, ("axis",))
        layer.supports_masking = True
        return layer


_CLASSES.update({"BatchNormalization": BatchNormalization, "LayerNormalization": LayerNormalization,
                 "UnitNormalization": UnitNormalization})
