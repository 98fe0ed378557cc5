"""keras.layers' core layers: Dense, Activation, Flatten, Dropout, Masking, Reshape, InputLayer."""
import json

import numpy as np

from mdtrain import _random
from mdtrain.keras import _keras_tensor, _naming
from mdtrain.keras._serialization import to_config
from mdtrain.keras.layers.base_layer import _CLASSES, Layer, _KernelBias, _activation_name, _core_layer, _shape_tuple


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
        self.shape = _shape_tuple(shape, "shape", "InputLayer")  # None: any size per batch
        self.name = name or _naming.unique_name("input_layer")
        self.batch_size = batch_size


Input = _keras_tensor.Input


_CLASSES.update({"Dense": Dense, "Activation": Activation, "Flatten": Flatten, "Dropout": Dropout, "Masking": Masking,
                 "Reshape": Reshape})
