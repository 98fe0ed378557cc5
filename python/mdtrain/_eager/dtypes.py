"""tf.DType and the dtype constants (tf.float32, ...): names over NumPy dtypes."""
import builtins

import numpy as np


class DType:
    """A tensor element type. Compares equal to itself, its name and the NumPy dtype it stands for."""

    __slots__ = ("_name", "_np")

    def __init__(self, name, np_dtype):
        self._name = name
        self._np = np.dtype(np_dtype)

    @property
    def name(self):
        return self._name

    @property
    def as_numpy_dtype(self):
        return self._np.type

    @property
    def base_dtype(self):
        return self

    @property
    def real_dtype(self):
        if self._name == "complex64":
            return float32
        if self._name == "complex128":
            return float64
        return self

    @property
    def is_floating(self):
        return self._np.kind == "f"

    @property
    def is_integer(self):
        return self._np.kind in "iu"

    @property
    def is_unsigned(self):
        return self._np.kind == "u"

    @property
    def is_bool(self):
        return self._np.kind == "b"

    @property
    def is_complex(self):
        return self._np.kind == "c"

    @property
    def is_numeric(self):
        return self._np.kind in "iufc"

    @property
    def size(self):
        return self._np.itemsize

    @property
    def min(self):
        return np.finfo(self._np).min if self.is_floating else np.iinfo(self._np).min

    @property
    def max(self):
        return np.finfo(self._np).max if self.is_floating else np.iinfo(self._np).max

    def is_compatible_with(self, other):
        return self == other

    def __eq__(self, other):
        if isinstance(other, DType):
            return self._name == other._name
        try:
            return self._name == as_dtype(other)._name
        except (TypeError, ValueError):
            return False

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self._name)

    def __repr__(self):
        return f"tf.{self._name}"

    def __str__(self):
        return f"<dtype: '{self._name}'>"

    def __reduce__(self):
        return as_dtype, (self._name,)


float16 = half = DType("float16", np.float16)
float32 = DType("float32", np.float32)
float64 = double = DType("float64", np.float64)
int8 = DType("int8", np.int8)
int16 = DType("int16", np.int16)
int32 = DType("int32", np.int32)
int64 = DType("int64", np.int64)
uint8 = DType("uint8", np.uint8)
uint16 = DType("uint16", np.uint16)
uint32 = DType("uint32", np.uint32)
uint64 = DType("uint64", np.uint64)
bool = DType("bool", np.bool_)  # noqa: A001 - tf.bool
complex64 = DType("complex64", np.complex64)
complex128 = DType("complex128", np.complex128)
string = DType("string", np.object_)

_ALL = (float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool, complex64,
        complex128, string)
_BY_NAME = {d.name: d for d in _ALL}
_BY_NAME.update({"half": float16, "double": float64})
# Python types as TF reads them (tf.as_dtype(float) is float32).
_PYTHON = {float: float32, int: int32, builtins.bool: bool, str: string, bytes: string, object: string}


_BY_NUMPY = {d._np: d for d in _ALL if d is not string}


def as_dtype(type_value):
    """tf.as_dtype: a DType from a DType, its name, a NumPy dtype or type, or a Python type."""
    if isinstance(type_value, DType):
        return type_value
    if isinstance(type_value, np.dtype):  # the common case: a tensor's array dtype
        found = _BY_NUMPY.get(type_value)
        if found is not None:
            return found
    if isinstance(type_value, str):
        found = _BY_NAME.get(type_value)
        if found is not None:
            return found
    elif isinstance(type_value, type) and type_value in _PYTHON:
        return _PYTHON[type_value]
    try:
        np_dtype = np.dtype(type_value)
    except TypeError:
        raise TypeError(f"Cannot convert the argument `type_value`: {type_value!r} to a TensorFlow DType.") from None
    if np_dtype.kind in "OUS":
        return string
    found = _BY_NAME.get(np_dtype.name)
    if found is None:
        raise TypeError(f"Cannot convert the argument `type_value`: {type_value!r} to a TensorFlow DType.")
    return found
