"""Element-wise math, comparisons, matmul, reductions and casts, with their gradients.

See ops.py for the conventions (dtypes, errors, recording on tapes)."""
import builtins

import numpy as np

from mdtrain._eager import dtypes
from mdtrain._eager.tensor import EagerTensor, is_tensor_like, wrap
from mdtrain._eager.op_support import _dims, _invalid, _pair, _record, _require_float, _tensor


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


# Imported last: array_ops imports this module (the package imports this one first, via ops).
from mdtrain._eager.array_ops import broadcast_to, ones_like, reshape, where, zeros_like  # noqa: E402
