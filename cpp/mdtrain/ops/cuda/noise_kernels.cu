// The CUDA kernels of ops/noise.h; their per-element math is the CPU loops' (ops/noise_math.h,
// ops/elementwise_math.h). Listed in ops/cuda/kernel_list.h.
#include <cstdint>
#include <vector>

#include "mdtrain/core/cuda/check.h"
#include "mdtrain/core/cuda/device_memory.h"
#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/rng.h"
#include "mdtrain/ops/cuda/grid.cuh"
#include "mdtrain/ops/cuda/launch.h"
#include "mdtrain/ops/cuda/noise_kernels.h"
#include "mdtrain/ops/elementwise_math.h"
#include "mdtrain/ops/noise_math.h"

namespace mdtrain::cuda {

using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;
using detail::OnDevice;

namespace {

template <class T>
__global__ void gaussian_noise_kernel(const T* x, std::int64_t n, double stddev, std::uint64_t seed,
                                      std::uint64_t stream, std::uint64_t first_element, T* y) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    y[i] =
        math::add_gaussian_noise(x[i], stddev,
                                 math::standard_normal_at(seed, stream, first_element + static_cast<std::uint64_t>(i)));
}

template <class T>
__global__ void gaussian_dropout_kernel(const T* x, std::int64_t n, double stddev, std::uint64_t seed,
                                        std::uint64_t stream, std::uint64_t first_element, T* multiplier, T* y) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const T m =
        math::gaussian_multiplier<T>(stddev, math::standard_normal_at(seed, stream,
                                                                      first_element + static_cast<std::uint64_t>(i)));
    multiplier[i] = m;
    y[i] = x[i] * m;
  }
}

template <class T>
__global__ void dropout_mask_kernel(std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                                    std::uint64_t first_element, float threshold, T scale, T* mask) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::uint64_t e = first_element + static_cast<std::uint64_t>(i);
    mask[i] = math::dropout_mask_from_block(philox4x32(seed, stream, e >> 2), e, threshold, scale);
  }
}

template <class T>
__global__ void scale_channels_kernel(const T* x, const T* mask, std::int64_t n, std::int64_t inner,
                                      std::int64_t channels, T* y) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t c = i % channels, r = i / channels / inner;
    y[i] = x[i] * mask[r * channels + c];
  }
}

// Partial penalties per block in double; the host adds them in block order (as sum_of_squares).
template <class T>
__global__ void activity_penalty_kernel(const T* x, std::int64_t n, double l1, double l2, double* partial) {
  __shared__ double lane[kThreads];
  double s = 0;
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    s += math::activity_penalty_of(static_cast<double>(x[i]), l1, l2);
  lane[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) lane[threadIdx.x] += lane[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = lane[0];
}

template <class T>
__global__ void activity_penalty_backward_kernel(const T* x, const T* dy, std::int64_t n, T l1_scaled, T l2_scaled,
                                                 T* dx) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    dx[i] = math::add_activity_penalty_grad(x[i], dy[i], l1_scaled, l2_scaled);
}

}  // namespace

void gaussian_noise(const Tensor& x, double stddev, std::uint64_t seed, std::uint64_t stream,
                    std::uint64_t first_element, Tensor& y) {
  const std::int64_t n = x.numel();
  if (n == 0) return;
  OnDevice on(x);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    gaussian_noise_kernel<T>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), n, stddev, seed, stream, first_element, y.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("gaussian_noise_kernel");
}

void gaussian_dropout(const Tensor& x, double stddev, std::uint64_t seed, std::uint64_t stream,
                      std::uint64_t first_element, Tensor& multiplier, Tensor& y) {
  const std::int64_t n = x.numel();
  if (n == 0) return;
  OnDevice on(x);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    gaussian_dropout_kernel<T><<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), n, stddev, seed, stream,
                                                                          first_element, multiplier.data<T>(),
                                                                          y.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("gaussian_dropout_kernel");
}

void dropout_mask(double rate, std::uint64_t seed, std::uint64_t stream, std::uint64_t first_element, Tensor& mask) {
  const std::int64_t n = mask.numel();
  if (n == 0) return;
  OnDevice on(mask);
  dispatch_floating(mask.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    // The scalars exactly as cpu::dropout_mask computes them.
    const T scale = static_cast<T>(1.0 / (1.0 - rate));
    const float threshold = static_cast<float>(rate);
    dropout_mask_kernel<T>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(n, seed, stream, first_element, threshold, scale, mask.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("dropout_mask_kernel");
}

void scale_channels(const Tensor& x, const Tensor& mask, std::int64_t inner, Tensor& y) {
  const std::int64_t n = x.numel();
  if (n == 0) return;
  OnDevice on(x);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    scale_channels_kernel<T>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), mask.data<T>(), n, inner, mask.dim(1), y.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("scale_channels_kernel");
}

double activity_penalty(const Tensor& x, double l1, double l2) {
  const std::int64_t n = x.numel();
  if (n == 0) return 0.0;
  OnDevice on(x);
  const unsigned blocks = blocks_for(n);
  std::shared_ptr<void> partial = allocate(x.device(), blocks * sizeof(double));
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    activity_penalty_kernel<T>
        <<<blocks, kThreads, 0, on.stream>>>(x.data<T>(), n, l1, l2, static_cast<double*>(partial.get()));
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("activity_penalty_kernel");
  std::vector<double> host(blocks);
  detail::copy_to_host(host.data(), partial.get(), blocks * sizeof(double), on.stream);
  double s = 0;
  for (double p : host) s += p;
  return s;
}

void activity_penalty_backward(const Tensor& x, const Tensor& dy, double l1_scaled, double l2_scaled, Tensor& dx) {
  const std::int64_t n = x.numel();
  if (n == 0) return;
  OnDevice on(x);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    activity_penalty_backward_kernel<T>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), dy.data<T>(), n, static_cast<T>(l1_scaled),
                                                    static_cast<T>(l2_scaled), dx.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("activity_penalty_backward_kernel");
}

}  // namespace mdtrain::cuda
