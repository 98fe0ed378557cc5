// The CUDA kernels of ops::resize_bilinear (ops/resize_bilinear.h); their per-element math is the
// CPU loops' (ops/resize_bilinear_math.h). Listed in ops/cuda/kernel_list.h.
#include <cstdint>

#include "mdtrain/core/cuda/check.h"
#include "mdtrain/ops/cuda/grid.cuh"
#include "mdtrain/ops/cuda/launch.h"
#include "mdtrain/ops/cuda/resize_bilinear_kernels.h"
#include "mdtrain/ops/resize_bilinear_math.h"

namespace mdtrain::cuda {

using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;
using detail::OnDevice;

namespace {

template <class T>
__global__ void resize_bilinear_kernel(const T* x, T* y, math::ResizeDims<T> d, std::int64_t n) {
  for (std::int64_t k = first_index(); k < n; k += grid_stride()) y[k] = math::resize_bilinear_element(x, k, d);
}

template <class T>
__global__ void resize_bilinear_backward_kernel(const T* dy, T* dx, math::ResizeDims<T> d, std::int64_t n) {
  for (std::int64_t k = first_index(); k < n; k += grid_stride())
    dx[k] = math::resize_bilinear_backward_element(dy, k, d);
}

template <class T>
void forward(const Tensor& x, Tensor& y, const math::ResizeDims<T>& d) {
  const std::int64_t n = y.numel();
  if (n == 0) return;
  OnDevice on(y);
  resize_bilinear_kernel<T><<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), y.data<T>(), d, n);
  MDTRAIN_CUDA_CHECK_LAUNCH("resize_bilinear_kernel");
}

template <class T>
void backward(const Tensor& dy, Tensor& dx, const math::ResizeDims<T>& d) {
  const std::int64_t n = dx.numel();
  if (n == 0) return;
  OnDevice on(dx);
  resize_bilinear_backward_kernel<T><<<blocks_for(n), kThreads, 0, on.stream>>>(dy.data<T>(), dx.data<T>(), d, n);
  MDTRAIN_CUDA_CHECK_LAUNCH("resize_bilinear_backward_kernel");
}

}  // namespace

void resize_bilinear(const Tensor& x, Tensor& y, const math::ResizeDims<float>& d) { forward(x, y, d); }
void resize_bilinear(const Tensor& x, Tensor& y, const math::ResizeDims<double>& d) { forward(x, y, d); }
void resize_bilinear_backward(const Tensor& dy, Tensor& dx, const math::ResizeDims<float>& d) { backward(dy, dx, d); }
void resize_bilinear_backward(const Tensor& dy, Tensor& dx, const math::ResizeDims<double>& d) { backward(dy, dx, d); }

}  // namespace mdtrain::cuda
