"""The tf.* ops eager tensors support, computed in NumPy, with their gradients: one namespace
over math_ops, array_ops, nn_ops and printing (operators.py installs +, @, [], ... on import).

Each differentiable op records itself on the tapes that watch one of its inputs (tape.record)
with a backward function written with these same ops, so the backward pass is itself recorded by
an outer tape (higher-order gradients). Values keep their dtype: float32 stays float32, float64
stays float64. Two tensor operands must have one dtype (TensorFlow's rule); a Python or NumPy
operand is converted to the tensor's dtype. Errors are tf.errors.InvalidArgumentError (also a
ValueError) with TensorFlow's message, or TypeError for values of the wrong kind.
"""
# Importing operators installs them on EagerTensor and Variable; the rest is re-exported.
from mdtrain._eager import operators  # noqa: F401
from mdtrain._eager.math_ops import (abs, add, add_n, argmax, argmin, cast, ceil, clip_by_value, cos, count_nonzero,
                                     divide, divide_no_nan, equal, exp, floor, floordiv, floormod, greater,
                                     greater_equal, identity, is_finite, is_inf, is_nan, leaky_relu, less,
                                     less_equal, log, log1p, logical_and, logical_not, logical_or, logical_xor,
                                     matmul, maximum, minimum, multiply, negative, not_equal, pow, realdiv,
                                     reciprocal, reduce_all, reduce_any, reduce_logsumexp, reduce_max, reduce_mean,
                                     reduce_min, reduce_std, reduce_sum, reduce_variance, relu, round, rsqrt,
                                     sigmoid, sign, sin, softplus, sqrt, square, squared_difference, stop_gradient,
                                     subtract, tanh, truediv)
from mdtrain._eager.array_ops import (broadcast_to, concat, executing_eagerly, expand_dims, fill, gather, getitem,
                                      is_tensor, linspace, one_hot, ones, ones_like, range, rank, reshape, shape,
                                      size, split, squeeze, stack, transpose, unstack, where, zeros, zeros_like)
from mdtrain._eager.nn_ops import (bias_add, compute_average_loss, l2_loss, log_softmax, scale_regularization_loss,
                                   sigmoid_cross_entropy_with_logits, softmax, softmax_cross_entropy_with_logits,
                                   sparse_softmax_cross_entropy_with_logits)
from mdtrain._eager.printing import print
from mdtrain._eager.tensor import constant, convert_to_tensor  # noqa: F401
