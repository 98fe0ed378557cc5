#pragma once
// The CUDA bodies of ops/noise.h: one kernel each on the tensors' GPU's compute stream, computing
// the shared math per element (ops/noise_math.h). Arguments were validated by noise.cpp.
// Defined in noise_kernels.cu, or by the stub no_cuda.cpp.
#include <cstdint>

#include "mdtrain/core/tensor.h"

namespace mdtrain::cuda {

void gaussian_noise(const Tensor& x, double stddev, std::uint64_t seed, std::uint64_t stream,
                    std::uint64_t first_element, Tensor& y);
void gaussian_dropout(const Tensor& x, double stddev, std::uint64_t seed, std::uint64_t stream,
                      std::uint64_t first_element, Tensor& multiplier, Tensor& y);
void dropout_mask(double rate, std::uint64_t seed, std::uint64_t stream, std::uint64_t first_element, Tensor& mask);
// x (rows, inner..., channels) as rows * inner * channels; mask (rows, channels).
void scale_channels(const Tensor& x, const Tensor& mask, std::int64_t inner, Tensor& y);
double activity_penalty(const Tensor& x, double l1, double l2);
// l1 and l2 already multiplied by the scale.
void activity_penalty_backward(const Tensor& x, const Tensor& dy, double l1_scaled, double l2_scaled, Tensor& dx);

}  // namespace mdtrain::cuda
