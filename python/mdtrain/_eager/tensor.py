"""tf.Tensor (an eager tensor over a NumPy array), tf.TensorShape and tensor conversion.

A tensor's array is owned and read-only: ops make new arrays, so a tape may keep the arrays of
the values it recorded. Operators (+, @, indexing, comparisons) are installed by ops.py.
"""
import numbers

import numpy as np

from mdtrain._eager import dtypes
from mdtrain._eager import tape as _tape


class TensorShape:
    """tf.TensorShape: the dimensions of a tensor (None where unknown)."""

    __slots__ = ("_dims",)

    def __init__(self, dims):
        if isinstance(dims, TensorShape):
            dims = dims._dims
        if dims is None:
            self._dims = None
        elif isinstance(dims, (int, np.integer)):
            self._dims = (int(dims),)
        else:
            self._dims = tuple(None if d is None else int(d) for d in dims)

    @property
    def rank(self):
        return None if self._dims is None else len(self._dims)

    ndims = rank

    @property
    def dims(self):
        return None if self._dims is None else list(self._dims)

    def as_list(self):
        if self._dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self._dims)

    def num_elements(self):
        if self._dims is None or any(d is None for d in self._dims):
            return None
        return int(np.prod(self._dims, dtype=np.int64))

    def is_fully_defined(self):
        return self._dims is not None and all(d is not None for d in self._dims)

    def concatenate(self, other):
        other = TensorShape(other)
        if self._dims is None or other._dims is None:
            return TensorShape(None)
        return TensorShape(self._dims + other._dims)

    def is_compatible_with(self, other):
        other = TensorShape(other)
        if self._dims is None or other._dims is None:
            return True
        return len(self._dims) == len(other._dims) and all(
            a is None or b is None or a == b for a, b in zip(self._dims, other._dims))

    def __len__(self):
        if self._dims is None:
            raise ValueError("Cannot take the length of shape with unknown rank.")
        return len(self._dims)

    def __iter__(self):
        if self._dims is None:
            raise ValueError("Cannot iterate over a shape with unknown rank.")
        return iter(self._dims)

    def __getitem__(self, key):
        if isinstance(key, slice):
            return TensorShape(self._dims[key])
        return self._dims[key]

    def __eq__(self, other):
        if isinstance(other, TensorShape):
            return self._dims == other._dims
        if isinstance(other, (tuple, list)):
            return self._dims is not None and self._dims == tuple(other)
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return hash(self._dims)

    def __add__(self, other):
        return self.concatenate(other)

    def __radd__(self, other):
        return TensorShape(other).concatenate(self)

    def __bool__(self):
        return self._dims is not None

    def __repr__(self):
        return "TensorShape(None)" if self._dims is None else f"TensorShape({list(self._dims)})"

    def __str__(self):
        if self._dims is None:
            return "<unknown>"
        return str(self._dims) if len(self._dims) != 1 else f"({self._dims[0]},)"

    def __reduce__(self):
        return TensorShape, (self._dims,)


_NUMPY_TEXT = dict(edgeitems=3, threshold=1000)


class EagerTensor:
    """tf.Tensor: an immutable value with a shape and a dtype, computed eagerly."""

    # _keras_mask: the (batch, timesteps) mask a model's output carries (Keras's `_keras_mask`),
    # which a loss called on the output reads, as Keras's Loss.__call__ does.
    __slots__ = ("_value", "_id", "_keras_logits", "_keras_mask", "__weakref__")
    __array_priority__ = 100  # NumPy leaves `array + tensor` to the tensor

    def __init__(self, value, _id=None):
        # `value` must be an array this tensor may own (callers copy what they do not own).
        value = np.asarray(value)
        if value.flags.writeable:
            value.flags.writeable = False
        self._value = value
        self._id = _tape.new_id() if _id is None else _id
        self._keras_logits = None
        self._keras_mask = None

    # ---- attributes ------------------------------------------------------------------------
    @property
    def shape(self):
        return TensorShape(self._value.shape)

    def get_shape(self):
        return self.shape

    @property
    def dtype(self):
        return dtypes.as_dtype(self._value.dtype)

    @property
    def ndim(self):
        return self._value.ndim

    @property
    def device(self):
        return "/job:localhost/replica:0/task:0/device:CPU:0"

    @property
    def name(self):
        raise AttributeError("Tensor.name is undefined when eager execution is enabled.")

    def numpy(self):
        """A NumPy copy of the value (a NumPy scalar for a scalar tensor)."""
        value = self._value.copy()
        return value[()] if value.ndim == 0 else value

    def cpu(self):
        return self

    def ref(self):
        return _Reference(self)

    experimental_ref = ref

    def __array__(self, dtype=None, copy=None):
        value = self._value
        if dtype is not None and np.dtype(dtype) != value.dtype:
            return value.astype(dtype)
        return value.copy() if copy else value

    # ---- Python protocols ----------------------------------------------------------------
    def __len__(self):
        if self._value.ndim == 0:
            raise TypeError("Scalar tensor has no `len()`")
        return self._value.shape[0]

    def __iter__(self):
        if self._value.ndim == 0:
            raise TypeError("Cannot iterate over a scalar tensor.")
        return (self[i] for i in range(self._value.shape[0]))

    def __bool__(self):
        return bool(self._value)

    def __float__(self):
        return float(self._value)

    def __int__(self):
        return int(self._value)

    def __index__(self):
        if self._value.ndim != 0 or self._value.dtype.kind not in "iu":
            raise TypeError(f"Only integer scalar tensors can be used as an index, got {self!r}")
        return int(self._value)

    def __complex__(self):
        return complex(self._value)

    def __hash__(self):
        raise TypeError("Tensor is unhashable. Instead, use tensor.ref() as the key.")

    def __format__(self, spec):
        if self._value.ndim == 0:
            return format(self._value.item(), spec)
        return format(str(self), spec)

    def __repr__(self):
        value = self._value
        if value.ndim == 0:
            text = str(value[()])
            if value.dtype.kind in "OSU":
                text = repr(value[()])
        else:
            text = np.array_repr(value)
            if "\n" in text:
                text = "\n" + text
        return f"<tf.Tensor: shape={self.shape}, dtype={self.dtype.name}, numpy={text}>"

    def __str__(self):
        value = self._value
        text = np.array2string(value, **_NUMPY_TEXT) if value.ndim else str(value[()])
        return f"tf.Tensor({text}, shape={self.shape}, dtype={self.dtype.name})"

    def __reduce__(self):
        return _rebuild, (self._value.copy(),)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def _rebuild(value):
    return EagerTensor(value)


class _Reference:
    """tensor.ref(): a hashable handle on one tensor (or variable)."""

    __slots__ = ("_obj",)

    def __init__(self, obj):
        self._obj = obj

    def deref(self):
        return self._obj

    def __eq__(self, other):
        return isinstance(other, _Reference) and other._obj is self._obj

    def __hash__(self):
        return id(self._obj)


# (EagerTensor, Variable) once variables.py is imported: what converts to a tensor without a copy.
_TENSOR_TYPES = (EagerTensor,)


def is_tensor_like(value):
    return isinstance(value, _TENSOR_TYPES)


def _python_dtype(value):
    """The dtype TensorFlow infers for a Python value (lists of them included), or None when the
    value holds NumPy or tensor values whose dtype wins."""
    if isinstance(value, (list, tuple)):
        kinds = set()
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, (list, tuple)):
                stack.extend(item)
            elif isinstance(item, (np.ndarray, np.generic)) or is_tensor_like(item):
                return None
            elif isinstance(item, bool):
                kinds.add("b")
            elif isinstance(item, numbers.Integral):
                kinds.add("i")
            elif isinstance(item, numbers.Real):
                kinds.add("f")
            elif isinstance(item, numbers.Complex):
                kinds.add("c")
            elif isinstance(item, (str, bytes)):
                kinds.add("s")
        value_kinds = kinds
    elif isinstance(value, (np.generic, np.ndarray)):
        return None  # NumPy values keep their dtype (np.float64 is also a Python float)
    elif isinstance(value, bool):
        value_kinds = {"b"}
    elif isinstance(value, numbers.Integral) and not isinstance(value, np.integer):
        value_kinds = {"i"}
    elif isinstance(value, float):
        value_kinds = {"f"}
    elif isinstance(value, complex):
        value_kinds = {"c"}
    elif isinstance(value, (str, bytes)):
        value_kinds = {"s"}
    else:
        return None
    if "s" in value_kinds:
        return dtypes.string
    if "c" in value_kinds:
        return dtypes.complex128
    if "f" in value_kinds:
        return dtypes.float32
    if "i" in value_kinds:
        return "int"  # int32, or int64 when a value needs it
    if "b" in value_kinds:
        return dtypes.bool
    return dtypes.float32  # empty lists are float32 in TensorFlow


def _cast_checked(array, dtype, value, strict):
    """`array` as `dtype`; with `strict`, refuses casts that lose what the value says (1.5 to int32)."""
    target = np.dtype(dtype.as_numpy_dtype)
    if array.dtype == target:
        return array
    if strict:
        src, dst = array.dtype.kind, target.kind
        lossy = (src == "f" and dst in "iub") or (src == "c" and dst != "c") or (src in "OSU") != (dst in "OSU")
        if lossy:
            raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype {dtype.name}")
        if src in "iu" and dst in "iu" and array.size:
            info = np.iinfo(target)
            if array.min() < info.min or array.max() > info.max:
                raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype {dtype.name}")
    if target.kind == "O":
        return array.astype(object)
    return array.astype(target)


def convert_to_tensor(value, dtype=None, dtype_hint=None, name=None, _strict=True):
    """tf.convert_to_tensor: tensors pass through (the dtype must agree), variables are read,
    NumPy values keep their dtype, Python values get TensorFlow's (float32, int32, bool)."""
    if dtype is not None:
        dtype = dtypes.as_dtype(dtype)
    if isinstance(value, _TENSOR_TYPES):
        tensor = value if isinstance(value, EagerTensor) else value._snapshot()
        if dtype is not None and tensor.dtype != dtype:
            raise ValueError(f"Tensor conversion requested dtype {dtype.name} for Tensor with dtype "
                             f"{tensor.dtype.name}: {tensor!r}")
        return tensor
    if isinstance(value, dtypes.DType):
        raise TypeError(f"Cannot convert {value!r} to a tensor: it is a dtype")
    inferred = _python_dtype(value)
    if isinstance(value, TensorShape):
        value, inferred = value.as_list(), "int"
    try:
        array = np.asarray(value, dtype=object if inferred is dtypes.string else None)
    except (ValueError, TypeError) as e:
        raise ValueError(f"Attempt to convert a value ({value!r}) with an unsupported type "
                         f"({type(value)}) to a Tensor: {e}") from None
    if array.dtype == object and inferred is not dtypes.string:
        raise ValueError(f"Attempt to convert a value ({value!r}) with an unsupported type ({type(value)}) to a "
                         "Tensor.")
    if array.dtype.kind in "SUO":
        # TF's strings are bytes: tf.constant("abc").numpy() == b"abc".
        array = np.vectorize(lambda v: v.encode() if isinstance(v, str) else v, otypes=[object])(array) \
            if array.size else array.astype(object)
    if dtype is None:
        if inferred == "int":
            hint = dtypes.as_dtype(dtype_hint) if dtype_hint is not None else None
            if hint is not None and (hint.is_integer or hint.is_floating):
                dtype = hint
            else:
                info = np.iinfo(np.int32)
                fits = array.size == 0 or (array.min() >= info.min and array.max() <= info.max)
                dtype = dtypes.int32 if fits else dtypes.int64
        elif inferred is not None:
            dtype = inferred
            if dtype_hint is not None:
                hint = dtypes.as_dtype(dtype_hint)
                if (hint.is_floating and inferred.is_floating) or (hint.is_complex and inferred.is_complex):
                    dtype = hint
        else:
            dtype = dtypes.as_dtype(array.dtype)
        return EagerTensor(_owned(_cast_checked(array, dtype, value, strict=False), value))
    return EagerTensor(_owned(_cast_checked(array, dtype, value, strict=_strict and inferred is not None), value))


def _owned(array, value):
    """`array`, copied when it is the caller's own array (a tensor never shares a caller's memory)."""
    if isinstance(value, np.ndarray) and (array is value or array.base is not None):
        return array.copy()
    return array


def constant(value, dtype=None, shape=None, name="Const"):
    """tf.constant: a tensor holding `value` (cast to `dtype`, filled or reshaped to `shape`)."""
    if isinstance(value, (EagerTensor,)) or is_tensor_like(value):
        tensor = convert_to_tensor(value)
        if dtype is not None and tensor.dtype != dtypes.as_dtype(dtype):
            tensor = EagerTensor(tensor._value.astype(dtypes.as_dtype(dtype).as_numpy_dtype))
    else:
        tensor = convert_to_tensor(value, dtype=dtype, _strict=False)
    if shape is not None:
        shape = [int(d) for d in shape]
        array = tensor._value
        if array.size == 1:
            array = np.broadcast_to(array.reshape(()), shape).copy()
        elif array.size == int(np.prod(shape, dtype=np.int64)):
            array = array.reshape(shape).copy()
        else:
            raise TypeError(f"Eager execution of tf.constant with unsupported shape. Tensor {tensor!r} (converted "
                            f"from {value!r}) has {array.size} elements, but got `shape` {tuple(shape)} with "
                            f"{int(np.prod(shape, dtype=np.int64))} elements).")
        tensor = EagerTensor(array)
    return tensor


def wrap(array):
    """A new tensor owning `array` (the result of a NumPy computation: nobody else holds it)."""
    return EagerTensor(np.asarray(array))


__all__ = ["EagerTensor", "TensorShape", "constant", "convert_to_tensor", "is_tensor_like",
           "wrap"]
