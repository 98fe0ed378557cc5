"""keras.layers' pooling (C++: nn/pooling2d, nn/pooling1d, nn/global_average_pooling2d,
nn/global_average_pooling1d, nn/global_max_pooling)."""
from mdtrain.keras.layers._arguments import _int_tuple, _keras_default_name, _set_attributes_from_config, _string_arg
from mdtrain.keras.layers.base_layer import _CLASSES, Layer, _core_layer


class _Pooling(Layer):
    _RANK = None
    _CORE_CLASS = None
    _DEFAULT_NAME = None
    _CONFIG_ATTRIBUTES = ("pool_size", "strides", "padding", "data_format")

    def __init__(self, pool_size, strides=None, padding="valid", data_format=None, **kwargs):
        _keras_default_name(kwargs, self._DEFAULT_NAME)
        super().__init__(**kwargs)
        name, n = self._name, self._RANK
        self._core = _core_layer(self._CORE_CLASS, {
            "name": name, "pool_size": _int_tuple(pool_size, n, "pool_size", name),
            "strides": None if strides is None else _int_tuple(strides, n, "strides", name),
            "padding": _string_arg(padding, "padding", name),
            "data_format": _string_arg(data_format, "data_format", name, "channels_last")})
        _set_attributes_from_config(self, self._CONFIG_ATTRIBUTES)

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        _set_attributes_from_config(layer, cls._CONFIG_ATTRIBUTES)
        return layer


class _Pooling2D(_Pooling):
    _RANK = 2

    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", data_format=None, **kwargs):
        super().__init__(pool_size, strides, padding, data_format, **kwargs)


class _Pooling1D(_Pooling):
    _RANK = 1

    def __init__(self, pool_size=2, strides=None, padding="valid", data_format=None, **kwargs):
        super().__init__(pool_size, strides, padding, data_format, **kwargs)


class MaxPooling2D(_Pooling2D):
    """keras.layers.MaxPooling2D (strides=None means pool_size)."""
    _CORE_CLASS = "MaxPooling2D"
    _DEFAULT_NAME = "max_pooling2d"


class AveragePooling2D(_Pooling2D):
    """keras.layers.AveragePooling2D; with padding="same" the padding is not counted, as in TF."""
    _CORE_CLASS = "AveragePooling2D"
    _DEFAULT_NAME = "average_pooling2d"


class MaxPooling1D(_Pooling1D):
    """keras.layers.MaxPooling1D on (batch, steps, channels) (strides=None means pool_size)."""
    _CORE_CLASS = "MaxPooling1D"
    _DEFAULT_NAME = "max_pooling1d"


class AveragePooling1D(_Pooling1D):
    """keras.layers.AveragePooling1D; with padding="same" the padding is not counted, as in TF."""
    _CORE_CLASS = "AveragePooling1D"
    _DEFAULT_NAME = "average_pooling1d"


class GlobalAveragePooling1D(Layer):
    """keras.layers.GlobalAveragePooling1D: the mean over the steps; with a mask (Embedding with
    mask_zero=True before it) the mean of the unmasked steps only, and no mask after it."""
    _would_read_mask = True  # mask_after; C++ nn/global_average_pooling1d.h
    supports_masking = True  # as Keras's

    def __init__(self, data_format=None, keepdims=False, **kwargs):
        _keras_default_name(kwargs, "global_average_pooling1d")
        super().__init__(**kwargs)
        self._core = _core_layer("GlobalAveragePooling1D", {
            "name": self._name, "keepdims": bool(keepdims),
            "data_format": _string_arg(data_format, "data_format", self._name, "channels_last")})
        _set_attributes_from_config(self, ("data_format", "keepdims"))

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        _set_attributes_from_config(layer, ("data_format", "keepdims"))
        return layer


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


class _GlobalMaxPooling(Layer):
    """GlobalMaxPooling1D/2D: the maximum per channel; backward routes the gradient to the first of
    equal maxima (TF splits it between ties) and a NaN wins over numbers (nn/global_max_pooling.h)."""
    _CORE_CLASS = None
    _DEFAULT_NAME = None

    def __init__(self, data_format=None, keepdims=False, **kwargs):
        _keras_default_name(kwargs, self._DEFAULT_NAME)
        super().__init__(**kwargs)
        self._core = _core_layer(self._CORE_CLASS, {
            "name": self._name, "keepdims": bool(keepdims),
            "data_format": _string_arg(data_format, "data_format", self._name, "channels_last")})
        _set_attributes_from_config(self, ("data_format", "keepdims"))

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        _set_attributes_from_config(layer, ("data_format", "keepdims"))
        return layer


class GlobalMaxPooling1D(_GlobalMaxPooling):
    """keras.layers.GlobalMaxPooling1D: (batch, steps, channels) to (batch, channels)."""
    _CORE_CLASS = "GlobalMaxPooling1D"
    _DEFAULT_NAME = "global_max_pooling1d"


class GlobalMaxPooling2D(_GlobalMaxPooling):
    """keras.layers.GlobalMaxPooling2D: (batch, h, w, channels) to (batch, channels)."""
    _CORE_CLASS = "GlobalMaxPooling2D"
    _DEFAULT_NAME = "global_max_pooling2d"


MaxPool2D = MaxPooling2D
AvgPool2D = AveragePooling2D
GlobalAvgPool2D = GlobalAveragePooling2D
MaxPool1D = MaxPooling1D
AvgPool1D = AveragePooling1D
GlobalAvgPool1D = GlobalAveragePooling1D
GlobalMaxPool1D = GlobalMaxPooling1D
GlobalMaxPool2D = GlobalMaxPooling2D

_CLASSES.update({"MaxPooling2D": MaxPooling2D, "AveragePooling2D": AveragePooling2D,
                 "GlobalAveragePooling2D": GlobalAveragePooling2D, "MaxPooling1D": MaxPooling1D,
                 "AveragePooling1D": AveragePooling1D, "GlobalAveragePooling1D": GlobalAveragePooling1D,
                 "GlobalMaxPooling1D": GlobalMaxPooling1D, "GlobalMaxPooling2D": GlobalMaxPooling2D})
