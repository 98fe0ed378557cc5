// The CUDA kernels of ops/parametric_activation.h and ops/over_axes.h; their math is the CPU
// loops' (ops/elementwise_math.h, ops/over_axes_math.h). Listed in ops/cuda/kernel_list.h.
#include <cstdint>

#include "mdtrain/core/cuda/check.h"
#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/ops/cuda/activation_layer_kernels.h"
#include "mdtrain/ops/cuda/grid.cuh"
#include "mdtrain/ops/cuda/launch.h"
#include "mdtrain/ops/over_axes_math.h"

namespace mdtrain::cuda {

using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;
using detail::OnDevice;
using Kind = ops::ParametricActivation::Kind;

namespace {

template <class T, Kind K>
__global__ void parametric_activation_kernel(const T* x, std::int64_t n, math::ReluArgs<T> relu, T alpha, T* y) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    if constexpr (K == Kind::ELU) y[i] = math::elu_with_alpha(x[i], alpha);
    else y[i] = math::relu_with_args(x[i], relu);
  }
}

template <class T, Kind K>
__global__ void parametric_activation_backward_kernel(const T* x, const T* dy, std::int64_t n, math::ReluArgs<T> relu,
                                                      T alpha, T* dx) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    if constexpr (K == Kind::ELU) dx[i] = math::elu_with_alpha_backward(dy[i], x[i], alpha);
    else dx[i] = math::relu_with_args_backward(dy[i], x[i], relu);
  }
}

template <class T>
__global__ void prelu_kernel(const T* x, const T* alpha, std::int64_t n, math::AxesPlan plan, T* y) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    y[i] = math::prelu(x[i], alpha[math::row_of(plan, i)]);
}

template <class T>
__global__ void prelu_input_grad_kernel(const T* x, const T* alpha, const T* dy, std::int64_t n, math::AxesPlan plan,
                                        T* dx) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    dx[i] = math::prelu_input_grad(dy[i], x[i], alpha[math::row_of(plan, i)]);
}

// One thread per alpha element, adding its row in the CPU's order.
template <class T>
__global__ void prelu_alpha_grad_kernel(const T* x, const T* dy, math::AxesPlan plan, T* dalpha) {
  for (std::int64_t r = first_index(); r < plan.rows; r += grid_stride())
    dalpha[r] = math::prelu_alpha_grad_row(x, dy, plan, r);
}

// One thread per row for the row functions: the CPU's operations in its order.
template <class T>
__global__ void softmax_over_axes_kernel(const T* x, math::AxesPlan plan, T* y) {
  for (std::int64_t r = first_index(); r < plan.rows; r += grid_stride()) math::softmax_over_row(x, y, plan, r);
}

template <class T>
__global__ void softmax_over_axes_backward_kernel(const T* y, const T* dy, math::AxesPlan plan, T* dx) {
  for (std::int64_t r = first_index(); r < plan.rows; r += grid_stride())
    math::softmax_over_backward_row(y, dy, dx, plan, r);
}

template <class T>
__global__ void unit_normalize_kernel(const T* x, math::AxesPlan plan, T* y) {
  for (std::int64_t r = first_index(); r < plan.rows; r += grid_stride()) math::unit_normalize_row(x, y, plan, r);
}

template <class T>
__global__ void unit_normalize_backward_kernel(const T* x, const T* dy, math::AxesPlan plan, T* dx) {
  for (std::int64_t r = first_index(); r < plan.rows; r += grid_stride())
    math::unit_normalize_backward_row(x, dy, dx, plan, r);
}

}  // namespace

void parametric_activation(const Tensor& x, const ops::ParametricActivation& a, Tensor& y) {
  const std::int64_t n = x.numel();
  if (n == 0) return;
  OnDevice on(y);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    const auto relu = ops::relu_args<T>(a);
    const T alpha = static_cast<T>(a.alpha);
    if (a.kind == Kind::ELU)
      parametric_activation_kernel<T, Kind::ELU>
          <<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), n, relu, alpha, y.data<T>());
    else
      parametric_activation_kernel<T, Kind::ReLU>
          <<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), n, relu, alpha, y.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("parametric_activation_kernel");
}

void parametric_activation_backward(const ops::ParametricActivation& a, const Tensor& x, const Tensor& dy, Tensor& dx) {
  const std::int64_t n = x.numel();
  if (n == 0) return;
  OnDevice on(dx);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    const auto relu = ops::relu_args<T>(a);
    const T alpha = static_cast<T>(a.alpha);
    if (a.kind == Kind::ELU)
      parametric_activation_backward_kernel<T, Kind::ELU>
          <<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), dy.data<T>(), n, relu, alpha, dx.data<T>());
    else
      parametric_activation_backward_kernel<T, Kind::ReLU>
          <<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), dy.data<T>(), n, relu, alpha, dx.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("parametric_activation_backward_kernel");
}

void prelu(const Tensor& x, const Tensor& alpha, const math::AxesPlan& plan, Tensor& y) {
  const std::int64_t n = x.numel();
  OnDevice on(y);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    prelu_kernel<T><<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), alpha.data<T>(), n, plan, y.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("prelu_kernel");
}

void prelu_backward(const Tensor& x, const Tensor& alpha, const Tensor& dy, const math::AxesPlan& plan, Tensor* dx,
                    Tensor& dalpha) {
  const std::int64_t n = x.numel();
  OnDevice on(dalpha);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    prelu_alpha_grad_kernel<T>
        <<<blocks_for(plan.rows), kThreads, 0, on.stream>>>(x.data<T>(), dy.data<T>(), plan, dalpha.data<T>());
    MDTRAIN_CUDA_CHECK_LAUNCH("prelu_alpha_grad_kernel");
    if (dx)
      prelu_input_grad_kernel<T><<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), alpha.data<T>(), dy.data<T>(),
                                                                            n, plan, dx->data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("prelu_input_grad_kernel");
}

void softmax_over_axes(const Tensor& x, const math::AxesPlan& plan, Tensor& y) {
  OnDevice on(y);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    softmax_over_axes_kernel<T><<<blocks_for(plan.rows), kThreads, 0, on.stream>>>(x.data<T>(), plan, y.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("softmax_over_axes_kernel");
}

void softmax_over_axes_backward(const Tensor& y, const Tensor& dy, const math::AxesPlan& plan, Tensor& dx) {
  OnDevice on(dx);
  dispatch_floating(y.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    softmax_over_axes_backward_kernel<T>
        <<<blocks_for(plan.rows), kThreads, 0, on.stream>>>(y.data<T>(), dy.data<T>(), plan, dx.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("softmax_over_axes_backward_kernel");
}

void unit_normalize(const Tensor& x, const math::AxesPlan& plan, Tensor& y) {
  OnDevice on(y);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    unit_normalize_kernel<T><<<blocks_for(plan.rows), kThreads, 0, on.stream>>>(x.data<T>(), plan, y.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("unit_normalize_kernel");
}

void unit_normalize_backward(const Tensor& x, const Tensor& dy, const math::AxesPlan& plan, Tensor& dx) {
  OnDevice on(dx);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    unit_normalize_backward_kernel<T>
        <<<blocks_for(plan.rows), kThreads, 0, on.stream>>>(x.data<T>(), dy.data<T>(), plan, dx.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("unit_normalize_backward_kernel");
}

}  // namespace mdtrain::cuda
