"""keras.layers' convolutions (C++: nn/conv2d, nn/conv1d)."""
import numpy as np

from mdtrain.keras._serialization import to_config
from mdtrain.keras.layers._arguments import _int_tuple, _keras_default_name, _set_attributes_from_config, _string_arg
from mdtrain.keras.layers.base_layer import _CLASSES, Layer, _KernelBias, _activation_name, _core_layer


class _Conv(_KernelBias, Layer):
    """What Conv1D and Conv2D share: Keras's arguments, made into the C++ layer's config."""
    _RANK = None
    _CORE_CLASS = None
    _DEFAULT_NAME = None
    _CONFIG_ATTRIBUTES = ("filters", "kernel_size", "strides", "padding", "data_format", "dilation_rate", "use_bias")

    def __init__(self, filters, kernel_size, strides, padding, data_format, dilation_rate, groups, activation,
                 use_bias, kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
                 activity_regularizer, kernel_constraint, bias_constraint, **kwargs):
        _keras_default_name(kwargs, self._DEFAULT_NAME)
        super().__init__(**kwargs)
        name, cls, n = self._name, self._CORE_CLASS, self._RANK
        if isinstance(filters, bool) or not isinstance(filters, (int, np.integer)):
            raise ValueError(f'layer "{name}": Invalid value for argument `filters`. Expected a strictly positive '
                             f"value. Received filters={filters!r}.")
        if groups != 1:
            raise NotImplementedError(f'{cls} "{name}": groups other than 1 are not supported yet')
        for arg, value in (("activity_regularizer", activity_regularizer), ("kernel_constraint", kernel_constraint),
                           ("bias_constraint", bias_constraint)):
            if value is not None:
                raise NotImplementedError(f'{cls} "{name}": {arg} is not supported yet')
        self._core = _core_layer(cls, {
            "name": name, "filters": int(filters), "kernel_size": _int_tuple(kernel_size, n, "kernel_size", name),
            "strides": _int_tuple(strides, n, "strides", name), "padding": _string_arg(padding, "padding", name),
            "data_format": _string_arg(data_format, "data_format", name, "channels_last"),
            "dilation_rate": _int_tuple(dilation_rate, n, "dilation_rate", name),
            "activation": _activation_name(activation, f'{cls} "{name}"'), "use_bias": bool(use_bias),
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


class Conv2D(_Conv):
    """keras.layers.Conv2D on channels_last images; kernel (kh, kw, in_channels, filters)."""
    _RANK, _CORE_CLASS, _DEFAULT_NAME = 2, "Conv2D", "conv2d"

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None, dilation_rate=(1, 1),
                 groups=1, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(filters, kernel_size, strides, padding, data_format, dilation_rate, groups, activation,
                         use_bias, kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
                         activity_regularizer, kernel_constraint, bias_constraint, **kwargs)


class Conv1D(_Conv):
    """keras.layers.Conv1D on channels_last sequences (batch, steps, channels); kernel
    (kernel_size, in_channels, filters); padding "valid", "same" or "causal"."""
    _RANK, _CORE_CLASS, _DEFAULT_NAME = 1, "Conv1D", "conv1d"

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None, dilation_rate=1, groups=1,
                 activation=None, use_bias=True, kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                 bias_constraint=None, **kwargs):
        super().__init__(filters, kernel_size, strides, padding, data_format, dilation_rate, groups, activation,
                         use_bias, kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
                         activity_regularizer, kernel_constraint, bias_constraint, **kwargs)


Convolution2D = Conv2D
Convolution1D = Conv1D

_CLASSES.update({"Conv2D": Conv2D, "Conv1D": Conv1D})
