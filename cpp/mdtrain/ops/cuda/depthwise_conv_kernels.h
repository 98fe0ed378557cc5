#pragma once
// CUDA bodies of ops/depthwise_conv.h: one thread per result element, computing it with the shared
// math of ops/depthwise_conv_math.h that the CPU loops call (the CPU's bits; no atomics, so the
// kernel gradient, a sum over the batch, does not depend on thread timing). Arguments were
// validated by depthwise_conv.cpp; work goes on the tensors' GPU's compute stream. Defined in
// depthwise_conv_kernels.cu, or by the stub no_cuda.cpp.
#include <cstdint>

#include "mdtrain/core/tensor.h"
#include "mdtrain/ops/conv_math.h"

namespace mdtrain::cuda {

void depthwise_conv2d(const Tensor& x, const Tensor& kernel, const Window2D& g, std::int64_t depth_multiplier,
                      Tensor& y);
void depthwise_conv2d_input_grad(const Tensor& dy, const Tensor& kernel, const Window2D& g,
                                 std::int64_t depth_multiplier, Tensor& dx);
void depthwise_conv2d_kernel_grad(const Tensor& x, const Tensor& dy, const Window2D& g, std::int64_t depth_multiplier,
                                  std::int64_t images, Tensor& dkernel);

}  // namespace mdtrain::cuda
