#include "mdtrain/ops/cpu/kernels.h"

#include <algorithm>
#include <cmath>

#include "mdtrain/core/rng.h"
#include "mdtrain/ops/elementwise_math.h"

namespace mdtrain::cpu {

namespace {
// Applies f(z + b) over a row; the loop body stays free of branches on the activation kind.
template <class T, class F>
void map_row(const T* z, const T* bias, std::int64_t cols, T* y, F f) {
  if (bias) {
    for (std::int64_t j = 0; j < cols; ++j) y[j] = f(z[j] + bias[j]);
  } else {
    for (std::int64_t j = 0; j < cols; ++j) y[j] = f(z[j]);
  }
}
}  // namespace

template <class T>
void bias_activation(const T* z, const T* bias, std::int64_t rows, std::int64_t cols, Activation act, T* y) {
  dispatch_activation(act, [&](auto kind) {
    constexpr Activation A = decltype(kind)::value;
    for (std::int64_t i = 0; i < rows; ++i) {
      const T* zr = z + i * cols;
      T* yr = y + i * cols;
      if constexpr (A == Activation::Softmax) math::softmax_row(zr, bias, cols, yr);
      else map_row(zr, bias, cols, yr, [](T v) { return math::activate<A>(v); });
    }
  });
}

template <class T>
void activation_backward(Activation act, const T* z, const T* y, const T* dy, std::int64_t rows, std::int64_t cols,
                         T* dz) {
  std::int64_t n = rows * cols;
  dispatch_activation(act, [&](auto kind) {
    constexpr Activation A = decltype(kind)::value;
    if constexpr (A == Activation::Linear) {
      if (dz != dy) std::copy(dy, dy + n, dz);
    } else if constexpr (A == Activation::Softmax) {
      for (std::int64_t r = 0; r < rows; ++r)
        math::softmax_backward_row(y + r * cols, dy + r * cols, cols, dz + r * cols);
    } else if constexpr (needs_forward_input(A)) {
      for (std::int64_t i = 0; i < n; ++i) dz[i] = math::activation_backward_at<A>(dy[i], z[i], y[i]);
    } else {  // from the output alone: z may be absent
      for (std::int64_t i = 0; i < n; ++i) dz[i] = math::activation_backward_at<A>(dy[i], T(0), y[i]);
    }
  });
}

template <class T>
void sum_rows(const T* x, std::int64_t rows, std::int64_t cols, T beta, T* out) {
  if (beta == T(0)) std::fill(out, out + cols, T(0));
  else if (beta != T(1))
    for (std::int64_t j = 0; j < cols; ++j) out[j] *= beta;
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* r = x + i * cols;
    for (std::int64_t j = 0; j < cols; ++j) out[j] += r[j];
  }
}

template <class T>
void dropout(const T* x, std::int64_t n, double rate, std::uint64_t seed, std::uint64_t stream,
             std::uint64_t first_element, T* mask, T* y) {
  const T scale = static_cast<T>(1.0 / (1.0 - rate));
  const float threshold = static_cast<float>(rate);
  // One Philox block per four consecutive elements (those that agree in e >> 2).
  for (std::int64_t i = 0; i < n;) {
    const std::uint64_t e = first_element + static_cast<std::uint64_t>(i);
    const Philox4 block = philox4x32(seed, stream, e >> 2);
    for (std::uint64_t lane = e & 3; lane < 4 && i < n; ++lane, ++i) {
      mask[i] = math::dropout_mask_from_block(block, first_element + static_cast<std::uint64_t>(i), threshold, scale);
      y[i] = x[i] * mask[i];
    }
  }
}

template <class T>
void multiply(const T* a, const T* b, std::int64_t n, T* y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

template <class T>
bool all_finite(const T* x, std::int64_t n) {
  // Accumulating x*0 keeps the loop branch-free: it is NaN iff some x is NaN or infinite.
  T acc = 0;
  for (std::int64_t i = 0; i < n; ++i) acc += math::nonfinite_probe(x[i]);
  return acc == T(0);
}

template <class T>
double sum_of_squares(const T* x, std::int64_t n) {
  // Accumulated in double over 8 lanes combined in a fixed order: deterministic on every
  // machine, and the lanes let the loop vectorise without -ffast-math reassociation.
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
  for (int j = 0; i < n; ++i, ++j) lane[j] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  double s = 0;
  for (double v : lane) s += v;
  return s;
}

#define MDTRAIN_INSTANTIATE(T)                                                                                    \
  template void bias_activation<T>(const T*, const T*, std::int64_t, std::int64_t, Activation, T*);               \
  template void activation_backward<T>(Activation, const T*, const T*, const T*, std::int64_t, std::int64_t, T*); \
  template void sum_rows<T>(const T*, std::int64_t, std::int64_t, T, T*);                                         \
  template void dropout<T>(const T*, std::int64_t, double, std::uint64_t, std::uint64_t, std::uint64_t, T*, T*);  \
  template void multiply<T>(const T*, const T*, std::int64_t, T*);                                                \
  template bool all_finite<T>(const T*, std::int64_t);                                                            \
  template double sum_of_squares<T>(const T*, std::int64_t);
MDTRAIN_INSTANTIATE(float)
MDTRAIN_INSTANTIATE(double)
#undef MDTRAIN_INSTANTIATE

}  // namespace mdtrain::cpu
