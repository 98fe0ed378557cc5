"""keras.layers' merges (C++: nn/merge_layer, nn/elementwise_merge, nn/concatenate)."""
import json

import numpy as np

from mdtrain.keras import _keras_tensor
from mdtrain.keras.layers.base_layer import _CLASSES, Layer, _core_layer, _refuse_call_kwargs


class _Merge(Layer):
    """A layer called on a list of tensors (keras.layers.Add, Multiply, Concatenate). In a model it
    runs in C++; called on eager tensors it is the eager ops below (recorded by GradientTape)."""

    _merge = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._core = _core_layer(type(self).__name__, self._merge_config())

    def _merge_config(self):
        return {"name": self._name}

    def __call__(self, inputs, training=None, **kwargs):
        # training changes nothing in a merge (as in Keras); other arguments are refused.
        _refuse_call_kwargs(self, kwargs)
        if _keras_tensor.is_symbolic(inputs):
            return _keras_tensor.call_symbolic(self, inputs)
        if not isinstance(inputs, (list, tuple)) or len(inputs) < 2:
            raise ValueError(f'A merge layer should be called on a list of at least 2 inputs. Layer "{self.name}" '
                             f"({type(self).__name__}) got {type(inputs).__name__}")
        from mdtrain._eager import keras_layers

        tensors = [keras_layers._as_input(x) for x in inputs]
        self._core.merged_shape([list(t.shape[1:]) for t in tensors])  # Keras's shape checks
        return self._eager(tensors)


def _fold(op_name, tensors):
    """tensors[0] op tensors[1] op ..., in input order (as the C++ layer folds them)."""
    from mdtrain._eager import ops

    out = tensors[0]
    for t in tensors[1:]:
        out = getattr(ops, op_name)(out, t)
    return out


class Add(_Merge):
    """keras.layers.Add: the element-wise sum of inputs of one shape."""

    def _eager(self, tensors):
        return _fold("add", tensors)


class Multiply(_Merge):
    """keras.layers.Multiply: the element-wise product of inputs of one shape."""

    def _eager(self, tensors):
        return _fold("multiply", tensors)


class Concatenate(_Merge):
    """keras.layers.Concatenate(axis=-1): the inputs joined along `axis` (batch axis counted)."""

    def __init__(self, axis=-1, **kwargs):
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise TypeError(f"Concatenate: axis must be an integer, got {axis!r}")
        self.axis = int(axis)
        super().__init__(**kwargs)

    def _merge_config(self):
        return {"name": self._name, "axis": self.axis}

    def _eager(self, tensors):
        from mdtrain._eager import ops

        return ops.concat(tensors, axis=self.axis)

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        layer.axis = json.loads(core_layer.config_json())["axis"]
        return layer


def add(inputs, **kwargs):
    """keras.layers.add: Add()(inputs)."""
    return Add(**kwargs)(inputs)


def multiply(inputs, **kwargs):
    """keras.layers.multiply: Multiply()(inputs)."""
    return Multiply(**kwargs)(inputs)


def concatenate(inputs, axis=-1, **kwargs):
    """keras.layers.concatenate: Concatenate(axis)(inputs)."""
    return Concatenate(axis=axis, **kwargs)(inputs)


_CLASSES.update({"Add": Add, "Multiply": Multiply, "Concatenate": Concatenate})
