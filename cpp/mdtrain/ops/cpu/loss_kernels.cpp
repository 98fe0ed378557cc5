#include "mdtrain/ops/cpu/loss_kernels.h"

#include <cmath>
#include <type_traits>

#include "mdtrain/ops/loss_math.h"

namespace mdtrain::cpu {

namespace {

template <class L>
bool is_class_id(L v, std::int64_t classes) {
  if constexpr (std::is_floating_point_v<L>) {
    // Keras casts float labels to int, truncating 2.7 to 2; a fractional or NaN label is a data bug,
    // so it is reported instead.
    return std::isfinite(v) && v == std::floor(v) && v >= L(0) && static_cast<double>(v) < static_cast<double>(classes);
  } else {
    return static_cast<std::int64_t>(v) >= 0 && static_cast<std::int64_t>(v) < classes;
  }
}

template <class L>
bool is_ignored(L v, bool has_ignore, std::int64_t ignore) {
  return has_ignore && static_cast<double>(v) == static_cast<double>(ignore);
}

}  // namespace

template <class L>
std::int64_t first_invalid_label(const L* labels, std::int64_t n, std::int64_t classes, bool has_ignore,
                                 std::int64_t ignore) {
  for (std::int64_t i = 0; i < n; ++i)
    if (!is_ignored(labels[i], has_ignore, ignore) && !is_class_id(labels[i], classes)) return i;
  return -1;
}

template <class L>
std::int64_t count_equal(const L* labels, std::int64_t n, double value) {
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < n; ++i) count += static_cast<double>(labels[i]) == value;
  return count;
}

template <class T, class L>
double sparse_xent(const L* labels, const T* pred, std::int64_t rows, std::int64_t cols, bool from_logits,
                   bool has_ignore, std::int64_t ignore, T scale, math::RowWeights weights, T* g) {
  double sum = 0.0;
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* x = pred + i * cols;
    T* gi = g ? g + i * cols : nullptr;
    if (is_ignored(labels[i], has_ignore, ignore)) {
      if (gi)
        for (std::int64_t j = 0; j < cols; ++j) gi[j] = T(0);
      continue;
    }
    const auto label = static_cast<std::int64_t>(labels[i]);
    const T w = math::row_weight<T>(weights, i);
    sum += w * (from_logits ? math::sparse_xent_logits_row(x, cols, label, scale * w, gi)
                            : math::sparse_xent_probs_row(x, cols, label, scale * w, gi));
  }
  return sum;
}

template <class T, class L>
double dense_xent(const L* target, const T* pred, std::int64_t rows, std::int64_t cols, bool from_logits, T smoothing,
                  T scale, math::RowWeights weights, T* g) {
  double sum = 0.0;
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* x = pred + i * cols;
    const L* t = target + i * cols;
    T* gi = g ? g + i * cols : nullptr;
    const T w = math::row_weight<T>(weights, i);
    sum += w * (from_logits ? math::xent_logits_row(x, t, cols, smoothing, scale * w, gi)
                            : math::xent_probs_row(x, t, cols, smoothing, scale * w, gi));
  }
  return sum;
}

template <class T, class L>
double binary_xent(const L* target, const T* pred, std::int64_t rows, std::int64_t cols, bool from_logits, T smoothing,
                   T scale, math::RowWeights weights, T* g) {
  double sum = 0.0;
  const T inv_cols = T(1) / T(cols), gscale = scale * inv_cols;
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* x = pred + i * cols;
    const L* t = target + i * cols;
    const T w = math::row_weight<T>(weights, i), gw = gscale * w;
    T row = T(0), d = T(0);
    for (std::int64_t j = 0; j < cols; ++j) {
      const T tj = math::smooth_label(static_cast<T>(t[j]), smoothing, T(0.5));
      row += from_logits ? math::bce_logits(x[j], tj, g ? &d : nullptr) : math::bce_probs(x[j], tj, g ? &d : nullptr);
      if (g) g[i * cols + j] = gw * d;
    }
    sum += w * (row * inv_cols);
  }
  return sum;
}

template <class T, class L, class F>
double elementwise_row_mean(const L* target, const T* pred, std::int64_t rows, std::int64_t cols, T scale,
                            math::RowWeights weights, T* g, F f) {
  double sum = 0.0;
  const T inv_cols = T(1) / T(cols), gscale = scale * inv_cols;
  for (std::int64_t i = 0; i < rows; ++i) {
    const T w = math::row_weight<T>(weights, i), gw = gscale * w;
    T row = T(0), d = T(0);
    for (std::int64_t j = 0; j < cols; ++j) {
      const std::int64_t k = i * cols + j;
      row += f(pred[k], static_cast<T>(target[k]), g ? &d : nullptr);
      if (g) g[k] = gw * d;
    }
    sum += w * (row * inv_cols);
  }
  return sum;
}

template <class T, class L>
double squared_error(const L* target, const T* pred, std::int64_t rows, std::int64_t cols, T scale,
                     math::RowWeights weights, T* g) {
  return elementwise_row_mean(target, pred, rows, cols, scale, weights, g,
                              [](T p, T t, T* d) { return math::squared_error(p, t, d); });
}

template <class T, class L>
double absolute_error(const L* target, const T* pred, std::int64_t rows, std::int64_t cols, T scale,
                      math::RowWeights weights, T* g) {
  return elementwise_row_mean(target, pred, rows, cols, scale, weights, g,
                              [](T p, T t, T* d) { return math::absolute_error(p, t, d); });
}

template <class T, class L>
double sparse_argmax_matches(const L* labels, const T* pred, std::int64_t rows, std::int64_t cols) {
  double matches = 0.0;
  for (std::int64_t i = 0; i < rows; ++i)
    matches += static_cast<double>(labels[i]) == static_cast<double>(math::argmax_first(pred + i * cols, cols));
  return matches;
}

template <class T, class L>
double argmax_matches(const L* target, const T* pred, std::int64_t rows, std::int64_t cols) {
  double matches = 0.0;
  for (std::int64_t i = 0; i < rows; ++i)
    matches += math::argmax_first(target + i * cols, cols) == math::argmax_first(pred + i * cols, cols);
  return matches;
}

template <class T, class L>
double top_k_matches(const L* labels, const T* pred, std::int64_t rows, std::int64_t cols, std::int64_t k) {
  double matches = 0.0;
  for (std::int64_t i = 0; i < rows; ++i) {
    // Keras casts the label to int32 before in_top_k; a NaN or huge float label is simply not in.
    const std::int64_t label = math::class_id_or_none(static_cast<double>(labels[i]));
    matches += math::in_top_k(pred + i * cols, cols, label, k);
  }
  return matches;
}

template <class T, class L>
double threshold_matches(const L* target, const T* pred, std::int64_t n, double threshold) {
  const T thr = static_cast<T>(threshold);
  double matches = 0.0;
  for (std::int64_t i = 0; i < n; ++i) matches += math::binary_match(target[i], pred[i], thr);
  return matches;
}

#define MDTRAIN_LOSS_KERNELS(T, L)                                                                                     \
  template double sparse_xent<T, L>(const L*, const T*, std::int64_t, std::int64_t, bool, bool, std::int64_t, T,       \
                                    math::RowWeights, T*);                                                             \
  template double dense_xent<T, L>(const L*, const T*, std::int64_t, std::int64_t, bool, T, T, math::RowWeights, T*);  \
  template double binary_xent<T, L>(const L*, const T*, std::int64_t, std::int64_t, bool, T, T, math::RowWeights, T*); \
  template double squared_error<T, L>(const L*, const T*, std::int64_t, std::int64_t, T, math::RowWeights, T*);        \
  template double absolute_error<T, L>(const L*, const T*, std::int64_t, std::int64_t, T, math::RowWeights, T*);       \
  template double sparse_argmax_matches<T, L>(const L*, const T*, std::int64_t, std::int64_t);                         \
  template double argmax_matches<T, L>(const L*, const T*, std::int64_t, std::int64_t);                                \
  template double top_k_matches<T, L>(const L*, const T*, std::int64_t, std::int64_t, std::int64_t);                   \
  template double threshold_matches<T, L>(const L*, const T*, std::int64_t, double);

#define MDTRAIN_LOSS_KERNELS_FOR_LABEL(L)                                                                 \
  MDTRAIN_LOSS_KERNELS(float, L)                                                                          \
  MDTRAIN_LOSS_KERNELS(double, L)                                                                         \
  template std::int64_t first_invalid_label<L>(const L*, std::int64_t, std::int64_t, bool, std::int64_t); \
  template std::int64_t count_equal<L>(const L*, std::int64_t, double);

MDTRAIN_LOSS_KERNELS_FOR_LABEL(float)
MDTRAIN_LOSS_KERNELS_FOR_LABEL(double)
MDTRAIN_LOSS_KERNELS_FOR_LABEL(std::int32_t)
MDTRAIN_LOSS_KERNELS_FOR_LABEL(std::int64_t)
MDTRAIN_LOSS_KERNELS_FOR_LABEL(std::uint8_t)

#undef MDTRAIN_LOSS_KERNELS_FOR_LABEL
#undef MDTRAIN_LOSS_KERNELS

}  // namespace mdtrain::cpu
