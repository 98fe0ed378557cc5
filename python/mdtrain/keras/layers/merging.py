"""keras.layers' merges (C++: nn/merge_layer, nn/elementwise_merge, nn/concatenate, nn/dot)."""
import json

import numpy as np

from mdtrain.keras import _keras_tensor
from mdtrain.keras.layers.base_layer import _CLASSES, Layer, _core_layer, _refuse_call_kwargs


class _Merge(Layer):
    """A layer called on a list of tensors (keras.layers.Add, Subtract, Multiply, Average, Maximum,
    Minimum, Concatenate, Dot). In a model it runs in C++; called on eager tensors it is the eager
    ops below (recorded by GradientTape)."""

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
    """tensors[0] op tensors[1] op ..., in input order (as the C++ layer folds them). Inputs of lower
    rank first gain axes of size 1 after the batch axis (Keras's Merge: expand_dims(x, 1)), then
    the ops broadcast."""
    from mdtrain._eager import ops

    rank = max(len(t.shape) for t in tensors)
    expanded = []
    for t in tensors:
        for _ in range(rank - len(t.shape)):
            t = ops.expand_dims(t, 1)
        expanded.append(t)
    out = expanded[0]
    for t in expanded[1:]:
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


class Subtract(_Merge):
    """keras.layers.Subtract: inputs[0] - inputs[1] (exactly two inputs)."""

    def _eager(self, tensors):
        return _fold("subtract", tensors)


class Average(_Merge):
    """keras.layers.Average: the element-wise mean of the inputs (their sum divided by their count)."""

    def _eager(self, tensors):
        from mdtrain._eager import ops

        return ops.divide(_fold("add", tensors), float(len(tensors)))


class Maximum(_Merge):
    """keras.layers.Maximum: the element-wise maximum, folded in input order (TF's tf.maximum: NaN
    propagates; on ties the earlier input takes the gradient)."""

    def _eager(self, tensors):
        return _fold("maximum", tensors)


class Minimum(_Merge):
    """keras.layers.Minimum: the element-wise minimum, folded in input order (as Maximum)."""

    def _eager(self, tensors):
        return _fold("minimum", tensors)


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


class Dot(_Merge):
    """keras.layers.Dot(axes, normalize=False): the batched dot product of two inputs over `axes` (an
    int for the same axis of both, or a pair; the batch axis counted, never one of them); with
    normalize, each input is first L2-normalized along its axis (the cosine proximity)."""

    def __init__(self, axes, normalize=False, **kwargs):
        # Keras's checks, with its messages.
        if not _is_int(axes):
            if not isinstance(axes, (list, tuple)):
                raise TypeError(f"Invalid type for argument `axes`: it should be a list or an int. Received: axes={axes}")
            if len(axes) != 2:
                raise ValueError(f"Invalid format for argument `axes`: it should contain two elements. Received: "
                                 f"axes={axes}")
            if not _is_int(axes[0]) or not _is_int(axes[1]):
                raise ValueError(f"Invalid format for argument `axes`: list elements should be integers. Received: "
                                 f"axes={axes}")
        self.axes = int(axes) if _is_int(axes) else tuple(int(a) for a in axes)
        self.normalize = bool(normalize)
        super().__init__(**kwargs)

    def _merge_config(self):
        axes = self.axes if isinstance(self.axes, int) else list(self.axes)
        return {"name": self._name, "axes": axes, "normalize": self.normalize}

    def _eager(self, tensors):
        from mdtrain._eager import ops

        x, y = tensors
        axes = [self.axes, self.axes] if isinstance(self.axes, int) else list(self.axes)
        axes = [a % len(t.shape) if a < 0 else a for a, t in zip(axes, (x, y))]
        if self.normalize:
            x, y = _l2_normalize(x, axes[0]), _l2_normalize(y, axes[1])
        return _batch_dot(ops, x, y, axes)

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        config = json.loads(core_layer.config_json())
        layer.axes = config["axes"] if isinstance(config["axes"], int) else tuple(config["axes"])
        layer.normalize = config["normalize"]
        return layer


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _l2_normalize(x, axis):
    """keras.ops.normalize(x, axis, order=2): x * min(rsqrt(sum x^2), 1 / epsilon)."""
    from mdtrain._eager import ops

    inverse = ops.rsqrt(ops.reduce_sum(ops.square(x), axis=axis, keepdims=True))
    return ops.multiply(x, ops.minimum(inverse, 1e7))


def _batch_dot(ops, x, y, axes):
    """Keras's batch_dot: x's other axes then y's, contracted over x's axes[0] and y's axes[1]."""
    a, b = axes
    x_rest = [d for i, d in enumerate(x.shape) if i not in (0, a)]
    y_rest = [d for i, d in enumerate(y.shape) if i not in (0, b)]
    # (batch, rest of x, k) @ (batch, k, rest of y), then the rest unflattened.
    xp = ops.transpose(x, [0] + [i for i in range(1, len(x.shape)) if i != a] + [a])
    yp = ops.transpose(y, [0, b] + [i for i in range(1, len(y.shape)) if i != b])
    k = x.shape[a]
    out = ops.matmul(ops.reshape(xp, [-1, int(np.prod(x_rest, dtype=np.int64)), k]),
                     ops.reshape(yp, [-1, k, int(np.prod(y_rest, dtype=np.int64))]))
    return ops.reshape(out, [-1, *(x_rest + y_rest or [1])])


def add(inputs, **kwargs):
    """keras.layers.add: Add()(inputs)."""
    return Add(**kwargs)(inputs)


def multiply(inputs, **kwargs):
    """keras.layers.multiply: Multiply()(inputs)."""
    return Multiply(**kwargs)(inputs)


def concatenate(inputs, axis=-1, **kwargs):
    """keras.layers.concatenate: Concatenate(axis)(inputs)."""
    return Concatenate(axis=axis, **kwargs)(inputs)


def subtract(inputs, **kwargs):
    """keras.layers.subtract: Subtract()(inputs)."""
    return Subtract(**kwargs)(inputs)


def average(inputs, **kwargs):
    """keras.layers.average: Average()(inputs)."""
    return Average(**kwargs)(inputs)


def maximum(inputs, **kwargs):
    """keras.layers.maximum: Maximum()(inputs)."""
    return Maximum(**kwargs)(inputs)


def minimum(inputs, **kwargs):
    """keras.layers.minimum: Minimum()(inputs)."""
    return Minimum(**kwargs)(inputs)


def dot(inputs, axes=-1, **kwargs):
    """keras.layers.dot: Dot(axes, **kwargs)(inputs) (normalize among the kwargs)."""
    return Dot(axes=axes, **kwargs)(inputs)


_CLASSES.update({"Add": Add, "Multiply": Multiply, "Concatenate": Concatenate, "Subtract": Subtract,
                 "Average": Average, "Maximum": Maximum, "Minimum": Minimum, "Dot": Dot})
