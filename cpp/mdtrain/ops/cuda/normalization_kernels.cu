// CUDA kernels behind ops/normalization.h. The per-element math is the MDTRAIN_HD functions of
// ops/normalization_math.h that the CPU loops (ops/cpu/normalization_kernels.cpp) call;
// ops/cuda/kernel_list.h lists the kernels and their GPU tests. Arguments were validated by
// normalization.cpp.
//
// Determinism: no atomics. A per-channel sum over the rows is two kernels: channel_partials_kernel
// gives each block a tile of 32 channels and a fixed chunk of rows (the chunking is a function of
// the row count alone, never of the GPU), its 8 row lanes are added in a fixed tree, and
// channel_combine_kernel adds the chunks' partials per channel in chunk order. A per-row sum
// (LayerNormalization) is one block per row adding its threads' strided sums in a fixed tree.
#include <algorithm>
#include <cstdint>
#include <memory>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/cuda/device_memory.h"
#include "mdtrain/core/cuda/check.h"
#include "mdtrain/ops/cuda/grid.cuh"
#include "mdtrain/ops/cuda/launch.h"
#include "mdtrain/ops/cuda/normalization_kernels.h"
#include "mdtrain/ops/normalization_math.h"

namespace mdtrain::cuda {

using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;
using detail::OnDevice;

namespace {

// channel_partials_kernel's blocks are kChannelTile x kRowLanes threads: a warp reads 32
// consecutive channels of one row (coalesced), the 8 warps read 8 rows at a time.
constexpr int kChannelTile = 32;
constexpr int kRowLanes = 8;

// What a per-channel reduction sums, per element: one value a, or two (a, b).
enum class ChannelSum {
  Values,                   // a = x                          (channel_moments, first pass)
  CenteredSquares,          // a = (x - center)^2             (channel_moments, second pass)
  ShiftedValuesAndSquares,  // a = x - shift, b = a^2         (channel_sums)
  GradAndGradXhat,          // a = dy, b = dy * xhat          (channel_grad_sums; x is dy)
};

// partial_a/b[chunk * channels + c]: the sum over the rows of chunk `blockIdx.y` (chunk_rows rows)
// of channel c. partial_b is null for the one-value sums.
template <class T, ChannelSum S>
__global__ void channel_partials_kernel(const T* x, const T* xhat, const double* center, std::int64_t rows,
                                        std::int64_t channels, std::int64_t chunk_rows, double* partial_a,
                                        double* partial_b) {
  __shared__ double lane_a[kRowLanes][kChannelTile];
  __shared__ double lane_b[kRowLanes][kChannelTile];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kChannelTile + tx;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * chunk_rows;
  const std::int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
  double a = 0.0, b = 0.0;
  if (c < channels) {
    for (std::int64_t r = begin + ty; r < end; r += kRowLanes) {
      const std::int64_t i = r * channels + c;
      if constexpr (S == ChannelSum::Values) {
        a += static_cast<double>(x[i]);
      } else if constexpr (S == ChannelSum::CenteredSquares) {
        const double d = math::deviation(x[i], center[c]);
        a += d * d;
      } else if constexpr (S == ChannelSum::ShiftedValuesAndSquares) {
        const double d = math::deviation(x[i], center[c]);
        a += d;
        b += d * d;
      } else {
        a += static_cast<double>(x[i]);
        b += math::grad_times_xhat(x[i], xhat[i]);
      }
    }
  }
  lane_a[ty][tx] = a;
  lane_b[ty][tx] = b;
  __syncthreads();
  for (int half = kRowLanes / 2; half > 0; half /= 2) {
    if (ty < half) {
      lane_a[ty][tx] += lane_a[ty + half][tx];
      lane_b[ty][tx] += lane_b[ty + half][tx];
    }
    __syncthreads();
  }
  if (ty == 0 && c < channels) {
    partial_a[static_cast<std::int64_t>(blockIdx.y) * channels + c] = lane_a[0][tx];
    if (partial_b) partial_b[static_cast<std::int64_t>(blockIdx.y) * channels + c] = lane_b[0][tx];
  }
}

// out_a[c] = (sum over the chunks, in chunk order, of partial_a) / divisor; the same for b when
// partial_b is not null. divisor is the row count for means, 1 for sums.
__global__ void channel_combine_kernel(const double* partial_a, const double* partial_b, std::int64_t chunks,
                                       std::int64_t channels, double divisor, double* out_a, double* out_b) {
  for (std::int64_t c = first_index(); c < channels; c += grid_stride()) {
    double a = 0.0, b = 0.0;
    for (std::int64_t k = 0; k < chunks; ++k) {
      a += partial_a[k * channels + c];
      if (partial_b) b += partial_b[k * channels + c];
    }
    out_a[c] = a / divisor;
    if (partial_b) out_b[c] = b / divisor;
  }
}

template <class T>
__global__ void channel_normalize_kernel(const T* x, std::int64_t n, std::int64_t channels, const double* mean,
                                         const double* inv_std, const T* gamma, const T* beta, T* xhat, T* y) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t c = i % channels;
    const T v = math::normalize(x[i], mean[c], inv_std[c]);
    if (xhat) xhat[i] = v;
    y[i] = math::scale_and_shift(v, gamma ? gamma[c] : T(1), beta ? beta[c] : T(0));
  }
}

template <class T>
__global__ void channel_normalize_backward_kernel(const T* dy, const T* xhat, std::int64_t n, std::int64_t channels,
                                                  const double* scale, const double* mean_dy,
                                                  const double* mean_dy_xhat, T* dx) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t c = i % channels;
    dx[i] = math::normalize_input_grad(dy[i], xhat[i], scale[c], mean_dy[c], mean_dy_xhat[c]);
  }
}

// a and b summed over the block's kThreads threads in a fixed tree (the same association on every
// run), the totals returned to every thread. Every thread of the block must call it.
__device__ void block_sums(double& a, double& b) {
  __shared__ double lane_a[kThreads], lane_b[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  lane_a[t] = a;
  lane_b[t] = b;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) {
      lane_a[t] += lane_a[t + half];
      lane_b[t] += lane_b[t + half];
    }
    __syncthreads();
  }
  a = lane_a[0];
  b = lane_b[0];
  __syncthreads();  // every thread has read the totals before a next call overwrites them
}

// One block of kThreads per row (rows stride by the grid): the CPU's two passes (mean, then the
// centred squares), each a block sum.
template <class T>
__global__ void row_normalize_kernel(const T* x, std::int64_t rows, std::int64_t channels, double epsilon,
                                     const T* gamma, const T* beta, T* xhat, double* inv_std, T* y) {
  const double n = static_cast<double>(channels);
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* in = x + r * channels;
    double sum = 0.0, unused = 0.0;
    for (std::int64_t c = threadIdx.x; c < channels; c += kThreads) sum += static_cast<double>(in[c]);
    block_sums(sum, unused);
    const double mean = sum / n;
    double squares = 0.0;
    for (std::int64_t c = threadIdx.x; c < channels; c += kThreads) {
      const double d = math::deviation(in[c], mean);
      squares += d * d;
    }
    block_sums(squares, unused);
    const double s = math::inverse_std(squares / n, epsilon);
    if (threadIdx.x == 0) inv_std[r] = s;
    T* h = xhat + r * channels;
    T* out = y + r * channels;
    for (std::int64_t c = threadIdx.x; c < channels; c += kThreads) {
      h[c] = math::normalize(in[c], mean, s);
      out[c] = math::scale_and_shift(h[c], gamma ? gamma[c] : T(1), beta ? beta[c] : T(0));
    }
  }
}

// One block per row: the sums of g = gamma * dy and g * xhat, then dx.
template <class T>
__global__ void row_normalize_backward_kernel(const T* dy, const T* xhat, std::int64_t rows, std::int64_t channels,
                                              const double* inv_std, const T* gamma, T* dx) {
  const double n = static_cast<double>(channels);
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* g_row = dy + r * channels;
    const T* h = xhat + r * channels;
    double sum_g = 0.0, sum_g_xhat = 0.0;
    for (std::int64_t c = threadIdx.x; c < channels; c += kThreads) {
      const double g = math::scaled_grad(g_row[c], gamma ? gamma[c] : T(1));
      sum_g += g;
      sum_g_xhat += math::grad_times_xhat(g, h[c]);
    }
    block_sums(sum_g, sum_g_xhat);
    T* out = dx + r * channels;
    for (std::int64_t c = threadIdx.x; c < channels; c += kThreads) {
      const double g = math::scaled_grad(g_row[c], gamma ? gamma[c] : T(1));
      out[c] = static_cast<T>(
          math::normalize_input_grad(g, static_cast<double>(h[c]), inv_std[r], sum_g / n, sum_g_xhat / n));
    }
  }
}

template <class T>
const T* optional_data(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Blocks of the per-row kernels: one per row, at most 4096 (they stride over the rows).
unsigned row_blocks(std::int64_t rows) { return static_cast<unsigned>(std::min<std::int64_t>(rows, 4096)); }

// How channel_partials_kernel splits the rows: chunks of at least 64 rows, at most 1024 chunks. A
// function of the row count only, so a sum is associated the same way on every GPU.
struct Chunks {
  std::int64_t count, rows;
};
Chunks chunks_of(std::int64_t rows) {
  constexpr std::int64_t kMinRows = 64, kMaxChunks = 1024;
  const std::int64_t wanted = std::min(kMaxChunks, std::max<std::int64_t>(1, (rows + kMinRows - 1) / kMinRows));
  const std::int64_t per = (rows + wanted - 1) / wanted;
  return {(rows + per - 1) / per, per};
}

// out_a (and out_b when not null) = the per-channel sums S over rows > 0 rows, divided by divisor.
template <class T, ChannelSum S>
void channel_reduce(const OnDevice& on, const Device& device, const T* x, const T* xhat, const double* center,
                    std::int64_t rows, std::int64_t channels, double divisor, double* out_a, double* out_b) {
  const Chunks chunks = chunks_of(rows);
  const std::int64_t per_sum = chunks.count * channels;
  // Freed at return, while the kernels may still run: the caching allocator hands the block only to
  // later work on this same compute stream.
  std::shared_ptr<void> partial =
      allocate(device, static_cast<std::size_t>(out_b ? 2 * per_sum : per_sum) * sizeof(double));
  double* partial_a = static_cast<double*>(partial.get());
  double* partial_b = out_b ? partial_a + per_sum : nullptr;
  const dim3 block(kChannelTile, kRowLanes);
  const dim3 grid(static_cast<unsigned>((channels + kChannelTile - 1) / kChannelTile),
                  static_cast<unsigned>(chunks.count));
  channel_partials_kernel<T, S>
      <<<grid, block, 0, on.stream>>>(x, xhat, center, rows, channels, chunks.rows, partial_a, partial_b);
  MDTRAIN_CUDA_CHECK_LAUNCH("channel_partials_kernel");
  channel_combine_kernel<<<blocks_for(channels), kThreads, 0, on.stream>>>(partial_a, partial_b, chunks.count, channels,
                                                                           divisor, out_a, out_b);
  MDTRAIN_CUDA_CHECK_LAUNCH("channel_combine_kernel");
}

// No rows: every sum (and, as on the CPU, every moment) is 0.
void zero_stats(const OnDevice& on, Tensor& a, Tensor& b) {
  MDTRAIN_CUDA_CHECK(cudaMemsetAsync(a.raw(), 0, a.nbytes(), on.stream));
  MDTRAIN_CUDA_CHECK(cudaMemsetAsync(b.raw(), 0, b.nbytes(), on.stream));
}

}  // namespace

void channel_moments(const Tensor& x, Tensor& mean, Tensor& variance) {
  const std::int64_t rows = x.dim(0), channels = x.dim(1);
  if (channels == 0) return;
  OnDevice on(x);
  if (rows == 0) return zero_stats(on, mean, variance);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    const double n = static_cast<double>(rows);
    channel_reduce<T, ChannelSum::Values>(on, x.device(), x.data<T>(), nullptr, nullptr, rows, channels, n,
                                          mean.data<double>(), nullptr);
    // Second pass on the values centred on that mean, as the CPU: no cancellation.
    channel_reduce<T, ChannelSum::CenteredSquares>(on, x.device(), x.data<T>(), nullptr, mean.data<double>(), rows,
                                                   channels, n, variance.data<double>(), nullptr);
  });
}

void channel_sums(const Tensor& x, const Tensor& shift, Tensor& sum, Tensor& sum_squares) {
  const std::int64_t rows = x.dim(0), channels = x.dim(1);
  if (channels == 0) return;
  OnDevice on(x);
  if (rows == 0) return zero_stats(on, sum, sum_squares);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    channel_reduce<T, ChannelSum::ShiftedValuesAndSquares>(on, x.device(), x.data<T>(), nullptr, shift.data<double>(),
                                                           rows, channels, 1.0, sum.data<double>(),
                                                           sum_squares.data<double>());
  });
}

void channel_normalize(const Tensor& x, const Tensor& mean, const Tensor& inv_std, const Tensor& gamma,
                       const Tensor& beta, Tensor* xhat, Tensor& y) {
  const std::int64_t n = x.numel(), channels = x.dim(1);
  if (n == 0) return;
  OnDevice on(x);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    channel_normalize_kernel<T>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(x.data<T>(), n, channels, mean.data<double>(),
                                                    inv_std.data<double>(), optional_data<T>(gamma),
                                                    optional_data<T>(beta), xhat ? xhat->data<T>() : nullptr,
                                                    y.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("channel_normalize_kernel");
}

void channel_grad_sums(const Tensor& dy, const Tensor& xhat, Tensor& sum_dy, Tensor& sum_dy_xhat) {
  const std::int64_t rows = dy.dim(0), channels = dy.dim(1);
  if (channels == 0) return;
  OnDevice on(dy);
  if (rows == 0) return zero_stats(on, sum_dy, sum_dy_xhat);
  dispatch_floating(dy.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    channel_reduce<T, ChannelSum::GradAndGradXhat>(on, dy.device(), dy.data<T>(), xhat.data<T>(), nullptr, rows,
                                                   channels, 1.0, sum_dy.data<double>(), sum_dy_xhat.data<double>());
  });
}

void channel_normalize_backward(const Tensor& dy, const Tensor& xhat, const Tensor& scale, const Tensor& mean_dy,
                                const Tensor& mean_dy_xhat, Tensor& dx) {
  const std::int64_t n = dy.numel(), channels = dy.dim(1);
  if (n == 0) return;
  OnDevice on(dy);
  dispatch_floating(dy.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    channel_normalize_backward_kernel<T>
        <<<blocks_for(n), kThreads, 0, on.stream>>>(dy.data<T>(), xhat.data<T>(), n, channels, scale.data<double>(),
                                                    mean_dy.data<double>(), mean_dy_xhat.data<double>(), dx.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("channel_normalize_backward_kernel");
}

void row_normalize(const Tensor& x, double epsilon, const Tensor& gamma, const Tensor& beta, Tensor& xhat,
                   Tensor& inv_std, Tensor& y) {
  const std::int64_t rows = x.dim(0), channels = x.dim(1);
  if (rows == 0) return;
  OnDevice on(x);
  dispatch_floating(x.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    row_normalize_kernel<T><<<row_blocks(rows), kThreads, 0, on.stream>>>(x.data<T>(), rows, channels, epsilon,
                                                                          optional_data<T>(gamma),
                                                                          optional_data<T>(beta), xhat.data<T>(),
                                                                          inv_std.data<double>(), y.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("row_normalize_kernel");
}

void row_normalize_backward(const Tensor& dy, const Tensor& xhat, const Tensor& inv_std, const Tensor& gamma,
                            Tensor& dx) {
  const std::int64_t rows = dy.dim(0), channels = dy.dim(1);
  if (rows == 0 || channels == 0) return;
  OnDevice on(dy);
  dispatch_floating(dy.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    row_normalize_backward_kernel<T>
        <<<row_blocks(rows), kThreads, 0, on.stream>>>(dy.data<T>(), xhat.data<T>(), rows, channels,
                                                       inv_std.data<double>(), optional_data<T>(gamma), dx.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("row_normalize_backward_kernel");
}

}  // namespace mdtrain::cuda
