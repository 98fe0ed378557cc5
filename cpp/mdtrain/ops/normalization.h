#pragma once
// Normalization ops on row-major (rows, channels) tensors: the channel (last) axis is normalized
// over the rows (BatchNormalization: rows = every position of every sample) or each row over its
// channels (LayerNormalization). x, y, dy, dx and xhat are float32 or float64 of one dtype; gamma
// and beta have that dtype and shape (channels,), or are undefined for "none" (1 and 0).
// Statistics are float64 tensors, (channels,) per channel or (rows,) per row. All tensors of a call
// live in one memory: the host (any CPU device) or one GPU, where the op then runs (CPU loops, or
// the CUDA kernels of ops/cuda/normalization_kernels.h); a tensor elsewhere, or a GPU this process
// cannot use, is std::invalid_argument. Per-element math: ops/normalization_math.h.
#include "mdtrain/core/tensor.h"

namespace mdtrain::ops {

// Per channel: mean and biased variance over the rows (two passes, in double). 0 rows: 0 and 0.
void channel_moments(const Tensor& x, Tensor& mean, Tensor& variance);
// Per channel: sum and sum of squares of (x - shift) over the rows, in double.
void channel_sums(const Tensor& x, const Tensor& shift, Tensor& sum, Tensor& sum_squares);
// y = gamma * (x - mean) * inv_std + beta per channel; also writes xhat = (x - mean) * inv_std
// when xhat is not null (it is what backward needs).
void channel_normalize(const Tensor& x, const Tensor& mean, const Tensor& inv_std, const Tensor& gamma,
                       const Tensor& beta, Tensor* xhat, Tensor& y);
// Per channel: sum over the rows of dy and of dy * xhat, in double (d(loss)/d(beta) and
// d(loss)/d(gamma) of y = gamma * xhat + beta).
void channel_grad_sums(const Tensor& dy, const Tensor& xhat, Tensor& sum_dy, Tensor& sum_dy_xhat);
// dx = scale * (dy - mean_dy - xhat * mean_dy_xhat) per channel (math::normalize_input_grad). With
// batch statistics, scale = gamma * inv_std and the means are over the rows the statistics were
// taken over; with fixed statistics (inference), both means are 0.
void channel_normalize_backward(const Tensor& dy, const Tensor& xhat, const Tensor& scale, const Tensor& mean_dy,
                                const Tensor& mean_dy_xhat, Tensor& dx);

// Per row: mean and biased variance over the channels, xhat = (x - mean) * inv_std with
// inv_std = 1 / sqrt(variance + epsilon), y = gamma * xhat + beta. Writes xhat and inv_std (rows,).
void row_normalize(const Tensor& x, double epsilon, const Tensor& gamma, const Tensor& beta, Tensor& xhat,
                   Tensor& inv_std, Tensor& y);
// d(loss)/dx of row_normalize given dy: per row, g = gamma * dy and
// dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)).
void row_normalize_backward(const Tensor& dy, const Tensor& xhat, const Tensor& inv_std, const Tensor& gamma,
                            Tensor& dx);

}  // namespace mdtrain::ops
