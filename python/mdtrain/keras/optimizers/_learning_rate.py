"""optimizer.learning_rate as Keras shows it: a scalar float32 variable.

Keras code reads it with .numpy(), float(), keras.backend.get_value or as a number in arithmetic,
and writes it with .assign(), keras.backend.set_value or `optimizer.learning_rate = x`. The value
lives in the optimizer (the C++ one once compiled, so every replica's optimizer sees a change at
once); this object only forwards to it. With a LearningRateSchedule the value read is the rate of
the current step.
"""
import operator

import numpy as np


class LearningRateVariable:
    dtype = "float32"
    shape = ()
    ndim = 0
    name = "learning_rate"
    trainable = False

    def __init__(self, optimizer):
        self._optimizer = optimizer

    # ---- reading -------------------------------------------------------------------------
    def _value(self):
        return self._optimizer._current_learning_rate()

    def numpy(self):
        return np.float32(self._value())

    def value(self):
        return self.numpy()

    read_value = value

    def __float__(self):
        return float(self._value())

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.numpy(), dtype=dtype)

    def __format__(self, spec):
        return format(self.numpy(), spec)

    def __repr__(self):
        return f"<Variable path=learning_rate, shape=(), dtype=float32, value={self.numpy()}>"

    def __bool__(self):
        return bool(self._value())

    # ---- writing -------------------------------------------------------------------------
    def assign(self, value):
        self._optimizer.learning_rate = value
        return self

    def assign_add(self, delta):
        return self.assign(float(self) + float(delta))

    def assign_sub(self, delta):
        return self.assign(float(self) - float(delta))

    # ---- a number in arithmetic and comparisons (Python float semantics) -------------------
    def _binary(op, reflected=False):
        def method(self, other):
            if isinstance(other, LearningRateVariable):
                other = float(other)
            elif not isinstance(other, (int, float, np.number, np.ndarray)):
                return NotImplemented
            return op(other, float(self)) if reflected else op(float(self), other)

        return method

    __add__, __radd__ = _binary(operator.add), _binary(operator.add, True)
    __sub__, __rsub__ = _binary(operator.sub), _binary(operator.sub, True)
    __mul__, __rmul__ = _binary(operator.mul), _binary(operator.mul, True)
    __truediv__, __rtruediv__ = _binary(operator.truediv), _binary(operator.truediv, True)
    __pow__, __rpow__ = _binary(operator.pow), _binary(operator.pow, True)
    __eq__, __ne__ = _binary(operator.eq), _binary(operator.ne)
    __lt__, __le__ = _binary(operator.lt), _binary(operator.le)
    __gt__, __ge__ = _binary(operator.gt), _binary(operator.ge)
    del _binary

    __hash__ = object.__hash__

    def __neg__(self):
        return -float(self)

    def __abs__(self):
        return abs(float(self))
