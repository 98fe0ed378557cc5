// CUDA kernels behind ops/ops.h (all but gemm, which is cuBLAS: gemm.cpp) and the GPU fill of
// core/cuda/device_memory.h. Each kernel calls the MDTRAIN_HD math the CPU kernels call
// (ops/elementwise_math.h); ops/cuda/kernel_list.h lists them and their GPU tests.
// Arguments were validated by ops.cpp.
#include <cstdint>
#include <cstring>
#include <vector>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/cuda/device_memory.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/core/cuda/check.h"
#include "mdtrain/ops/cuda/kernels.h"
#include "mdtrain/ops/cuda/grid.cuh"
#include "mdtrain/ops/cuda/launch.h"
#include "mdtrain/ops/elementwise_math.h"

namespace mdtrain::cuda {

using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;
using detail::OnDevice;

namespace {

template <class T>
__global__ void fill_kernel(T* p, std::int64_t n, T value) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) p[i] = value;
}

// y = act(z + bias) for the element-wise activations; bias may be null.
template <class T, Activation A>
__global__ void bias_activation_kernel(const T* z, const T* bias, std::int64_t n, std::int64_t cols, T* y) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const T v = bias ? z[i] + bias[i % cols] : z[i];
    y[i] = math::activate<A>(v);
  }
}

// One thread per row, the CPU's row function: the same operations in the same order, so the
// result is the CPU's up to the device's exp.
template <class T>
__global__ void softmax_rows_kernel(const T* z, const T* bias, std::int64_t rows, std::int64_t cols, T* y) {
  for (std::int64_t r = first_index(); r < rows; r += grid_stride())
    math::softmax_row(z + r * cols, bias, cols, y + r * cols);
}

template <class T, Activation A>
__global__ void activation_backward_kernel(const T* z, const T* y, const T* dy, std::int64_t n, T* dz) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    dz[i] = math::activation_backward_at<A>(dy[i], needs_forward_input(A) ? z[i] : T(0), y[i]);
  }
}

template <class T>
__global__ void softmax_backward_rows_kernel(const T* y, const T* dy, std::int64_t rows, std::int64_t cols, T* dz) {
  for (std::int64_t r = first_index(); r < rows; r += grid_stride())
    math::softmax_backward_row(y + r * cols, dy + r * cols, cols, dz + r * cols);
}

// One thread per column adding the rows in order 0..rows-1, as the CPU loop does per column.
template <class T>
__global__ void sum_rows_kernel(const T* x, std::int64_t rows, std::int64_t cols, T beta, T* out) {
  for (std::int64_t j = first_index(); j < cols; j += grid_stride()) {
    T acc = beta == T(0) ? T(0) : (beta == T(1) ? out[j] : out[j] * beta);
    for (std::int64_t i = 0; i < rows; ++i) acc += x[i * cols + j];
    out[j] = acc;
  }
}

template <class T>
__global__ void dropout_kernel(const T* x, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                               std::uint64_t first_element, float threshold, T scale, T* mask, T* y) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::uint64_t e = first_element + static_cast<std::uint64_t>(i);
    const T m = math::dropout_mask_from_block(philox4x32(seed, stream, e >> 2), e, threshold, scale);
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

template <class T>
__global__ void multiply_kernel(const T* a, const T* b, std::int64_t n, T* y) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) y[i] = a[i] * b[i];
}

// Rows of `row_bytes` bytes, copied as 4-byte words when the rows allow it.
__global__ void gather_rows_kernel(const char* x, const std::int64_t* indices, std::int64_t count,
                                   std::int64_t row_bytes, char* out) {
  const std::int64_t total = count * row_bytes;
  const bool words = row_bytes % 4 == 0;
  const std::int64_t step = words ? 4 : 1;
  for (std::int64_t k = first_index() * step; k < total; k += grid_stride() * step) {
    const std::int64_t row = k / row_bytes, offset = k % row_bytes;
    const char* src = x + indices[row] * row_bytes + offset;
    if (words) *reinterpret_cast<std::uint32_t*>(out + k) = *reinterpret_cast<const std::uint32_t*>(src);
    else out[k] = *src;
  }
}

// flag becomes 1 when some element is NaN or infinite.
template <class T>
__global__ void all_finite_kernel(const T* x, std::int64_t n, int* flag) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    if (math::nonfinite_probe(x[i]) != T(0)) *flag = 1;
}

// Partial sums of squares per block, in double; the host adds the (few) partials in block order,
// so the result does not depend on timing.
template <class T>
__global__ void sum_of_squares_kernel(const T* x, std::int64_t n, double* partial) {
  __shared__ double lane[kThreads];
  double s = 0;
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  lane[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) lane[threadIdx.x] += lane[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = lane[0];
}

std::int64_t cols_of(const Tensor& t) { return t.ndim() == 0 ? 1 : t.shape().back(); }

}  // namespace

void fill(void* dst, const Device& device, DType dtype, std::int64_t count, double value) {
  if (count == 0) return;
  OnDevice on(device.index);
  const unsigned blocks = blocks_for(count);
  dispatch_any(dtype, "cuda", [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<<<blocks, kThreads, 0, on.stream>>>(static_cast<T*>(dst), count, static_cast<T>(value));
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("fill_kernel");
}

void bias_activation(const Tensor& z, const Tensor& bias, Activation act, Tensor& y) {
  const std::int64_t cols = cols_of(z), rows = cols ? z.numel() / cols : 0, n = z.numel();
  if (n == 0) return;
  OnDevice on(z);
  dispatch_floating(z.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    const T* zp = z.data<T>();
    const T* bp = bias.defined() ? bias.data<T>() : nullptr;
    T* yp = y.data<T>();
    const unsigned blocks = blocks_for(n);
    dispatch_activation(act, [&](auto kind) {
      constexpr Activation A = decltype(kind)::value;
      if constexpr (A == Activation::Softmax)
        softmax_rows_kernel<T><<<blocks_for(rows), kThreads, 0, on.stream>>>(zp, bp, rows, cols, yp);
      else bias_activation_kernel<T, A><<<blocks, kThreads, 0, on.stream>>>(zp, bp, n, cols, yp);
    });
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("bias_activation_kernel");
}

void activation_backward(Activation act, const Tensor& z, const Tensor& y, const Tensor& dy, Tensor& dz) {
  const std::int64_t cols = cols_of(y), rows = cols ? y.numel() / cols : 0, n = y.numel();
  if (n == 0) return;
  OnDevice on(y);
  if (act == Activation::Linear) {
    if (!dz.same_storage(dy))
      MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(dz.raw(), dy.raw(), dz.nbytes(), cudaMemcpyDeviceToDevice, on.stream));
    return;
  }
  dispatch_floating(y.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    const T* zp = z.defined() ? z.data<T>() : nullptr;
    const T* yp = y.data<T>();
    const T* dyp = dy.data<T>();
    T* dzp = dz.data<T>();
    const unsigned blocks = blocks_for(n);
    dispatch_activation(act, [&](auto kind) {
      constexpr Activation A = decltype(kind)::value;
      if constexpr (A == Activation::Softmax)
        softmax_backward_rows_kernel<T><<<blocks_for(rows), kThreads, 0, on.stream>>>(yp, dyp, rows, cols, dzp);
      else if constexpr (A != Activation::Linear)
        activation_backward_kernel<T, A><<<blocks, kThreads, 0, on.stream>>>(zp, yp, dyp, n, dzp);
    });
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("activation_backward_kernel");
}

void sum_rows(const Tensor& x, Tensor& out, double beta) {
  const std::int64_t cols = cols_of(x), rows = cols ? x.numel() / cols : 0;
  if (cols == 0) return;
  OnDevice on(x);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    sum_rows_kernel<T>
        <<<blocks_for(cols), kThreads, 0, on.stream>>>(x.data<T>(), rows, cols, static_cast<T>(beta), out.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("sum_rows_kernel");
}

void dropout(const Tensor& x, double rate, std::uint64_t seed, std::uint64_t stream, std::uint64_t first_element,
             Tensor& mask, Tensor& y) {
  const std::int64_t n = x.numel();
  if (n == 0) return;
  OnDevice on(x);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    // The scalars exactly as cpu::dropout computes them.
    const T scale = static_cast<T>(1.0 / (1.0 - rate));
    const float threshold = static_cast<float>(rate);
    dropout_kernel<T><<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), n, seed, stream, first_element, threshold,
                                                                 scale, mask.data<T>(), y.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("dropout_kernel");
}

void multiply(const Tensor& a, const Tensor& b, Tensor& y) {
  const std::int64_t n = a.numel();
  if (n == 0) return;
  OnDevice on(a);
  dispatch_floating(a.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    multiply_kernel<T><<<blocks_for(n), kThreads, 0, on.stream>>>(a.data<T>(), b.data<T>(), n, y.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("multiply_kernel");
}

void gather_rows(const Tensor& x, const std::int64_t* indices, std::int64_t count, Tensor& out) {
  if (count == 0) return;
  const std::int64_t row_bytes = x.row_size() * static_cast<std::int64_t>(size_of(x.dtype()));
  const int device = out.device().index;
  if (x.device().is_cpu()) {
    // The input batch: gathered on the host straight into pinned memory, then one async copy.
    const char* src = static_cast<const char*>(x.raw());
    detail::stage_to_device(device, out.raw(), static_cast<std::size_t>(count * row_bytes), [&](void* staging) {
      char* dst = static_cast<char*>(staging);
      for (std::int64_t i = 0; i < count; ++i)
        std::memcpy(dst + i * row_bytes, src + indices[i] * row_bytes, static_cast<std::size_t>(row_bytes));
    });
    return;
  }
  // Both on the GPU: the (validated) row numbers go up through staging, then a gather kernel.
  OnDevice on(device);
  std::shared_ptr<void> idx = allocate(out.device(), static_cast<std::size_t>(count) * sizeof(std::int64_t));
  detail::stage_to_device(device, idx.get(), static_cast<std::size_t>(count) * sizeof(std::int64_t),
                          [&](void* staging) {
                            std::memcpy(staging, indices, static_cast<std::size_t>(count) * sizeof(std::int64_t));
                          });
  gather_rows_kernel<<<blocks_for(count * row_bytes / 4 + 1), kThreads, 0, on.stream>>>(
      static_cast<const char*>(x.raw()), static_cast<const std::int64_t*>(idx.get()), count, row_bytes,
      static_cast<char*>(out.raw()));
  MDTRAIN_CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

bool all_finite(const Tensor& x) {
  const std::int64_t n = x.numel();
  if (n == 0) return true;
  OnDevice on(x);
  std::shared_ptr<void> flag = allocate(x.device(), sizeof(int));
  MDTRAIN_CUDA_CHECK(cudaMemsetAsync(flag.get(), 0, sizeof(int), on.stream));
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    all_finite_kernel<T><<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), n, static_cast<int*>(flag.get()));
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("all_finite_kernel");
  int host = 0;
  detail::copy_to_host(&host, flag.get(), sizeof(int), on.stream);
  return host == 0;
}

double sum_of_squares(const Tensor& x) {
  const std::int64_t n = x.numel();
  if (n == 0) return 0.0;
  OnDevice on(x);
  const unsigned blocks = blocks_for(n);
  std::shared_ptr<void> partial = allocate(x.device(), blocks * sizeof(double));
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    sum_of_squares_kernel<T><<<blocks, kThreads, 0, on.stream>>>(x.data<T>(), n, static_cast<double*>(partial.get()));
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("sum_of_squares_kernel");
  std::vector<double> host(blocks);
  detail::copy_to_host(host.data(), partial.get(), blocks * sizeof(double), on.stream);
  double s = 0;
  for (double p : host) s += p;
  return s;
}

}  // namespace mdtrain::cuda
