"""keras.layers' reshaping layers (C++: nn/permute, nn/repeat_vector, nn/identity,
nn/zero_padding, nn/cropping, nn/up_sampling, all data movement through ops::strided_view):
Permute, RepeatVector, Identity, ZeroPadding1D/2D, Cropping1D/2D, UpSampling1D/2D. Reshape and
Flatten stay in core.py. channels_last only; UpSampling2D interpolates "nearest" or "bilinear"."""
import numpy as np

from mdtrain.keras.layers._arguments import _keras_default_name, _set_attributes_from_config, _string_arg
from mdtrain.keras.layers.base_layer import _CLASSES, Layer, _core_layer


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _standardize_tuple(value, n, argname, layer_name, allow_zero=False):
    """Keras's argument_validation.standardize_tuple, with its messages (after the layer's name)."""
    message = f'layer "{layer_name}": The `{argname}` argument must be a tuple of {n} integers. Received {argname}={value}'
    if _is_int(value):
        items = (int(value),) * n
    else:
        try:
            items = tuple(value)
        except TypeError:
            raise ValueError(message) from None
        if len(items) != n:
            raise ValueError(message)
        for v in items:
            if not _is_int(v):
                raise ValueError(f"{message}including element {v} of type {type(v)}")
        items = tuple(int(v) for v in items)
    bad = {v for v in items if (v < 0 if allow_zero else v <= 0)}
    if bad:
        raise ValueError(f"{message}, including values {bad} that do not satisfy `value {'>= 0' if allow_zero else '> 0'}`")
    return list(items)


def _pairs_2d(value, argname, layer_name):
    """ZeroPadding2D's and Cropping2D's forms: an int, a pair (symmetric per dimension) or a pair of
    pairs ((top, bottom), (left, right)), with Keras's messages."""
    if _is_int(value):
        if value < 0:
            raise ValueError(f'layer "{layer_name}": `{argname}` cannot be negative. Received: {argname}={value}.')
        return [[int(value)] * 2, [int(value)] * 2]
    if hasattr(value, "__len__") and not isinstance(value, str):
        if len(value) != 2:
            raise ValueError(f'layer "{layer_name}": `{argname}` should have two elements. Received: {argname}={value}.')
        return [_standardize_tuple(value[0], 2, f"1st entry of {argname}", layer_name, allow_zero=True),
                _standardize_tuple(value[1], 2, f"2nd entry of {argname}", layer_name, allow_zero=True)]
    raise ValueError(f'layer "{layer_name}": `{argname}` should be either an int, a tuple of 2 ints '
                     "(symmetric_height_crop, symmetric_width_crop), or a tuple of 2 tuples of 2 ints "
                     f"((top_crop, bottom_crop), (left_crop, right_crop)). Received: {argname}={value}.")


def _pairs_attribute(value):
    return tuple(tuple(v) if isinstance(v, list) else v for v in value) if isinstance(value, (list, tuple)) else value


class _Reshaping(Layer):
    """A reshaping layer: its Keras config goes to C++ (which checks it again); its attributes are
    read back from the C++ config, so a loaded layer reports the same."""
    _CORE_CLASS = None
    _DEFAULT_NAME = None
    _CONFIG_ATTRIBUTES = ()

    def _make(self, config):
        self._core = _core_layer(self._CORE_CLASS, {"name": self._name, **config})
        self._read_attributes()

    def _read_attributes(self):
        _set_attributes_from_config(self, self._CONFIG_ATTRIBUTES)
        for name in self._CONFIG_ATTRIBUTES:
            setattr(self, name, _pairs_attribute(getattr(self, name)))

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        layer._read_attributes()
        return layer


class Permute(_Reshaping):
    """keras.layers.Permute(dims): dims (1-based, batch excluded) orders the output's axes."""
    _CORE_CLASS = "Permute"
    _CONFIG_ATTRIBUTES = ("dims",)

    def __init__(self, dims, **kwargs):
        super().__init__(**kwargs)
        dims = tuple(dims)
        if sorted(dims) != list(range(1, len(dims) + 1)):
            raise ValueError("Invalid permutation argument `dims` for Permute Layer. The set of indices in `dims` must "
                             f"be consecutive and start from 1. Received dims={dims}")
        self._make({"dims": [int(d) for d in dims]})


class RepeatVector(_Reshaping):
    """keras.layers.RepeatVector(n): (batch, features) -> (batch, n, features)."""
    _CORE_CLASS = "RepeatVector"
    _CONFIG_ATTRIBUTES = ("n",)

    def __init__(self, n, **kwargs):
        super().__init__(**kwargs)
        if not _is_int(n):
            raise TypeError(f"Expected an integer value for `n`, got {type(n)}.")
        if n <= 0:
            raise ValueError(f"Argument `n` should be a positive integer. Received: n={n}")
        self._make({"n": int(n)})


class Identity(_Reshaping):
    """keras.layers.Identity: its input unchanged; it passes a mask on (Keras's supports_masking)."""
    _CORE_CLASS = "Identity"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._make({})
        self.supports_masking = True

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        layer.supports_masking = True
        return layer


def _data_format(value, layer_name):
    return _string_arg(value, "data_format", layer_name, "channels_last").lower()


class ZeroPadding1D(_Reshaping):
    """keras.layers.ZeroPadding1D(padding=1): zeros before and after the steps of (batch, steps, c)."""
    _CORE_CLASS = "ZeroPadding1D"
    _DEFAULT_NAME = "zero_padding1d"
    _CONFIG_ATTRIBUTES = ("padding", "data_format")

    def __init__(self, padding=1, data_format=None, **kwargs):
        _keras_default_name(kwargs, self._DEFAULT_NAME)
        super().__init__(**kwargs)
        self._make({"padding": _standardize_tuple(padding, 2, "padding", self._name, allow_zero=True),
                    "data_format": _data_format(data_format, self._name)})


class ZeroPadding2D(_Reshaping):
    """keras.layers.ZeroPadding2D(padding=(1, 1)): zero rows and columns around channels_last images."""
    _CORE_CLASS = "ZeroPadding2D"
    _DEFAULT_NAME = "zero_padding2d"
    _CONFIG_ATTRIBUTES = ("padding", "data_format")

    def __init__(self, padding=(1, 1), data_format=None, **kwargs):
        _keras_default_name(kwargs, self._DEFAULT_NAME)
        super().__init__(**kwargs)
        self._make({"padding": _pairs_2d(padding, "padding", self._name),
                    "data_format": _data_format(data_format, self._name)})


class Cropping1D(_Reshaping):
    """keras.layers.Cropping1D(cropping=(1, 1)): steps cut off the start and end of (batch, steps, c)."""
    _CORE_CLASS = "Cropping1D"
    _DEFAULT_NAME = "cropping1d"
    _CONFIG_ATTRIBUTES = ("cropping",)

    def __init__(self, cropping=(1, 1), **kwargs):
        _keras_default_name(kwargs, self._DEFAULT_NAME)
        super().__init__(**kwargs)
        self._make({"cropping": _standardize_tuple(cropping, 2, "cropping", self._name, allow_zero=True)})


class Cropping2D(_Reshaping):
    """keras.layers.Cropping2D(cropping=((0, 0), (0, 0))): rows and columns cut off channels_last images."""
    _CORE_CLASS = "Cropping2D"
    _DEFAULT_NAME = "cropping2d"
    _CONFIG_ATTRIBUTES = ("cropping", "data_format")

    def __init__(self, cropping=((0, 0), (0, 0)), data_format=None, **kwargs):
        _keras_default_name(kwargs, self._DEFAULT_NAME)
        super().__init__(**kwargs)
        self._make({"cropping": _pairs_2d(cropping, "cropping", self._name),
                    "data_format": _data_format(data_format, self._name)})


class UpSampling1D(_Reshaping):
    """keras.layers.UpSampling1D(size=2): each step of (batch, steps, c) repeated size times."""
    _CORE_CLASS = "UpSampling1D"
    _DEFAULT_NAME = "up_sampling1d"
    _CONFIG_ATTRIBUTES = ("size",)

    def __init__(self, size=2, **kwargs):
        _keras_default_name(kwargs, self._DEFAULT_NAME)
        super().__init__(**kwargs)
        if not _is_int(size):
            raise TypeError(f"Expected an integer value for `size`, got {type(size)}.")
        if size <= 0:
            raise ValueError(f"Argument `size` should be a positive integer. Received: size={size}")
        self._make({"size": int(size)})


# Keras's other interpolations (ops.image.resize's), which mdtrain does not compute.
_RESIZE_INTERPOLATIONS = ("bicubic", "lanczos3", "lanczos5")


class UpSampling2D(_Reshaping):
    """keras.layers.UpSampling2D(size=(2, 2), interpolation="nearest"): each pixel of channels_last
    images repeated size[0] x size[1] times, or "bilinear": TF's half-pixel bilinear resize."""
    _CORE_CLASS = "UpSampling2D"
    _DEFAULT_NAME = "up_sampling2d"
    _CONFIG_ATTRIBUTES = ("size", "data_format", "interpolation")

    def __init__(self, size=(2, 2), data_format=None, interpolation="nearest", **kwargs):
        _keras_default_name(kwargs, self._DEFAULT_NAME)
        super().__init__(**kwargs)
        interpolation = _string_arg(interpolation, "interpolation", self._name).lower()
        if interpolation in _RESIZE_INTERPOLATIONS:
            raise NotImplementedError(f'UpSampling2D "{self._name}": interpolation={interpolation!r} is not supported '
                                      "yet; only 'nearest' and 'bilinear'")
        if interpolation not in ("nearest", "bilinear"):
            raise ValueError(f'layer "{self._name}": interpolation must be one of "nearest", "bilinear", '
                             f'{", ".join(repr(i) for i in _RESIZE_INTERPOLATIONS)}. Received: '
                             f"interpolation={interpolation!r}")
        self._make({"size": _standardize_tuple(size, 2, "size", self._name),
                    "data_format": _data_format(data_format, self._name), "interpolation": interpolation})


_CLASSES.update({"Permute": Permute, "RepeatVector": RepeatVector, "Identity": Identity,
                 "ZeroPadding1D": ZeroPadding1D, "ZeroPadding2D": ZeroPadding2D, "Cropping1D": Cropping1D,
                 "Cropping2D": Cropping2D, "UpSampling1D": UpSampling1D, "UpSampling2D": UpSampling2D})
