#pragma once
// CPU loops behind ops/depthwise_conv.h: every element by the shared math of
// ops/depthwise_conv_math.h (as the CUDA kernels compute it). Arguments are validated; images are
// NHWC and contiguous.
#include <cstdint>

#include "mdtrain/ops/conv_math.h"

namespace mdtrain::cpu {

template <class T>
void depthwise_conv2d(const T* x, const T* kernel, std::int64_t images, const Window2D& g, std::int64_t dm, T* y);
template <class T>
void depthwise_conv2d_input_grad(const T* dy, const T* kernel, std::int64_t images, const Window2D& g, std::int64_t dm,
                                 T* dx);
template <class T>
void depthwise_conv2d_kernel_grad(const T* x, const T* dy, std::int64_t images, const Window2D& g, std::int64_t dm,
                                  T* dkernel);

}  // namespace mdtrain::cpu
