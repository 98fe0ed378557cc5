"""The tf.* ops eager tensors support, computed in NumPy, with their gradients.

Each differentiable op records itself on the tapes that watch one of its inputs (tape.record)
with a backward function written with these same ops, so the backward pass is itself recorded by
an outer tape (higher-order gradients). Values keep their dtype: float32 stays float32, float64
stays float64. Two tensor operands must have one dtype (TensorFlow's rule); a Python or NumPy
operand is converted to the tensor's dtype. Errors are tf.errors.InvalidArgumentError (also a
ValueError) with TensorFlow's message, or TypeError for values of the wrong kind.
"""
import builtins
import sys

import numpy as np

from mdtrain._eager import dtypes
from mdtrain._eager import tape as _tape
from mdtrain._eager.errors import InvalidArgumentError
from mdtrain._eager.tensor import EagerTensor, TensorShape, constant, convert_to_tensor, is_tensor_like, wrap
from mdtrain._eager.variables import Variable


def _dims(shape):
    return "[" + ",".join(str(d) for d in shape) + "]"


def _invalid(message, op):
    return InvalidArgumentError(f"{message} [Op:{op}]")


def _record(name, inputs, outputs, backward):
    """Records the op on the tapes watching one of `inputs`; backward(grads) -> input grads."""
    tapes = _tape.recording_tapes(inputs)
    if tapes:
        _tape.record(tapes, name, inputs, outputs, backward)


def _tensor(x):
    return convert_to_tensor(x)


def _pair(x, y, op):
    """Two operands with one dtype: a tensor's dtype wins over a Python or NumPy value's."""
    if is_tensor_like(x) or not is_tensor_like(y):
        x = convert_to_tensor(x)
        y = convert_to_tensor(y) if is_tensor_like(y) else convert_to_tensor(y, dtype=x.dtype)
    else:
        y = convert_to_tensor(y)
        x = convert_to_tensor(x, dtype=y.dtype)
    if x.dtype != y.dtype:
        raise _invalid(f"cannot compute {op} as input #1(zero-based) was expected to be a {x.dtype.name} tensor but "
                       f"is a {y.dtype.name} tensor", op)
    return x, y


def _require_float(x, op):
    if not (x.dtype.is_floating or x.dtype.is_complex):
        raise _invalid(f"Value for attr 'T' of {x.dtype.name} is not in the list of allowed values: half, bfloat16, "
                       "float, double, complex64, complex128", op)


def _unbroadcast(g, shape):
    """Sums g over the axes broadcasting added to `shape` (a gradient back to an input's shape)."""
    shape = tuple(shape)
    gshape = g._value.shape
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    axes = list(builtins.range(lead)) + [i + lead for i, d in enumerate(shape) if d == 1 and gshape[i + lead] != 1]
    if axes:
        g = reduce_sum(g, axis=axes)
    return reshape(g, shape)


# ---- element-wise binary ops -----------------------------------------------------------------

def _binary(op, x, y, forward, backward=None):
    x, y = _pair(x, y, op)
    with np.errstate(all="ignore"):
        try:
            value = forward(x._value, y._value)
        except ValueError:
            raise _invalid(f"Incompatible shapes: {_dims(x._value.shape)} vs. {_dims(y._value.shape)}", op) from None
    out = wrap(np.asarray(value, dtype=value.dtype if isinstance(value, np.ndarray) else x._value.dtype))
    if backward is not None:
        _record(op, (x, y), (out,), lambda grads: backward(grads[0], x, y, out))
    return out


def add(x, y, name=None):
    return _binary("AddV2", x, y, np.add,
                   lambda g, x, y, out: [_unbroadcast(g, x.shape), _unbroadcast(g, y.shape)])


def subtract(x, y, name=None):
    return _binary("Sub", x, y, np.subtract,
                   lambda g, x, y, out: [_unbroadcast(g, x.shape), _unbroadcast(negative(g), y.shape)])


def multiply(x, y, name=None):
    return _binary("Mul", x, y, np.multiply,
                   lambda g, x, y, out: [_unbroadcast(multiply(g, y), x.shape),
                                         _unbroadcast(multiply(g, x), y.shape)])


def _realdiv_grad(g, x, y, out):
    return [_unbroadcast(realdiv(g, y), x.shape),
            _unbroadcast(multiply(g, realdiv(realdiv(negative(x), y), y)), y.shape)]


def realdiv(x, y, name=None):
    return _binary("RealDiv", x, y, np.true_divide, _realdiv_grad)


def truediv(x, y, name=None):
    """x / y; integers are divided as floats (int8/16 as float32, int32/64 as float64), as in TF."""
    x, y = _pair(x, y, "RealDiv")
    if x.dtype.is_integer:
        target = dtypes.float32 if x.dtype.size <= 2 else dtypes.float64
        x, y = cast(x, target), cast(y, target)
    return realdiv(x, y)


def divide(x, y, name=None):
    return truediv(x, y)


def divide_no_nan(x, y, name=None):
    """x / y, and 0 where y is 0."""
    x, y = _pair(x, y, "DivNoNan")
    safe = where(equal(y, 0), ones_like(y), y)
    return where(equal(y, 0), zeros_like(realdiv(x, safe)), realdiv(x, safe))


def floordiv(x, y, name=None):
    return _binary("FloorDiv", x, y, np.floor_divide)


def floormod(x, y, name=None):
    return _binary("FloorMod", x, y, np.mod)


def _pow_grad(g, x, y, out):
    gx = multiply(g, multiply(y, pow(x, subtract(y, ones_like(y)))))
    positive = greater(x, zeros_like(x))
    safe = where(positive, x, ones_like(x))
    gy = multiply(g, multiply(out, where(positive, log(safe), zeros_like(x))))
    return [_unbroadcast(gx, x.shape), _unbroadcast(gy, y.shape)]


def pow(x, y, name=None):  # noqa: A001 - tf.pow
    def forward(a, b):
        if a.dtype.kind in "iu" and b.size and (b < 0).any():
            raise _invalid("Integers to negative integer powers are not allowed", "Pow")
        return np.power(a, b)

    return _binary("Pow", x, y, forward, _pow_grad)


def maximum(x, y, name=None):
    def grad(g, x, y, out):
        mask = greater_equal(x, y)
        zero = zeros_like(g)
        return [_unbroadcast(where(mask, g, zero), x.shape), _unbroadcast(where(mask, zero, g), y.shape)]

    return _binary("Maximum", x, y, np.maximum, grad)


def minimum(x, y, name=None):
    def grad(g, x, y, out):
        mask = less_equal(x, y)
        zero = zeros_like(g)
        return [_unbroadcast(where(mask, g, zero), x.shape), _unbroadcast(where(mask, zero, g), y.shape)]

    return _binary("Minimum", x, y, np.minimum, grad)


def squared_difference(x, y, name=None):
    diff = subtract(x, y)
    return multiply(diff, diff)


# ---- comparisons and logic (no gradient) -----------------------------------------------------

def _compare(op, fn):
    def compare(x, y, name=None):
        x, y = _pair(x, y, op)
        try:
            return wrap(np.asarray(fn(x._value, y._value)))
        except ValueError:
            raise _invalid(f"Incompatible shapes: {_dims(x._value.shape)} vs. {_dims(y._value.shape)}", op) from None

    compare.__name__ = fn.__name__
    return compare


equal = _compare("Equal", np.equal)
not_equal = _compare("NotEqual", np.not_equal)
less = _compare("Less", np.less)
less_equal = _compare("LessEqual", np.less_equal)
greater = _compare("Greater", np.greater)
greater_equal = _compare("GreaterEqual", np.greater_equal)


def _bool_pair(x, y, op):
    x, y = _pair(x, y, op)
    if x.dtype != dtypes.bool:
        raise _invalid(f"{op} expects bool tensors, got {x.dtype.name}", op)
    return x, y


def logical_and(x, y, name=None):
    x, y = _bool_pair(x, y, "LogicalAnd")
    return wrap(np.logical_and(x._value, y._value))


def logical_or(x, y, name=None):
    x, y = _bool_pair(x, y, "LogicalOr")
    return wrap(np.logical_or(x._value, y._value))


def logical_xor(x, y, name=None):
    x, y = _bool_pair(x, y, "LogicalXor")
    return wrap(np.logical_xor(x._value, y._value))


def logical_not(x, name=None):
    x = _tensor(x)
    if x.dtype != dtypes.bool:
        raise _invalid(f"LogicalNot expects a bool tensor, got {x.dtype.name}", "LogicalNot")
    return wrap(np.logical_not(x._value))


def is_nan(x, name=None):
    return wrap(np.isnan(_tensor(x)._value))


def is_inf(x, name=None):
    return wrap(np.isinf(_tensor(x)._value))


def is_finite(x, name=None):
    return wrap(np.isfinite(_tensor(x)._value))


# ---- element-wise unary ops ------------------------------------------------------------------

def _unary(op, x, forward, backward=None, float_only=True):
    x = _tensor(x)
    if float_only:
        _require_float(x, op)
    with np.errstate(all="ignore"):
        out = wrap(np.asarray(forward(x._value), dtype=x._value.dtype))
    if backward is not None:
        _record(op, (x,), (out,), lambda grads: [backward(grads[0], x, out)])
    return out


def negative(x, name=None):
    return _unary("Neg", x, np.negative, lambda g, x, out: negative(g), float_only=False)


def identity(input, name=None):  # noqa: A002 - TF's argument name
    return _unary("Identity", input, lambda a: a, lambda g, x, out: g, float_only=False)


def stop_gradient(input, name=None):  # noqa: A002
    """The value, with no gradient flowing back through it."""
    return EagerTensor(_tensor(input)._value)


def exp(x, name=None):
    return _unary("Exp", x, np.exp, lambda g, x, out: multiply(g, out))


def log(x, name=None):
    return _unary("Log", x, np.log, lambda g, x, out: realdiv(g, x))


def log1p(x, name=None):
    return _unary("Log1p", x, np.log1p, lambda g, x, out: realdiv(g, add(x, ones_like(x))))


def sqrt(x, name=None):
    return _unary("Sqrt", x, np.sqrt, lambda g, x, out: realdiv(g, multiply(out, 2)))


def rsqrt(x, name=None):
    return reciprocal(sqrt(x))


def square(x, name=None):
    return _unary("Square", x, np.square, lambda g, x, out: multiply(g, multiply(x, 2)), float_only=False)


def reciprocal(x, name=None):
    return _unary("Reciprocal", x, np.reciprocal, lambda g, x, out: negative(multiply(g, multiply(out, out))))


def sign(x, name=None):
    return _unary("Sign", x, np.sign, lambda g, x, out: zeros_like(g), float_only=False)


def abs(x, name=None):  # noqa: A001 - tf.abs
    return _unary("Abs", x, np.abs, lambda g, x, out: multiply(g, sign(x)), float_only=False)


def sin(x, name=None):
    return _unary("Sin", x, np.sin, lambda g, x, out: multiply(g, cos(x)))


def cos(x, name=None):
    return _unary("Cos", x, np.cos, lambda g, x, out: negative(multiply(g, sin(x))))


def tanh(x, name=None):
    return _unary("Tanh", x, np.tanh,
                  lambda g, x, out: multiply(g, subtract(ones_like(out), multiply(out, out))))


def _sigmoid_array(a):
    positive = a >= 0
    z = np.exp(np.where(positive, -a, a))
    return np.where(positive, 1 / (1 + z), z / (1 + z))


def sigmoid(x, name=None):
    return _unary("Sigmoid", x, _sigmoid_array,
                  lambda g, x, out: multiply(g, multiply(out, subtract(ones_like(out), out))))


def softplus(features, name=None):
    return _unary("Softplus", features, lambda a: np.logaddexp(0, a), lambda g, x, out: multiply(g, sigmoid(x)))


def relu(features, name=None):
    return _unary("Relu", features, lambda a: np.maximum(a, 0),
                  lambda g, x, out: where(greater(x, zeros_like(x)), g, zeros_like(g)), float_only=False)


def leaky_relu(features, alpha=0.2, name=None):
    x = _tensor(features)
    return where(greater(x, zeros_like(x)), x, multiply(x, alpha))


def floor(x, name=None):
    return _unary("Floor", x, np.floor)


def ceil(x, name=None):
    return _unary("Ceil", x, np.ceil)


def round(x, name=None):  # noqa: A001 - tf.round (half to even, as NumPy and TF)
    return _unary("Round", x, np.round, float_only=False)


# ---- matmul ----------------------------------------------------------------------------------

def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False, a_is_sparse=False,
           b_is_sparse=False, output_type=None, grad_a=False, grad_b=False, name=None):
    """a @ b over the last two axes (batched over the leading ones, broadcasting)."""
    a, b = _pair(a, b, "MatMul")
    ta, tb = bool(transpose_a or adjoint_a), bool(transpose_b or adjoint_b)
    av, bv = a._value, b._value
    if av.ndim < 2 or bv.ndim < 2:
        raise _invalid(f"In[0] and In[1] must be matrices (rank >= 2): In[0]: {_dims(av.shape)}, In[1]: "
                       f"{_dims(bv.shape)}", "MatMul")
    am = np.swapaxes(av, -1, -2) if ta else av
    bm = np.swapaxes(bv, -1, -2) if tb else bv
    if am.shape[-1] != bm.shape[-2]:
        raise _invalid(f"Matrix size-incompatible: In[0]: {_dims(av.shape)}, In[1]: {_dims(bv.shape)}", "MatMul")
    try:
        value = np.matmul(am, bm)
    except ValueError:
        raise _invalid(f"In[0] and In[1] have incompatible batch dimensions: {_dims(av.shape)} vs. "
                       f"{_dims(bv.shape)}", "BatchMatMulV2") from None
    out = wrap(value)

    def backward(grads):
        g = grads[0]
        if not ta and not tb:
            ga, gb = matmul(g, b, transpose_b=True), matmul(a, g, transpose_a=True)
        elif not ta and tb:
            ga, gb = matmul(g, b), matmul(g, a, transpose_a=True)
        elif ta and not tb:
            ga, gb = matmul(b, g, transpose_b=True), matmul(a, g)
        else:
            ga, gb = matmul(b, g, transpose_a=True, transpose_b=True), matmul(g, a, transpose_a=True,
                                                                              transpose_b=True)
        return [_unbroadcast(ga, a.shape), _unbroadcast(gb, b.shape)]

    _record("MatMul", (a, b), (out,), backward)
    return out


# ---- reductions ------------------------------------------------------------------------------

def _axes(axis, ndim, op):
    if axis is None:
        return tuple(builtins.range(ndim))
    if is_tensor_like(axis) or isinstance(axis, np.ndarray):
        axis = np.asarray(axis).tolist()
    if isinstance(axis, (int, np.integer)):
        axis = [axis]
    out = set()
    for a in axis:
        a = int(a)
        if not -ndim <= a < ndim:
            raise _invalid(f"Invalid reduction dimension {a} for input with {ndim} dimensions.", op)
        out.add(a % ndim)
    return tuple(sorted(out))


def _kept_shape(shape, axes):
    return [1 if i in axes else d for i, d in enumerate(shape)]


def _reduce_backward(g, x, axes, keepdims):
    """g (the reduced shape) broadcast back over x's shape."""
    if not keepdims:
        g = reshape(g, _kept_shape(x.shape, axes))
    return broadcast_to(g, x.shape)


def reduce_sum(input_tensor, axis=None, keepdims=False, name=None):
    x = _tensor(input_tensor)
    axes = _axes(axis, x.ndim, "Sum")
    dtype = x._value.dtype if x._value.dtype.kind != "b" else np.int64
    out = wrap(np.asarray(np.sum(x._value, axis=axes, keepdims=bool(keepdims), dtype=dtype)))
    _record("Sum", (x,), (out,), lambda grads: [_reduce_backward(grads[0], x, axes, keepdims)])
    return out


def reduce_mean(input_tensor, axis=None, keepdims=False, name=None):
    x = _tensor(input_tensor)
    axes = _axes(axis, x.ndim, "Mean")
    count = int(np.prod([x._value.shape[a] for a in axes], dtype=np.int64))
    with np.errstate(all="ignore"):
        if x.dtype.is_integer:
            total = np.sum(x._value, axis=axes, keepdims=bool(keepdims), dtype=np.int64)
            value = (np.trunc(total / count) if count else total).astype(x._value.dtype)
        else:
            value = np.mean(x._value, axis=axes, keepdims=bool(keepdims), dtype=x._value.dtype)
    out = wrap(np.asarray(value, dtype=x._value.dtype))
    _record("Mean", (x,), (out,),
            lambda grads: [realdiv(_reduce_backward(grads[0], x, axes, keepdims), builtins.max(count, 1))])
    return out


def _reduce_extreme(op, fn, input_tensor, axis, keepdims):
    x = _tensor(input_tensor)
    axes = _axes(axis, x.ndim, op)
    if x._value.size == 0:
        raise _invalid(f"{op} of an empty tensor (shape {_dims(x._value.shape)}) is undefined", op)
    out = wrap(np.asarray(fn(x._value, axis=axes, keepdims=bool(keepdims))))

    def backward(grads):
        kept = out if keepdims else reshape(out, _kept_shape(x.shape, axes))
        mask = cast(equal(x, broadcast_to(kept, x.shape)), x.dtype)
        ties = reduce_sum(mask, axis=axes, keepdims=True)
        return [realdiv(multiply(_reduce_backward(grads[0], x, axes, keepdims), mask), ties)]

    _record(op, (x,), (out,), backward)
    return out


def reduce_max(input_tensor, axis=None, keepdims=False, name=None):
    return _reduce_extreme("Max", np.max, input_tensor, axis, keepdims)


def reduce_min(input_tensor, axis=None, keepdims=False, name=None):
    return _reduce_extreme("Min", np.min, input_tensor, axis, keepdims)


def reduce_logsumexp(input_tensor, axis=None, keepdims=False, name=None):
    x = _tensor(input_tensor)
    top = stop_gradient(reduce_max(x, axis=axis, keepdims=True))
    top = where(is_finite(top), top, zeros_like(top))
    result = add(log(reduce_sum(exp(subtract(x, top)), axis=axis, keepdims=True)), top)
    if not keepdims:
        result = reshape(result, [d for i, d in enumerate(x.shape) if i not in _axes(axis, x.ndim, "Logsumexp")])
    return result


def reduce_variance(input_tensor, axis=None, keepdims=False, name=None):
    x = _tensor(input_tensor)
    centered = subtract(x, reduce_mean(x, axis=axis, keepdims=True))
    return reduce_mean(square(centered), axis=axis, keepdims=keepdims)


def reduce_std(input_tensor, axis=None, keepdims=False, name=None):
    return sqrt(reduce_variance(input_tensor, axis=axis, keepdims=keepdims))


def reduce_any(input_tensor, axis=None, keepdims=False, name=None):
    x = _tensor(input_tensor)
    return wrap(np.asarray(np.any(x._value, axis=_axes(axis, x.ndim, "Any"), keepdims=bool(keepdims))))


def reduce_all(input_tensor, axis=None, keepdims=False, name=None):
    x = _tensor(input_tensor)
    return wrap(np.asarray(np.all(x._value, axis=_axes(axis, x.ndim, "All"), keepdims=bool(keepdims))))


def count_nonzero(input, axis=None, keepdims=False, dtype=dtypes.int64, name=None):  # noqa: A002
    x = _tensor(input)
    counts = np.count_nonzero(x._value, axis=_axes(axis, x.ndim, "CountNonzero"), keepdims=bool(keepdims))
    return wrap(np.asarray(counts, dtype=dtypes.as_dtype(dtype).as_numpy_dtype))


def _arg_extreme(fn, input, axis, output_type, op):  # noqa: A002
    x = _tensor(input)
    axis = 0 if axis is None else int(axis)
    if not -x.ndim <= axis < builtins.max(x.ndim, 1):
        raise _invalid(f"Expected dimension in the range [{-x.ndim}, {x.ndim}), but got {axis}", op)
    return wrap(np.asarray(fn(x._value, axis=axis), dtype=dtypes.as_dtype(output_type).as_numpy_dtype))


def argmax(input, axis=None, output_type=dtypes.int64, name=None):  # noqa: A002
    return _arg_extreme(np.argmax, input, axis, output_type, "ArgMax")


def argmin(input, axis=None, output_type=dtypes.int64, name=None):  # noqa: A002
    return _arg_extreme(np.argmin, input, axis, output_type, "ArgMin")


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


def cast(x, dtype, name=None):
    """x as `dtype` (floats to integers truncate toward zero); the gradient flows between floats."""
    x = _tensor(x)
    dtype = dtypes.as_dtype(dtype)
    if x.dtype == dtype:
        return x
    with np.errstate(all="ignore"):
        out = wrap(x._value.astype(dtype.as_numpy_dtype))
    if (x.dtype.is_floating or x.dtype.is_complex) and (dtype.is_floating or dtype.is_complex):
        _record("Cast", (x,), (out,), lambda grads: [cast(grads[0], x.dtype)])
    return out


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    x = _tensor(t)
    return minimum(maximum(x, clip_value_min), clip_value_max)


def add_n(inputs, name=None):
    """The element-wise sum of a list of tensors of one shape and dtype."""
    tensors = [_tensor(v) for v in inputs]
    if not tensors:
        raise ValueError("inputs must be a list of at least one Tensor with the same dtype and shape")
    for k, t in enumerate(tensors[1:], 1):
        if t._value.shape != tensors[0]._value.shape or t.dtype != tensors[0].dtype:
            raise ValueError(f"add_n: inputs must all have the shape and dtype of inputs[0] "
                             f"({tensors[0].shape}, {tensors[0].dtype.name}); inputs[{k}] has {t.shape}, "
                             f"{t.dtype.name}")
    value = tensors[0]._value
    for t in tensors[1:]:
        value = value + t._value
    out = wrap(np.asarray(value))
    _record("AddN", tensors, (out,), lambda grads: [grads[0]] * len(tensors))
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


# ---- tf.nn ------------------------------------------------------------------------------------

def _log_softmax_array(a, axis):
    top = np.max(a, axis=axis, keepdims=True)
    shifted = a - np.where(np.isfinite(top), top, 0)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def softmax(logits, axis=None, name=None):
    """exp(logits) normalized along `axis` (the last by default)."""
    x = _tensor(logits)
    _require_float(x, "Softmax")
    axis = -1 if axis is None else int(axis)
    with np.errstate(all="ignore"):
        out = wrap(np.exp(_log_softmax_array(x._value, axis)).astype(x._value.dtype))

    def backward(grads):
        g = grads[0]
        return [multiply(subtract(g, reduce_sum(multiply(g, out), axis=axis, keepdims=True)), out)]

    _record("Softmax", (x,), (out,), backward)
    return out


def log_softmax(logits, axis=None, name=None):
    x = _tensor(logits)
    _require_float(x, "LogSoftmax")
    axis = -1 if axis is None else int(axis)
    with np.errstate(all="ignore"):
        out = wrap(_log_softmax_array(x._value, axis).astype(x._value.dtype))

    def backward(grads):
        g = grads[0]
        return [subtract(g, multiply(exp(out), reduce_sum(g, axis=axis, keepdims=True)))]

    _record("LogSoftmax", (x,), (out,), backward)
    return out


def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """Per example -log(softmax(logits)[label]); labels are class ids shaped logits.shape[:-1]."""
    op = "SparseSoftmaxCrossEntropyWithLogits"
    if labels is None or logits is None:
        raise ValueError("sparse_softmax_cross_entropy_with_logits: pass labels= and logits=")
    x = _tensor(logits)
    _require_float(x, op)
    y = np.asarray(_tensor(labels)._value)
    if y.dtype.kind not in "iu":
        raise TypeError(f"{op}: labels must be int32 or int64 class ids, got {y.dtype}")
    if x.ndim < 1 or y.shape != x._value.shape[:-1]:
        raise _invalid(f"logits and labels must have the same first dimension, got logits shape "
                       f"{_dims(x._value.shape)} and labels shape {_dims(y.shape)}", op)
    classes = x._value.shape[-1]
    bad = (y < 0) | (y >= classes)
    if bad.any():
        raise _invalid(f"Received a label value of {y[bad].reshape(-1)[0]} which is outside the valid range of "
                       f"[0, {classes}).  Label values: {' '.join(str(v) for v in y.reshape(-1))}", op)
    with np.errstate(all="ignore"):
        logp = _log_softmax_array(x._value, -1)
        value = -np.take_along_axis(logp, y[..., None].astype(np.int64), axis=-1)[..., 0]
    out = wrap(np.asarray(value, dtype=x._value.dtype))
    onehot = (y[..., None] == np.arange(classes)).astype(x._value.dtype)

    def backward(grads):
        return [multiply(expand_dims(grads[0], -1), subtract(softmax(x), onehot))]

    _record(op, (x,), (out,), backward)
    return out


def softmax_cross_entropy_with_logits(labels, logits, axis=-1, name=None):
    """Per example -sum(labels * log_softmax(logits)) along `axis`."""
    x = _tensor(logits)
    t = convert_to_tensor(labels, dtype=x.dtype) if not is_tensor_like(labels) else _tensor(labels)
    if t._value.shape != x._value.shape:
        raise _invalid(f"logits and labels must be broadcastable: logits_size={_dims(x._value.shape)} "
                       f"labels_size={_dims(t._value.shape)}", "SoftmaxCrossEntropyWithLogits")
    return negative(reduce_sum(multiply(t, log_softmax(x, axis=axis)), axis=axis))


def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """max(x, 0) - x * z + log(1 + exp(-|x|)) per element (x logits, z labels)."""
    x = _tensor(logits)
    z = convert_to_tensor(labels, dtype=x.dtype) if not is_tensor_like(labels) else _tensor(labels)
    if z._value.shape != x._value.shape:
        raise ValueError(f"logits and labels must have the same shape ({x.shape} vs {z.shape})")
    return add(subtract(relu(x), multiply(x, z)), log1p(exp(negative(abs(x)))))


def l2_loss(t, name=None):
    return realdiv(reduce_sum(square(t)), 2)


def bias_add(value, bias, data_format=None, name=None):
    return add(value, bias)


def _num_replicas_in_sync(where):
    from mdtrain import distribute

    context = distribute.get_replica_context()
    if context is not None:
        return context.num_replicas_in_sync
    if distribute._current_scope() is not None:
        raise RuntimeError(f"You are calling `{where}` in cross replica context, while it was expected to be called "
                           "in replica context.")
    return 1


def compute_average_loss(per_example_loss, sample_weight=None, global_batch_size=None, name=None):
    """sum(per_example_loss * sample_weight) / global_batch_size; the global batch defaults to this
    replica's batch times the replicas in sync (tf.nn.compute_average_loss)."""
    losses = _tensor(per_example_loss)
    if not losses.dtype.is_floating:
        losses = cast(losses, dtypes.float32)
    if sample_weight is not None:
        weights = _tensor(sample_weight)
        losses = multiply(losses, cast(weights, losses.dtype))
    if global_batch_size is None:
        per_replica = losses._value.shape[0] if losses.ndim else 1
        global_batch_size = per_replica * _num_replicas_in_sync("compute_average_loss")
    else:
        if is_tensor_like(global_batch_size):
            global_batch_size = np.asarray(global_batch_size).item()
        if isinstance(global_batch_size, float) or (isinstance(global_batch_size, np.generic) and
                                                    np.asarray(global_batch_size).dtype.kind == "f"):
            raise TypeError(f"global_batch_size must be an integer, got {global_batch_size!r}")
        if global_batch_size < 0:
            raise ValueError(f"global_batch_size must be non-negative, got {global_batch_size}")
    total = reduce_sum(losses)
    if global_batch_size == 0:
        return zeros_like(total)
    return realdiv(total, global_batch_size)


def scale_regularization_loss(regularization_loss, name=None):
    """The (summed) regularization loss divided by the replicas in sync."""
    if isinstance(regularization_loss, (list, tuple)):
        regularization_loss = add_n(regularization_loss)
    loss = _tensor(regularization_loss)
    return realdiv(loss, _num_replicas_in_sync("scale_regularization_loss"))


# ---- tf.print --------------------------------------------------------------------------------

def _print_text(value, summarize):
    if isinstance(value, str):
        return value
    if isinstance(value, Variable):
        value = value._snapshot()
    if isinstance(value, EagerTensor):
        array = value._value
        if array.ndim == 0:
            item = array[()]
            return item.decode() if isinstance(item, bytes) else str(item)
        edge = 3 if summarize is None else (sys.maxsize if summarize < 0 else int(summarize))
        threshold = sys.maxsize if edge == sys.maxsize else 2 * edge
        return np.array2string(array, separator=" ", threshold=threshold, edgeitems=builtins.max(edge, 1))
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_print_text(v, summarize) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_print_text(k, summarize)}: {_print_text(v, summarize)}"
                               for k, v in value.items()) + "}"
    return str(value)


def print(*inputs, output_stream=None, summarize=3, sep=" ", end="\n", name=None):  # noqa: A001 - tf.print
    """Prints tensors (summarized to `summarize` items per edge) and Python values, to stderr by
    default, or to output_stream: sys.stdout, sys.stderr, a file object or "file://<path>"."""
    text = sep.join(_print_text(v, summarize) for v in inputs) + end
    stream = sys.stderr if output_stream is None else output_stream
    if isinstance(stream, str):
        if not stream.startswith("file://"):
            raise ValueError(f"tf.print: output_stream must be a stream or 'file://<path>', got {stream!r}")
        with open(stream[len("file://"):], "a") as f:
            f.write(text)
        return None
    if callable(stream) and not hasattr(stream, "write"):
        stream(text.rstrip("\n"))  # a logging function (logging.info, ...)
        return None
    stream.write(text)
    stream.flush() if hasattr(stream, "flush") else None
    return None


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
