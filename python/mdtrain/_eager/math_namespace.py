"""tf.math: the element-wise, reduction and comparison ops (ops.py) under their tf.math names."""
from mdtrain._eager.ops import (abs, add, add_n, argmax, argmin, ceil, cos, count_nonzero, divide,  # noqa: F401
                                divide_no_nan, equal, exp, floor, floordiv, floormod, greater, greater_equal,
                                is_finite, is_inf, is_nan, less, less_equal, log, log1p, log_softmax,
                                logical_and, logical_not, logical_or, logical_xor, maximum, minimum, multiply,
                                negative, not_equal, pow, realdiv, reciprocal, reduce_all, reduce_any,
                                reduce_logsumexp, reduce_max, reduce_mean, reduce_min, reduce_std, reduce_sum,
                                reduce_variance, round, rsqrt, sigmoid, sign, sin, softmax, softplus, sqrt, square,
                                squared_difference, subtract, tanh, truediv)

mod = floormod
