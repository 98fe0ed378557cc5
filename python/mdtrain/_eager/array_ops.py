"""Shapes, indexing, joining, gathering and constructing tensors, with their gradients.

See ops.py for the conventions (dtypes, errors, recording on tapes)."""
import builtins

import numpy as np

from mdtrain._eager import dtypes
from mdtrain._eager.errors import InvalidArgumentError
from mdtrain._eager.tensor import TensorShape, constant, is_tensor_like, wrap
from mdtrain._eager.op_support import _dims, _invalid, _pair, _record, _tensor
from mdtrain._eager.math_ops import _unbroadcast


# ---- shapes ----------------------------------------------------------------------------------

def _shape_list(shape, op="Reshape"):
    if isinstance(shape, TensorShape):
        return shape.as_list()
    if is_tensor_like(shape) or isinstance(shape, np.ndarray):
        shape = np.asarray(shape).tolist()
    if isinstance(shape, (int, np.integer)):
        return [int(shape)]
    try:
        return [int(d) for d in shape]
    except TypeError:
        raise TypeError(f"{op}: expected a shape (a list of integers), got {shape!r}") from None


def reshape(tensor, shape, name=None):
    x = _tensor(tensor)
    shape = _shape_list(shape)
    try:
        value = x._value.reshape(shape)
    except ValueError:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if -1 in shape:
            message = (f"Input to reshape is a tensor with {x._value.size} values, but the requested shape requires "
                       f"a multiple of {known}")
        else:
            message = f"Input to reshape is a tensor with {x._value.size} values, but the requested shape has {known}"
        raise _invalid(message, "Reshape") from None
    out = wrap(value)
    _record("Reshape", (x,), (out,), lambda grads: [reshape(grads[0], x.shape)])
    return out


def expand_dims(input, axis, name=None):  # noqa: A002
    x = _tensor(input)
    axis = int(axis)
    if not -x.ndim - 1 <= axis <= x.ndim:
        raise _invalid(f"Tried to expand dim index {axis} for tensor with {x.ndim} dimensions.", "ExpandDims")
    return reshape(x, np.expand_dims(np.empty(x._value.shape, dtype=bool), axis).shape)


def squeeze(input, axis=None, name=None):  # noqa: A002
    x = _tensor(input)
    if axis is None:
        shape = [d for d in x._value.shape if d != 1]
    else:
        axes = [a % x.ndim for a in ([axis] if isinstance(axis, (int, np.integer)) else axis)]
        for a in axes:
            if x._value.shape[a] != 1:
                raise _invalid(f"Can not squeeze dim[{a}], expected a dimension of 1, got {x._value.shape[a]}",
                               "Squeeze")
        shape = [d for i, d in enumerate(x._value.shape) if i not in axes]
    return reshape(x, shape)


def transpose(a, perm=None, conjugate=False, name="transpose"):
    x = _tensor(a)
    perm = list(builtins.range(x.ndim))[::-1] if perm is None else _shape_list(perm, "Transpose")
    if sorted(p % builtins.max(x.ndim, 1) for p in perm) != list(builtins.range(x.ndim)):
        raise _invalid(f"transpose expects a permutation of {x.ndim} axes, got {perm}", "Transpose")
    out = wrap(np.transpose(x._value, perm))
    inverse = list(np.argsort([p % x.ndim for p in perm]))
    _record("Transpose", (x,), (out,), lambda grads: [transpose(grads[0], inverse)])
    return out


def broadcast_to(input, shape, name=None):  # noqa: A002
    x = _tensor(input)
    shape = _shape_list(shape, "BroadcastTo")
    try:
        value = np.broadcast_to(x._value, shape)
    except ValueError:
        raise _invalid(f"Incompatible shapes: {_dims(x._value.shape)} vs. {_dims(shape)}", "BroadcastTo") from None
    out = wrap(value)
    _record("BroadcastTo", (x,), (out,), lambda grads: [_unbroadcast(grads[0], x.shape)])
    return out


def _index_key(key):
    """A NumPy index from a tf index: tensors become integers or arrays."""
    items = key if isinstance(key, tuple) else (key,)
    out = []
    for k in items:
        if is_tensor_like(k):
            k = np.asarray(k)
            k = int(k) if k.ndim == 0 and k.dtype.kind in "iu" else k
        elif isinstance(k, list):
            k = np.asarray(k)
        out.append(k)
    return tuple(out)


def _basic(key):
    return all(k is None or k is Ellipsis or isinstance(k, (int, np.integer, slice)) for k in key)


class _SliceIndexError(InvalidArgumentError, IndexError):
    pass


def getitem(tensor, key):
    """tensor[key]: NumPy indexing (basic slicing, and integer arrays along axes)."""
    x = _tensor(tensor)
    key = _index_key(key)
    try:
        value = x._value[key]
    except IndexError as e:
        raise _SliceIndexError(f"{e} (indexing a tensor of shape {_dims(x._value.shape)}) [Op:StridedSlice]") from None
    out = wrap(np.asarray(value))
    _record("StridedSlice", (x,), (out,), lambda grads: [_scatter_slice(grads[0], key, x.shape)])
    return out


def _scatter_slice(g, key, shape):
    """The gradient of x[key]: g placed at `key` in zeros shaped like x (summed where repeated)."""
    value = np.zeros(tuple(shape), dtype=g._value.dtype)
    if _basic(key):
        value[key] = g._value
    else:
        np.add.at(value, key, g._value)
    out = wrap(value)
    _record("StridedSliceGrad", (g,), (out,), lambda grads: [getitem(grads[0], key)])
    return out


def concat(values, axis, name="concat"):
    tensors = [_tensor(v) for v in values]
    if not tensors:
        raise ValueError("concat: the list of values is empty")
    first = tensors[0]
    for k, t in enumerate(tensors[1:], 1):
        if t.dtype != first.dtype:
            raise _invalid(f"cannot compute ConcatV2 as input #{k}(zero-based) was expected to be a "
                           f"{first.dtype.name} tensor but is a {t.dtype.name} tensor", "ConcatV2")
    axis = int(axis)
    ndim = first.ndim
    if not -ndim <= axis < builtins.max(ndim, 1):
        raise _invalid(f"ConcatOp : Expected concatenating dimensions in the range [{-ndim}, {ndim}), but got {axis}",
                       "ConcatV2")
    axis %= builtins.max(ndim, 1)
    for k, t in enumerate(tensors[1:], 1):
        s0, sk = first._value.shape, t._value.shape
        if len(sk) != len(s0):
            raise _invalid(f"ConcatOp : Ranks of all input tensors should match: shape[0] = {_dims(s0)} vs. "
                           f"shape[{k}] = {_dims(sk)}", "ConcatV2")
        for d in builtins.range(len(s0)):
            if d != axis and s0[d] != sk[d]:
                raise _invalid(f"ConcatOp : Dimension {d} in both shapes must be equal: shape[0] = {_dims(s0)} vs. "
                               f"shape[{k}] = {_dims(sk)}", "ConcatV2")
    out = wrap(np.concatenate([t._value for t in tensors], axis=axis))
    bounds = np.cumsum([0] + [t._value.shape[axis] for t in tensors])

    def backward(grads):
        g = grads[0]
        lead = (slice(None),) * axis
        return [getitem(g, lead + (slice(int(bounds[k]), int(bounds[k + 1])),)) for k in builtins.range(len(tensors))]

    _record("ConcatV2", tensors, (out,), backward)
    return out


def stack(values, axis=0, name="stack"):
    tensors = [_tensor(v) for v in values]
    if not tensors:
        raise ValueError("stack: the list of values is empty")
    for k, t in enumerate(tensors[1:], 1):
        if t._value.shape != tensors[0]._value.shape:
            raise _invalid(f"Shapes of all inputs must match: values[0].shape = {_dims(tensors[0]._value.shape)} != "
                           f"values[{k}].shape = {_dims(t._value.shape)}", "Pack")
        if t.dtype != tensors[0].dtype:
            raise _invalid(f"cannot compute Pack as input #{k}(zero-based) was expected to be a "
                           f"{tensors[0].dtype.name} tensor but is a {t.dtype.name} tensor", "Pack")
    ndim = tensors[0].ndim + 1
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise _invalid(f"Argument `axis` = {axis} not in range [{-ndim}, {ndim})", "Pack")
    axis %= ndim
    out = wrap(np.stack([t._value for t in tensors], axis=axis))
    lead = (slice(None),) * axis
    _record("Pack", tensors, (out,),
            lambda grads: [getitem(grads[0], lead + (k,)) for k in builtins.range(len(tensors))])
    return out


def unstack(value, num=None, axis=0, name="unstack"):
    x = _tensor(value)
    axis = int(axis) % builtins.max(x.ndim, 1)
    n = x._value.shape[axis]
    if num is not None and num != n:
        raise ValueError(f"unstack: num={num} but the axis has {n} elements")
    lead = (slice(None),) * axis
    return [getitem(x, lead + (k,)) for k in builtins.range(n)]


def split(value, num_or_size_splits, axis=0, num=None, name="split"):
    x = _tensor(value)
    axis = int(axis) % builtins.max(x.ndim, 1)
    n = x._value.shape[axis]
    if isinstance(num_or_size_splits, (int, np.integer)):
        parts = int(num_or_size_splits)
        if parts <= 0 or n % parts:
            raise _invalid(f"Number of ways to split should evenly divide the split dimension, but got "
                           f"split_dim {axis} (size = {n}) and num_split {parts}", "Split")
        sizes = [n // parts] * parts
    else:
        sizes = _shape_list(num_or_size_splits, "SplitV")
        if -1 in sizes:
            sizes[sizes.index(-1)] = n - (builtins.sum(sizes) + 1)
        if builtins.sum(sizes) != n:
            raise _invalid(f"Determined shape must either match input shape along split_dim exactly if fully "
                           f"specified, or be less than the size of the input along split_dim if not fully "
                           f"specified.  Got: {builtins.sum(sizes)}", "SplitV")
    lead = (slice(None),) * axis
    bounds = np.cumsum([0] + sizes)
    return [getitem(x, lead + (slice(int(bounds[k]), int(bounds[k + 1])),)) for k in builtins.range(len(sizes))]


def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None):
    """params gathered at `indices` along `axis` (default 0)."""
    if batch_dims != 0:
        raise NotImplementedError("gather: batch_dims other than 0 is not supported")
    x = _tensor(params)
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"gather: indices must be integers, got dtype {idx.dtype}")
    axis = 0 if axis is None else int(axis)
    if not -x.ndim <= axis < builtins.max(x.ndim, 1):
        raise _invalid(f"Expected axis in the range [{-x.ndim}, {x.ndim}), but got {axis}", "GatherV2")
    axis %= builtins.max(x.ndim, 1)
    n = x._value.shape[axis]
    bad = (idx < 0) | (idx >= n)
    if bad.any():
        where_bad = tuple(int(i) for i in np.argwhere(bad)[0])
        shown = ",".join(str(i) for i in where_bad)
        raise _invalid(f"indices[{shown}] = {idx[where_bad]} is not in [0, {n})", "GatherV2")
    out = wrap(np.take(x._value, idx, axis=axis))
    _record("GatherV2", (x,), (out,), lambda grads: [_gather_grad(grads[0], idx, x.shape, axis)])
    return out


def _gather_grad(g, idx, shape, axis):
    """The gradient of gather: g's rows added at their indices in zeros shaped like params."""
    shape = tuple(shape)
    value = np.zeros(shape, dtype=g._value.dtype)
    flat = idx.reshape(-1)
    rows = g._value.reshape(shape[:axis] + (flat.size,) + shape[axis + 1:])
    np.add.at(value, (slice(None),) * axis + (flat,), rows)
    out = wrap(value)
    _record("GatherGrad", (g,), (out,), lambda grads: [gather(grads[0], idx, axis=axis)])
    return out


def where(condition, x=None, y=None, name=None):
    """tf.where: elements of x where condition, else of y (broadcasting); with only a condition,
    the coordinates of its true elements (int64)."""
    cond = np.asarray(_tensor(condition)._value)
    if x is None and y is None:
        return wrap(np.argwhere(cond).astype(np.int64))
    if x is None or y is None:
        raise ValueError("x and y must both be non-None or both be None.")
    x, y = _pair(x, y, "SelectV2")
    if cond.dtype != np.bool_:
        raise _invalid(f"condition must be a bool tensor, got {cond.dtype}", "SelectV2")
    try:
        value = np.where(cond, x._value, y._value)
    except ValueError:
        raise _invalid(f"Incompatible shapes: {_dims(cond.shape)} vs. {_dims(x._value.shape)} vs. "
                       f"{_dims(y._value.shape)}", "SelectV2") from None
    out = wrap(np.asarray(value, dtype=x._value.dtype))

    def backward(grads):
        g = grads[0]
        zero = zeros_like(g)
        mask = constant(np.broadcast_to(cond, g._value.shape))
        return [_unbroadcast(where(mask, g, zero), x.shape), _unbroadcast(where(mask, zero, g), y.shape)]

    _record("SelectV2", (x, y), (out,), backward)
    return out


# ---- constructors ----------------------------------------------------------------------------

def zeros(shape, dtype=dtypes.float32, name=None):
    return wrap(np.zeros(_shape_list(shape, "Zeros"), dtype=dtypes.as_dtype(dtype).as_numpy_dtype))


def ones(shape, dtype=dtypes.float32, name=None):
    return wrap(np.ones(_shape_list(shape, "Ones"), dtype=dtypes.as_dtype(dtype).as_numpy_dtype))


def fill(dims, value, name=None):
    v = _tensor(value)
    return wrap(np.full(_shape_list(dims, "Fill"), v._value, dtype=v._value.dtype))


def zeros_like(input, dtype=None, name=None):  # noqa: A002
    x = _tensor(input)
    return wrap(np.zeros(x._value.shape, dtype=x._value.dtype if dtype is None
                         else dtypes.as_dtype(dtype).as_numpy_dtype))


def ones_like(input, dtype=None, name=None):  # noqa: A002
    x = _tensor(input)
    return wrap(np.ones(x._value.shape, dtype=x._value.dtype if dtype is None
                        else dtypes.as_dtype(dtype).as_numpy_dtype))


def range(start, limit=None, delta=1, dtype=None, name="range"):  # noqa: A001 - tf.range
    if limit is None:
        start, limit = 0, start
    values = [np.asarray(v) if is_tensor_like(v) else v for v in (start, limit, delta)]
    if dtype is None:
        kinds = [np.asarray(v).dtype.kind if isinstance(v, np.ndarray) else ("f" if isinstance(v, float) else "i")
                 for v in values]
        arrays = [v for v in values if isinstance(v, np.ndarray)]
        if arrays:
            dtype = dtypes.as_dtype(np.result_type(*arrays))
        else:
            dtype = dtypes.float32 if "f" in kinds else dtypes.int32
    dtype = dtypes.as_dtype(dtype)
    start, limit, delta = (np.asarray(v).item() if isinstance(v, np.ndarray) else v for v in values)
    if delta == 0:
        raise _invalid("Requires delta != 0: 0", "Range")
    return wrap(np.arange(start, limit, delta).astype(dtype.as_numpy_dtype))


def linspace(start, stop, num, name=None, axis=0):
    s = _tensor(start)
    dtype = s._value.dtype if s.dtype.is_floating else np.float32
    return wrap(np.linspace(np.asarray(s), np.asarray(_tensor(stop)), int(num), axis=axis).astype(dtype))


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None):
    idx = np.asarray(_tensor(indices)._value)
    if dtype is None:
        dtype = (_tensor(on_value).dtype if on_value is not None else
                 _tensor(off_value).dtype if off_value is not None else dtypes.float32)
    np_dtype = dtypes.as_dtype(dtype).as_numpy_dtype
    on = 1 if on_value is None else np.asarray(on_value)
    off = 0 if off_value is None else np.asarray(off_value)
    depth = int(depth)
    hot = idx[..., None] == np.arange(depth)
    value = np.where(hot, on, off).astype(np_dtype)
    if axis is not None and axis != -1:
        value = np.moveaxis(value, -1, axis)
    return wrap(value)


def shape(input, out_type=dtypes.int32, name=None):  # noqa: A002
    return wrap(np.asarray(_tensor(input)._value.shape, dtype=dtypes.as_dtype(out_type).as_numpy_dtype))


def size(input, out_type=dtypes.int32, name=None):  # noqa: A002
    return wrap(np.asarray(_tensor(input)._value.size, dtype=dtypes.as_dtype(out_type).as_numpy_dtype))


def rank(input, name=None):  # noqa: A002
    return wrap(np.asarray(_tensor(input)._value.ndim, dtype=np.int32))


def is_tensor(x):
    return is_tensor_like(x)


def executing_eagerly():
    return True
