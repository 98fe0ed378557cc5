"""keras.layers' convolutions (C++: nn/conv2d)."""
import numpy as np

from mdtrain.keras._serialization import to_config
from mdtrain.keras.layers._arguments import _int_pair, _keras_default_name, _set_attributes_from_config, _string_arg
from mdtrain.keras.layers.base_layer import _CLASSES, Layer, _KernelBias, _activation_name, _core_layer


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


Convolution2D = Conv2D

_CLASSES.update({"Conv2D": Conv2D})
