"""Eager tensors, tf.Variable, GradientTape and the tf.* ops with gradients (docs/eager.md).

The `tf` namespace (mdtrain/__init__.py) takes what exports() returns; tf.math, tf.nn, tf.errors
and tf.dtypes are modules of this package.
"""
from mdtrain._eager import dtypes, errors, ops  # noqa: F401
from mdtrain._eager import math_namespace, nn_namespace  # noqa: F401
from mdtrain._eager.dtypes import DType, as_dtype  # noqa: F401
from mdtrain._eager.function import Function, function  # noqa: F401
from mdtrain._eager.tape import GradientTape, UnconnectedGradients  # noqa: F401
from mdtrain._eager.tensor import EagerTensor, TensorShape, constant, convert_to_tensor  # noqa: F401
from mdtrain._eager.variables import Variable  # noqa: F401

# Names the top-level tf namespace takes from here.
_OPS = ["abs", "add", "add_n", "argmax", "argmin", "broadcast_to", "cast", "clip_by_value", "concat", "divide",
        "equal", "executing_eagerly", "exp", "expand_dims", "fill", "gather", "greater", "greater_equal", "identity",
        "is_tensor", "less", "less_equal", "linspace", "logical_and", "logical_not", "logical_or", "matmul",
        "maximum", "minimum", "multiply", "negative", "not_equal", "one_hot", "ones", "ones_like", "pow", "print",
        "range", "rank", "reduce_all", "reduce_any", "reduce_logsumexp", "reduce_max", "reduce_mean", "reduce_min",
        "reduce_std", "reduce_sum", "reduce_variance", "reshape", "round", "shape", "sigmoid", "sign", "size",
        "split", "sqrt", "square", "squeeze", "stack", "stop_gradient", "subtract", "tanh", "transpose", "truediv",
        "unstack", "where", "zeros", "zeros_like"]
_DTYPES = ["bool", "complex64", "complex128", "double", "float16", "float32", "float64", "half", "int8", "int16",
           "int32", "int64", "string", "uint8", "uint16", "uint32", "uint64"]


def exports():
    """{name: object} of the top-level tf names."""
    out = {name: getattr(ops, name) for name in _OPS}
    out.update({name: getattr(dtypes, name) for name in _DTYPES})
    out.update(Tensor=EagerTensor, TensorShape=TensorShape, Variable=Variable, GradientTape=GradientTape,
               UnconnectedGradients=UnconnectedGradients, DType=DType, as_dtype=as_dtype, constant=constant,
               convert_to_tensor=convert_to_tensor, newaxis=None, math=math_namespace, nn=nn_namespace,
               errors=errors, dtypes=dtypes, function=function)
    return out
