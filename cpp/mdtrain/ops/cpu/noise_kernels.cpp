#include "mdtrain/ops/cpu/noise_kernels.h"

#include "mdtrain/core/rng.h"
#include "mdtrain/ops/elementwise_math.h"
#include "mdtrain/ops/noise_math.h"

namespace mdtrain::cpu {

template <class T>
void gaussian_noise(const T* x, std::int64_t n, double stddev, std::uint64_t seed, std::uint64_t stream,
                    std::uint64_t first_element, T* y) {
  for (std::int64_t i = 0; i < n; ++i)
    y[i] =
        math::add_gaussian_noise(x[i], stddev,
                                 math::standard_normal_at(seed, stream, first_element + static_cast<std::uint64_t>(i)));
}

template <class T>
void gaussian_dropout(const T* x, std::int64_t n, double stddev, std::uint64_t seed, std::uint64_t stream,
                      std::uint64_t first_element, T* multiplier, T* y) {
  for (std::int64_t i = 0; i < n; ++i) {
    multiplier[i] =
        math::gaussian_multiplier<T>(stddev, math::standard_normal_at(seed, stream,
                                                                      first_element + static_cast<std::uint64_t>(i)));
    y[i] = x[i] * multiplier[i];
  }
}

template <class T>
void dropout_mask(std::int64_t n, double rate, std::uint64_t seed, std::uint64_t stream, std::uint64_t first_element,
                  T* mask) {
  // The scalars exactly as cpu::dropout computes them, so the masks are its masks.
  const T scale = static_cast<T>(1.0 / (1.0 - rate));
  const float threshold = static_cast<float>(rate);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t e = first_element + static_cast<std::uint64_t>(i);
    mask[i] = math::dropout_mask_from_block(philox4x32(seed, stream, e >> 2), e, threshold, scale);
  }
}

template <class T>
void scale_channels(const T* x, const T* mask, std::int64_t rows, std::int64_t inner, std::int64_t channels, T* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* m = mask + r * channels;
    for (std::int64_t s = 0; s < inner; ++s) {
      const std::int64_t base = (r * inner + s) * channels;
      for (std::int64_t c = 0; c < channels; ++c) y[base + c] = x[base + c] * m[c];
    }
  }
}

template <class T>
double activity_penalty(const T* x, std::int64_t n, double l1, double l2) {
  // 8 lanes combined in a fixed order, as cpu::sum_of_squares: the same bits on every run.
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] += math::activity_penalty_of(static_cast<double>(x[i + j]), l1, l2);
  for (int j = 0; i < n; ++i, ++j) lane[j] += math::activity_penalty_of(static_cast<double>(x[i]), l1, l2);
  double s = 0;
  for (double v : lane) s += v;
  return s;
}

template <class T>
void activity_penalty_backward(const T* x, const T* dy, std::int64_t n, T l1_scaled, T l2_scaled, T* dx) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = math::add_activity_penalty_grad(x[i], dy[i], l1_scaled, l2_scaled);
}

#define MDTRAIN_INSTANTIATE(T)                                                                                       \
  template void gaussian_noise<T>(const T*, std::int64_t, double, std::uint64_t, std::uint64_t, std::uint64_t, T*);  \
  template void gaussian_dropout<T>(const T*, std::int64_t, double, std::uint64_t, std::uint64_t, std::uint64_t, T*, \
                                    T*);                                                                             \
  template void dropout_mask<T>(std::int64_t, double, std::uint64_t, std::uint64_t, std::uint64_t, T*);              \
  template void scale_channels<T>(const T*, const T*, std::int64_t, std::int64_t, std::int64_t, T*);                 \
  template double activity_penalty<T>(const T*, std::int64_t, double, double);                                       \
  template void activity_penalty_backward<T>(const T*, const T*, std::int64_t, T, T, T*);
MDTRAIN_INSTANTIATE(float)
MDTRAIN_INSTANTIATE(double)
#undef MDTRAIN_INSTANTIATE

}  // namespace mdtrain::cpu
