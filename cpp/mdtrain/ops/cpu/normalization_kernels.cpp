#include "mdtrain/ops/cpu/normalization_kernels.h"

#include <algorithm>

#include "mdtrain/ops/normalization_math.h"

namespace mdtrain::cpu {

// Channel loops run rows outermost and channels innermost: contiguous reads, and the per-channel
// accumulators (a few KB at most) stay in cache.

template <class T>
void channel_moments(const T* x, std::int64_t rows, std::int64_t channels, double* mean, double* var) {
  std::fill(mean, mean + channels, 0.0);
  std::fill(var, var + channels, 0.0);
  if (rows == 0) return;
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * channels;
    for (std::int64_t c = 0; c < channels; ++c) mean[c] += static_cast<double>(row[c]);
  }
  const double n = static_cast<double>(rows);
  for (std::int64_t c = 0; c < channels; ++c) mean[c] /= n;
  // Second pass on the centred values: no cancellation, whatever the data's offset.
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * channels;
    for (std::int64_t c = 0; c < channels; ++c) {
      const double d = math::deviation(row[c], mean[c]);
      var[c] += d * d;
    }
  }
  for (std::int64_t c = 0; c < channels; ++c) var[c] /= n;
}

template <class T>
void channel_sums(const T* x, std::int64_t rows, std::int64_t channels, const double* shift, double* sum,
                  double* sum_squares) {
  std::fill(sum, sum + channels, 0.0);
  std::fill(sum_squares, sum_squares + channels, 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * channels;
    for (std::int64_t c = 0; c < channels; ++c) {
      const double d = math::deviation(row[c], shift[c]);
      sum[c] += d;
      sum_squares[c] += d * d;
    }
  }
}

template <class T>
void channel_normalize(const T* x, std::int64_t rows, std::int64_t channels, const double* mean, const double* inv_std,
                       const T* gamma, const T* beta, T* xhat, T* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* in = x + r * channels;
    T* out = y + r * channels;
    T* h = xhat ? xhat + r * channels : nullptr;
    for (std::int64_t c = 0; c < channels; ++c) {
      const T n = math::normalize(in[c], mean[c], inv_std[c]);
      if (h) h[c] = n;
      out[c] = math::scale_and_shift(n, gamma ? gamma[c] : T(1), beta ? beta[c] : T(0));
    }
  }
}

template <class T>
void channel_grad_sums(const T* dy, const T* xhat, std::int64_t rows, std::int64_t channels, double* sum_dy,
                       double* sum_dy_xhat) {
  std::fill(sum_dy, sum_dy + channels, 0.0);
  std::fill(sum_dy_xhat, sum_dy_xhat + channels, 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* g = dy + r * channels;
    const T* h = xhat + r * channels;
    for (std::int64_t c = 0; c < channels; ++c) {
      sum_dy[c] += static_cast<double>(g[c]);
      sum_dy_xhat[c] += math::grad_times_xhat(g[c], h[c]);
    }
  }
}

template <class T>
void channel_normalize_backward(const T* dy, const T* xhat, std::int64_t rows, std::int64_t channels,
                                const double* scale, const double* mean_dy, const double* mean_dy_xhat, T* dx) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* g = dy + r * channels;
    const T* h = xhat + r * channels;
    T* out = dx + r * channels;
    for (std::int64_t c = 0; c < channels; ++c)
      out[c] = math::normalize_input_grad(g[c], h[c], scale[c], mean_dy[c], mean_dy_xhat[c]);
  }
}

template <class T>
void row_normalize(const T* x, std::int64_t rows, std::int64_t channels, double epsilon, const T* gamma, const T* beta,
                   T* xhat, double* inv_std, T* y) {
  const double n = static_cast<double>(channels);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* in = x + r * channels;
    double mean = 0;
    for (std::int64_t c = 0; c < channels; ++c) mean += static_cast<double>(in[c]);
    mean /= n;
    double var = 0;
    for (std::int64_t c = 0; c < channels; ++c) {
      const double d = math::deviation(in[c], mean);
      var += d * d;
    }
    const double s = math::inverse_std(var / n, epsilon);
    inv_std[r] = s;
    T* h = xhat + r * channels;
    T* out = y + r * channels;
    for (std::int64_t c = 0; c < channels; ++c) {
      h[c] = math::normalize(in[c], mean, s);
      out[c] = math::scale_and_shift(h[c], gamma ? gamma[c] : T(1), beta ? beta[c] : T(0));
    }
  }
}

template <class T>
void row_normalize_backward(const T* dy, const T* xhat, std::int64_t rows, std::int64_t channels, const double* inv_std,
                            const T* gamma, T* dx) {
  const double n = static_cast<double>(channels);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* g_row = dy + r * channels;
    const T* h = xhat + r * channels;
    T* out = dx + r * channels;
    double sum_g = 0, sum_g_xhat = 0;
    for (std::int64_t c = 0; c < channels; ++c) {
      const double g = math::scaled_grad(g_row[c], gamma ? gamma[c] : T(1));
      sum_g += g;
      sum_g_xhat += math::grad_times_xhat(g, h[c]);
    }
    for (std::int64_t c = 0; c < channels; ++c) {
      const double g = math::scaled_grad(g_row[c], gamma ? gamma[c] : T(1));
      out[c] = static_cast<T>(
          math::normalize_input_grad(g, static_cast<double>(h[c]), inv_std[r], sum_g / n, sum_g_xhat / n));
    }
  }
}

#define MDTRAIN_NORMALIZATION_KERNELS(T)                                                                             \
  template void channel_moments<T>(const T*, std::int64_t, std::int64_t, double*, double*);                          \
  template void channel_sums<T>(const T*, std::int64_t, std::int64_t, const double*, double*, double*);              \
  template void channel_normalize<T>(const T*, std::int64_t, std::int64_t, const double*, const double*, const T*,   \
                                     const T*, T*, T*);                                                              \
  template void channel_grad_sums<T>(const T*, const T*, std::int64_t, std::int64_t, double*, double*);              \
  template void channel_normalize_backward<T>(const T*, const T*, std::int64_t, std::int64_t, const double*,         \
                                              const double*, const double*, T*);                                     \
  template void row_normalize<T>(const T*, std::int64_t, std::int64_t, double, const T*, const T*, T*, double*, T*); \
  template void row_normalize_backward<T>(const T*, const T*, std::int64_t, std::int64_t, const double*, const T*, T*);
MDTRAIN_NORMALIZATION_KERNELS(float)
MDTRAIN_NORMALIZATION_KERNELS(double)
#undef MDTRAIN_NORMALIZATION_KERNELS

}  // namespace mdtrain::cpu
