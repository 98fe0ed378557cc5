#pragma once
// The ops of Keras's noise and regularization layers (nn/gaussian_noise.h, nn/gaussian_dropout.h,
// nn/spatial_dropout.h, nn/activity_regularization.h): host or one GPU, one floating dtype.
// Random numbers are keyed as ops::dropout keys them: (seed, stream = the optimizer step, the
// element's position in the global batch), so splitting a batch over replicas changes nothing.
// Bad arguments: std::invalid_argument("[ops] <op>: ...") naming the shapes.
#include <cstdint>

#include "mdtrain/core/tensor.h"

namespace mdtrain::ops {

// y = x + stddev * n_e, n_e = math::standard_normal_at(seed, stream, first_element + i).
void gaussian_noise(const Tensor& x, double stddev, std::uint64_t seed, std::uint64_t stream,
                    std::uint64_t first_element, Tensor& y);
// multiplier_e = 1 + stddev * n_e (n_e as above), y = x * multiplier. The multiplier is the
// backward's: dx = dy * multiplier (ops::multiply).
void gaussian_dropout(const Tensor& x, double stddev, std::uint64_t seed, std::uint64_t stream,
                      std::uint64_t first_element, Tensor& multiplier, Tensor& y);
// Inverted dropout's multipliers alone: mask_i = 1 / (1 - rate) where the uniform of element
// first_element + i (the one ops::dropout draws) is >= rate, else 0. rate in [0, 1).
void dropout_mask(double rate, std::uint64_t seed, std::uint64_t stream, std::uint64_t first_element, Tensor& mask);
// y[r, ..., c] = x[r, ..., c] * mask[r, c]: x is (rows, ..., channels), mask (rows, channels)
// (SpatialDropout's channels, and its backward with dy for x).
void scale_channels(const Tensor& x, const Tensor& mask, Tensor& y);
// sum over x of l1 |x| + l2 x^2, accumulated in double in a fixed order.
double activity_penalty(const Tensor& x, double l1, double l2);
// dx = dy + scale * (l1 sign(x) + 2 l2 x) (dx may alias dy).
void activity_penalty_backward(const Tensor& x, const Tensor& dy, double l1, double l2, double scale, Tensor& dx);

}  // namespace mdtrain::ops
