// CUDA kernels of ops/depthwise_conv.h (see depthwise_conv_kernels.h): one thread per element of
// the result, the per-element math of ops/depthwise_conv_math.h that ops/cpu/depthwise_conv_kernels.cpp
// calls. Listed in ops/cuda/kernel_list.h. Arguments were validated by depthwise_conv.cpp.
#include <cstdint>

#include "mdtrain/core/cuda/check.h"
#include "mdtrain/ops/cuda/depthwise_conv_kernels.h"
#include "mdtrain/ops/cuda/grid.cuh"
#include "mdtrain/ops/cuda/launch.h"
#include "mdtrain/ops/depthwise_conv_math.h"

namespace mdtrain::cuda {

using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;
using detail::OnDevice;

namespace {

// y[i] for i = (((b, oh), ow), c, m) in y's NHWC order (output channel c * dm + m).
template <class T>
__global__ void depthwise_conv2d_kernel(const T* x, const T* kernel, Window2D g, std::int64_t dm, std::int64_t n,
                                        T* y) {
  const std::int64_t out_c = g.channels * dm, in_image = g.in_h * g.in_w * g.channels;
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t oc = i % out_c, pos = i / out_c, ow = pos % g.out_w, q = pos / g.out_w;
    const std::int64_t oh = q % g.out_h, b = q / g.out_h;
    y[i] = math::depthwise_output_at(x + b * in_image, kernel, g, dm, oh, ow, oc / dm, oc % dm);
  }
}

// dx[i] for i = (((b, ih), iw), c).
template <class T>
__global__ void depthwise_conv2d_input_grad_kernel(const T* dy, const T* kernel, Window2D g, std::int64_t dm,
                                                   std::int64_t n, T* dx) {
  const std::int64_t C = g.channels, out_image = g.out_h * g.out_w * C * dm;
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t c = i % C, pixel = i / C, iw = pixel % g.in_w, line = pixel / g.in_w;
    const std::int64_t ih = line % g.in_h, b = line / g.in_h;
    dx[i] = math::depthwise_input_grad_at(dy + b * out_image, kernel, g, dm, ih, iw, c);
  }
}

// dkernel[i] for i = (((kh, kw), c), m): a sum over the whole batch by one thread, in the CPU's order.
template <class T>
__global__ void depthwise_conv2d_kernel_grad_kernel(const T* x, const T* dy, Window2D g, std::int64_t dm,
                                                    std::int64_t images, std::int64_t n, T* dkernel) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t m = i % dm, q = i / dm, c = q % g.channels, tap = q / g.channels;
    dkernel[i] = math::depthwise_kernel_grad_at(x, dy, g, dm, images, tap / g.k_w, tap % g.k_w, c, m);
  }
}

}  // namespace

void depthwise_conv2d(const Tensor& x, const Tensor& kernel, const Window2D& g, std::int64_t dm, Tensor& y) {
  const std::int64_t n = y.numel();
  if (n == 0) return;
  OnDevice on(y);
  if (y.dtype() == DType::Float32)
    depthwise_conv2d_kernel<float>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<float>(), kernel.data<float>(), g, dm, n, y.data<float>());
  else
    depthwise_conv2d_kernel<double><<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<double>(), kernel.data<double>(),
                                                                               g, dm, n, y.data<double>());
  MDTRAIN_CUDA_CHECK_LAUNCH("depthwise_conv2d_kernel");
}

void depthwise_conv2d_input_grad(const Tensor& dy, const Tensor& kernel, const Window2D& g, std::int64_t dm,
                                 Tensor& dx) {
  const std::int64_t n = dx.numel();
  if (n == 0) return;
  OnDevice on(dx);
  if (dx.dtype() == DType::Float32)
    depthwise_conv2d_input_grad_kernel<float>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(dy.data<float>(), kernel.data<float>(), g, dm, n, dx.data<float>());
  else
    depthwise_conv2d_input_grad_kernel<double><<<blocks_for(n), kThreads, 0, on.stream>>>(dy.data<double>(),
                                                                                          kernel.data<double>(), g, dm,
                                                                                          n, dx.data<double>());
  MDTRAIN_CUDA_CHECK_LAUNCH("depthwise_conv2d_input_grad_kernel");
}

void depthwise_conv2d_kernel_grad(const Tensor& x, const Tensor& dy, const Window2D& g, std::int64_t dm,
                                  std::int64_t images, Tensor& dkernel) {
  const std::int64_t n = dkernel.numel();
  if (n == 0) return;
  OnDevice on(dkernel);
  if (dkernel.dtype() == DType::Float32)
    depthwise_conv2d_kernel_grad_kernel<float>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<float>(), dy.data<float>(), g, dm, images, n,
                                                    dkernel.data<float>());
  else
    depthwise_conv2d_kernel_grad_kernel<double>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<double>(), dy.data<double>(), g, dm, images, n,
                                                    dkernel.data<double>());
  MDTRAIN_CUDA_CHECK_LAUNCH("depthwise_conv2d_kernel_grad_kernel");
}

}  // namespace mdtrain::cuda
