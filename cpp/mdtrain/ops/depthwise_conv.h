#pragma once
// The validated op API of the depthwise convolution over NHWC images (DepthwiseConv2D and the
// first step of SeparableConv2D): each function checks shapes, dtypes and devices and then runs
// the device's kernels, the CPU loops or the CUDA kernels, which compute every element with the
// shared math of ops/depthwise_conv_math.h (the same bits on both).
//
// A depthwise convolution is a direct loop, not im2col + GEMM: each output channel reads one
// input channel only, so the GEMM would be channels tiny products of k_h * k_w terms.
#include <cstdint>

#include "mdtrain/core/tensor.h"
#include "mdtrain/ops/conv_math.h"

namespace mdtrain::ops {

// y (images, out_h, out_w, channels * depth_multiplier) = the depthwise convolution of x (images,
// in_h, in_w, channels) with kernel (k_h, k_w, channels, depth_multiplier), no bias; output
// channel c * depth_multiplier + m is input channel c through kernel[..., c, m].
void depthwise_conv2d(const Tensor& x, const Tensor& kernel, const Window2D& g, std::int64_t depth_multiplier,
                      Tensor& y);
// dx (x's shape) overwritten with dL/dx given dy (y's shape).
void depthwise_conv2d_input_grad(const Tensor& dy, const Tensor& kernel, const Window2D& g,
                                 std::int64_t depth_multiplier, Tensor& dx);
// dkernel (the kernel's shape) overwritten with dL/dkernel given the input x and dy.
void depthwise_conv2d_kernel_grad(const Tensor& x, const Tensor& dy, const Window2D& g, std::int64_t depth_multiplier,
                                  Tensor& dkernel);

}  // namespace mdtrain::ops
