"""keras.layers' convolutions (C++: nn/conv2d, nn/conv1d, nn/conv_transpose, nn/depthwise_conv2d,
nn/separable_conv2d)."""
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


def _filters(filters, name):
    if isinstance(filters, bool) or not isinstance(filters, (int, np.integer)):
        raise ValueError(f'layer "{name}": Invalid value for argument `filters`. Expected a strictly positive '
                         f"value. Received filters={filters!r}.")
    return int(filters)


def _depth_multiplier(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f'layer "{name}": Invalid value for argument `depth_multiplier`. Expected a strictly '
                         f"positive value. Received depth_multiplier={value!r}.")
    return int(value)


def _refuse_unsupported(cls, name, **arguments):
    """Keras arguments mdtrain does not implement: refused, never dropped."""
    for arg, value in arguments.items():
        if value is not None:
            raise NotImplementedError(f'{cls} "{name}": {arg} is not supported yet')


class _ConvTranspose(_KernelBias, Layer):
    """What Conv1DTranspose and Conv2DTranspose share; kernel (*kernel_size, filters, in_channels)."""
    _RANK = None
    _CORE_CLASS = None
    _DEFAULT_NAME = None
    _CONFIG_ATTRIBUTES = ("filters", "kernel_size", "strides", "padding", "output_padding", "data_format",
                          "dilation_rate", "use_bias")

    def __init__(self, filters, kernel_size, strides, padding, output_padding, data_format, dilation_rate,
                 activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
                 activity_regularizer, kernel_constraint, bias_constraint, **kwargs):
        _keras_default_name(kwargs, self._DEFAULT_NAME)
        super().__init__(**kwargs)
        name, cls, n = self._name, self._CORE_CLASS, self._RANK
        filters = _filters(filters, name)
        _refuse_unsupported(cls, name, activity_regularizer=activity_regularizer,
                            kernel_constraint=kernel_constraint, bias_constraint=bias_constraint)
        self._core = _core_layer(cls, {
            "name": name, "filters": filters, "kernel_size": _int_tuple(kernel_size, n, "kernel_size", name),
            "strides": _int_tuple(strides, n, "strides", name), "padding": _string_arg(padding, "padding", name),
            "output_padding": None if output_padding is None else _int_tuple(output_padding, n, "output_padding",
                                                                              name),
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


class Conv2DTranspose(_ConvTranspose):
    """keras.layers.Conv2DTranspose on channels_last images; kernel (kh, kw, filters, in_channels);
    the output size is Keras's compute_conv_transpose_output_shape."""
    _RANK, _CORE_CLASS, _DEFAULT_NAME = 2, "Conv2DTranspose", "conv2d_transpose"

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", output_padding=None, data_format=None,
                 dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(filters, kernel_size, strides, padding, output_padding, data_format, dilation_rate,
                         activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                         bias_regularizer, activity_regularizer, kernel_constraint, bias_constraint, **kwargs)


class Conv1DTranspose(_ConvTranspose):
    """keras.layers.Conv1DTranspose on channels_last sequences; kernel (kernel_size, filters,
    in_channels)."""
    _RANK, _CORE_CLASS, _DEFAULT_NAME = 1, "Conv1DTranspose", "conv1d_transpose"

    def __init__(self, filters, kernel_size, strides=1, padding="valid", output_padding=None, data_format=None,
                 dilation_rate=1, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(filters, kernel_size, strides, padding, output_padding, data_format, dilation_rate,
                         activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                         bias_regularizer, activity_regularizer, kernel_constraint, bias_constraint, **kwargs)


def _window_config(name, kernel_size, strides, padding, data_format, dilation_rate, depth_multiplier):
    return {"name": name, "depth_multiplier": _depth_multiplier(depth_multiplier, name),
            "kernel_size": _int_tuple(kernel_size, 2, "kernel_size", name),
            "strides": _int_tuple(strides, 2, "strides", name), "padding": _string_arg(padding, "padding", name),
            "data_format": _string_arg(data_format, "data_format", name, "channels_last"),
            "dilation_rate": _int_tuple(dilation_rate, 2, "dilation_rate", name)}


class DepthwiseConv2D(_KernelBias, Layer):
    """keras.layers.DepthwiseConv2D on channels_last images: kernel (kh, kw, in_channels,
    depth_multiplier) (named "kernel", as Keras 3 names it), bias (in_channels * depth_multiplier)."""
    _CONFIG_ATTRIBUTES = ("depth_multiplier", "kernel_size", "strides", "padding", "data_format", "dilation_rate",
                          "use_bias")

    def __init__(self, kernel_size, strides=(1, 1), padding="valid", depth_multiplier=1, data_format=None,
                 dilation_rate=(1, 1), activation=None, use_bias=True, depthwise_initializer="glorot_uniform",
                 bias_initializer="zeros", depthwise_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, depthwise_constraint=None, bias_constraint=None, **kwargs):
        _keras_default_name(kwargs, "depthwise_conv2d")
        super().__init__(**kwargs)
        name = self._name
        _refuse_unsupported("DepthwiseConv2D", name, activity_regularizer=activity_regularizer,
                            depthwise_constraint=depthwise_constraint, bias_constraint=bias_constraint)
        config = _window_config(name, kernel_size, strides, padding, data_format, dilation_rate, depth_multiplier)
        config.update({
            "activation": _activation_name(activation, f'DepthwiseConv2D "{name}"'), "use_bias": bool(use_bias),
            "depthwise_initializer": to_config(depthwise_initializer, "initializer"),
            "bias_initializer": to_config(bias_initializer, "initializer"),
            "depthwise_regularizer": to_config(depthwise_regularizer, "regularizer"),
            "bias_regularizer": to_config(bias_regularizer, "regularizer")})
        self._core = _core_layer("DepthwiseConv2D", config)
        _set_attributes_from_config(self, self._CONFIG_ATTRIBUTES)

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        _set_attributes_from_config(layer, cls._CONFIG_ATTRIBUTES)
        return layer


class SeparableConv2D(Layer):
    """keras.layers.SeparableConv2D on channels_last images: depthwise_kernel (kh, kw, in_channels,
    depth_multiplier), pointwise_kernel (1, 1, in_channels * depth_multiplier, filters), bias (filters)."""
    _CONFIG_ATTRIBUTES = ("depth_multiplier", "filters", "kernel_size", "strides", "padding", "data_format",
                          "dilation_rate", "use_bias")

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None, dilation_rate=(1, 1),
                 depth_multiplier=1, activation=None, use_bias=True, depthwise_initializer="glorot_uniform",
                 pointwise_initializer="glorot_uniform", bias_initializer="zeros", depthwise_regularizer=None,
                 pointwise_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 depthwise_constraint=None, pointwise_constraint=None, bias_constraint=None, **kwargs):
        _keras_default_name(kwargs, "separable_conv2d")
        super().__init__(**kwargs)
        name = self._name
        filters = _filters(filters, name)
        _refuse_unsupported("SeparableConv2D", name, activity_regularizer=activity_regularizer,
                            depthwise_constraint=depthwise_constraint, pointwise_constraint=pointwise_constraint,
                            bias_constraint=bias_constraint)
        config = _window_config(name, kernel_size, strides, padding, data_format, dilation_rate, depth_multiplier)
        config.update({
            "filters": filters, "activation": _activation_name(activation, f'SeparableConv2D "{name}"'),
            "use_bias": bool(use_bias), "depthwise_initializer": to_config(depthwise_initializer, "initializer"),
            "pointwise_initializer": to_config(pointwise_initializer, "initializer"),
            "bias_initializer": to_config(bias_initializer, "initializer"),
            "depthwise_regularizer": to_config(depthwise_regularizer, "regularizer"),
            "pointwise_regularizer": to_config(pointwise_regularizer, "regularizer"),
            "bias_regularizer": to_config(bias_regularizer, "regularizer")})
        self._core = _core_layer("SeparableConv2D", config)
        _set_attributes_from_config(self, self._CONFIG_ATTRIBUTES)

    @property
    def depthwise_kernel(self):
        return self.get_weights()[0]

    @property
    def pointwise_kernel(self):
        return self.get_weights()[1]

    @property
    def bias(self):
        w = self.get_weights()
        return w[2] if len(w) > 2 else None

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        _set_attributes_from_config(layer, cls._CONFIG_ATTRIBUTES)
        return layer


Convolution2D = Conv2D
Convolution1D = Conv1D
Convolution2DTranspose = Conv2DTranspose
Convolution1DTranspose = Conv1DTranspose
SeparableConvolution2D = SeparableConv2D

_CLASSES.update({"Conv2D": Conv2D, "Conv1D": Conv1D, "Conv2DTranspose": Conv2DTranspose,
                 "Conv1DTranspose": Conv1DTranspose, "DepthwiseConv2D": DepthwiseConv2D,
                 "SeparableConv2D": SeparableConv2D})
