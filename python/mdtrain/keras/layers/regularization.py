"""keras.layers' noise and regularization layers (C++: nn/gaussian_noise, nn/gaussian_dropout,
nn/spatial_dropout, nn/activity_regularization). Active in training only, except
ActivityRegularization, whose penalty fit and evaluate add to the loss of every step. Their random
numbers are keyed as Dropout's: on the seed, the step and the element's position in the global
batch, so any replica count draws the same noise. (Dropout itself lives in core.py.)"""
import json
import math

import numpy as np

from mdtrain import _random
from mdtrain.keras.layers.base_layer import _CLASSES, Layer, _core_layer


def _rate_or_stddev(value, argname, cls_name):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{cls_name}: {argname} must be a number, got {value!r}")
    return float(value)


def _seed(seed, cls_name):
    """A drawn seed for None (Keras's unseeded layers; Dropout's stream), else the int given."""
    if seed is None:
        return _random.draw_mask_seed()
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"{cls_name}: seed must be an integer or None, got {seed!r}")
    return int(seed)


class _ConfigAttributes:
    """Sets the layer's Keras attributes from its C++ config (so a loaded layer reports them)."""

    _attributes = ()

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        config = json.loads(core_layer.config_json())
        for name in cls._attributes:
            setattr(layer, name, config[name])
        layer.supports_masking = True
        return layer


class GaussianNoise(_ConfigAttributes, Layer):
    """keras.layers.GaussianNoise(stddev, seed=None): adds normal noise of standard deviation stddev
    (0 <= stddev <= 1) in training; identity in inference. Passes masks on."""

    _attributes = ("stddev", "seed")

    def __init__(self, stddev, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.stddev = _rate_or_stddev(stddev, "stddev", "GaussianNoise")
        self._core = _core_layer("GaussianNoise", {"name": self._name, "stddev": self.stddev,
                                                   "seed": _seed(seed, "GaussianNoise")})
        self.seed = json.loads(self._core.config_json())["seed"]
        self.supports_masking = True


class GaussianDropout(_ConfigAttributes, Layer):
    """keras.layers.GaussianDropout(rate, seed=None): multiplies by normal noise of mean 1 and standard
    deviation sqrt(rate / (1 - rate)) in training (0 <= rate < 1); identity in inference."""

    _attributes = ("rate", "seed")

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = _rate_or_stddev(rate, "rate", "GaussianDropout")
        self._core = _core_layer("GaussianDropout", {"name": self._name, "rate": self.rate,
                                                     "seed": _seed(seed, "GaussianDropout")})
        self.seed = json.loads(self._core.config_json())["seed"]
        self.supports_masking = True


class _SpatialDropout(_ConfigAttributes, Layer):
    _attributes = ("rate", "seed")

    def __init__(self, rate, seed=None, name=None, dtype=None, extra=None, **kwargs):
        cls_name = type(self).__name__
        super().__init__(name=name, dtype=dtype, **kwargs)
        self.rate = _rate_or_stddev(rate, "rate", cls_name)
        self._core = _core_layer(cls_name, {"name": self._name, "rate": self.rate, "seed": _seed(seed, cls_name),
                                            **(extra or {})})
        self.seed = json.loads(self._core.config_json())["seed"]
        self.supports_masking = True


class SpatialDropout1D(_SpatialDropout):
    """keras.layers.SpatialDropout1D(rate, seed=None): on (batch, steps, channels), drops whole
    channels of each example in training (the kept ones scaled by 1 / (1 - rate))."""

    def __init__(self, rate, seed=None, name=None, dtype=None, **kwargs):
        super().__init__(rate, seed=seed, name=name, dtype=dtype, **kwargs)


class SpatialDropout2D(_SpatialDropout):
    """keras.layers.SpatialDropout2D(rate, data_format=None, seed=None): on channels_last images
    (batch, rows, cols, channels), drops whole channels of each example in training.
    data_format="channels_first" is refused (mdtrain's images are channels_last)."""

    _attributes = ("rate", "seed", "data_format")

    def __init__(self, rate, data_format=None, seed=None, name=None, dtype=None, **kwargs):
        # Keras's standardize_data_format, then mdtrain's channels_last only.
        data_format = "channels_last" if data_format is None else str(data_format).lower()
        if data_format not in ("channels_first", "channels_last"):
            raise ValueError("The `data_format` argument must be one of {'channels_first', 'channels_last'}. "
                             f"Received: data_format={data_format}")
        if data_format != "channels_last":
            raise ValueError(f"SpatialDropout2D: data_format={data_format!r} is not supported (only "
                             "'channels_last', as the convolutions)")
        self.data_format = data_format
        super().__init__(rate, seed=seed, name=name, dtype=dtype, extra={"data_format": data_format}, **kwargs)


def _penalty_factor(value, name):
    """Keras's L1L2 argument check (validate_float_arg); None is 0."""
    if value is None:
        return 0.0
    if (isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating))
            or math.isinf(value) or math.isnan(value) or value < 0):
        raise ValueError(f"Invalid value for argument {name}: expected a non-negative float.Received: {name}={value}")
    return float(value)


class ActivityRegularization(_ConfigAttributes, Layer):
    """keras.layers.ActivityRegularization(l1=0.0, l2=0.0): its input unchanged; fit and evaluate add
    (l1 * sum|x| + l2 * sum x^2) / batch size of its output to the loss of each step, as Keras 3
    adds an activity regularizer's loss. Passes masks on."""

    _attributes = ("l1", "l2")

    def __init__(self, l1=0.0, l2=0.0, **kwargs):
        super().__init__(**kwargs)
        self.l1 = _penalty_factor(l1, "l1")
        self.l2 = _penalty_factor(l2, "l2")
        self._core = _core_layer("ActivityRegularization", {"name": self._name, "l1": self.l1, "l2": self.l2})
        self.supports_masking = True


_CLASSES.update({"GaussianNoise": GaussianNoise, "GaussianDropout": GaussianDropout,
                 "SpatialDropout1D": SpatialDropout1D, "SpatialDropout2D": SpatialDropout2D,
                 "ActivityRegularization": ActivityRegularization})
