"""The Python operators of tensors and variables (+, @, [], <, ==, ...), installed on import.

See ops.py for the conventions (dtypes, errors, recording on tapes)."""
import numpy as np

from mdtrain._eager import dtypes
from mdtrain._eager.variables import Variable
from mdtrain._eager.tensor import EagerTensor, wrap
from mdtrain._eager.op_support import _pair, _tensor
from mdtrain._eager.math_ops import (abs, add, equal, floordiv, floormod, greater, greater_equal, less, less_equal,
                                     logical_and, logical_not, logical_or, logical_xor, matmul, multiply, negative,
                                     not_equal, pow, subtract, truediv)
from mdtrain._eager.array_ops import getitem


# ---- operators of tensors and variables ------------------------------------------------------

def _eq(a, b):
    if b is None:
        return False
    try:
        return equal(a, b)
    except (TypeError, ValueError):
        return False


def _ne(a, b):
    if b is None:
        return True
    try:
        return not_equal(a, b)
    except (TypeError, ValueError):
        return True


def _invert(a):
    a = _tensor(a)
    if a.dtype == dtypes.bool:
        return logical_not(a)
    return wrap(np.invert(a._value))


def _bitwise(op, logical, bitwise):
    def fn(a, b):
        a, b = _pair(a, b, op)
        if a.dtype == dtypes.bool:
            return logical(a, b)
        return wrap(np.asarray(bitwise(a._value, b._value)))

    return fn


_and = _bitwise("LogicalAnd", logical_and, np.bitwise_and)
_or = _bitwise("LogicalOr", logical_or, np.bitwise_or)
_xor = _bitwise("LogicalXor", logical_xor, np.bitwise_xor)


def _swap(fn):
    return lambda a, b: fn(b, a)


_OPERATORS = {
    "__add__": add, "__radd__": _swap(add),
    "__sub__": subtract, "__rsub__": _swap(subtract),
    "__mul__": multiply, "__rmul__": _swap(multiply),
    "__truediv__": truediv, "__rtruediv__": _swap(truediv),
    "__floordiv__": floordiv, "__rfloordiv__": _swap(floordiv),
    "__mod__": floormod, "__rmod__": _swap(floormod),
    "__pow__": pow, "__rpow__": _swap(pow),
    "__matmul__": matmul, "__rmatmul__": _swap(matmul),
    "__lt__": less, "__le__": less_equal, "__gt__": greater, "__ge__": greater_equal,
    "__eq__": _eq, "__ne__": _ne,
    "__and__": _and, "__rand__": _swap(_and), "__or__": _or, "__ror__": _swap(_or),
    "__xor__": _xor, "__rxor__": _swap(_xor),
    "__neg__": negative, "__abs__": abs, "__invert__": _invert, "__pos__": lambda a: _tensor(a),
    "__getitem__": getitem,
}


def _install_operators():
    for cls in (EagerTensor, Variable):
        for name, fn in _OPERATORS.items():
            if name == "__getitem__" and cls is Variable:
                continue

            def method(self, *args, _fn=fn):
                return _fn(self, *args)

            method.__name__ = name
            setattr(cls, name, method)


_install_operators()
