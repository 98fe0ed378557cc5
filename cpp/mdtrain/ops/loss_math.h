#pragma once
// Per-row and per-element math of the losses and metrics, shared by the CPU loops and the CUDA
// kernels. Each loss function returns the loss and, when asked, writes scale * d(loss)/d(pred), so
// the gradient is the exact derivative of the value computed here (clipping included).
//
// Formulas follow Keras 3 on the TensorFlow backend (keras/src/backend/tensorflow/nn.py):
// - probabilities are clipped to [eps, 1 - eps] with eps = keras.backend.epsilon() = 1e-7, and the
//   gradient of a clip is TF's: it passes where eps <= x <= 1 - eps and is zero outside;
// - categorical crossentropy on probabilities first renormalises output / sum(output), then clips;
// - sparse categorical crossentropy on probabilities is TF's log_softmax(log(clip(p)))[label],
//   i.e. -log(clip(p_y)) + log(sum_j clip(p_j)) (no renormalisation before the clip);
// - from logits, both use log-sum-exp and binary crossentropy uses
//   max(x, 0) - x * t + log1p(exp(-|x|)) (tf.nn.sigmoid_cross_entropy_with_logits), unclipped.
#include <cmath>
#include <cstdint>

#include "mdtrain/core/hd.h"

namespace mdtrain::math {

// Keras's sample_weight on a loss: row i's loss and its gradient are multiplied by
// w[i / rows_per_weight] (a sequence output has one row per step of a sample, all of that
// sample's weight); w == nullptr weighs every row 1, which leaves every value bitwise as without
// weights (x * 1 is x).
struct RowWeights {
  const float* w = nullptr;
  std::int64_t rows_per_weight = 1;
};

template <class T>
MDTRAIN_HD T row_weight(const RowWeights& weights, std::int64_t row) {
  return weights.w ? static_cast<T>(weights.w[row / weights.rows_per_weight]) : T(1);
}

template <class T>
MDTRAIN_HD T loss_epsilon() {
  return T(1e-7);
}

// clip(x, eps, 1 - eps); *pass = 1 where the clip lets the gradient through, else 0.
template <class T>
MDTRAIN_HD T clip_probability(T x, T* pass) {
  const T lo = loss_epsilon<T>(), hi = T(1) - loss_epsilon<T>();
  if (x < lo) {
    *pass = T(0);
    return lo;
  }
  if (x > hi) {
    *pass = T(0);
    return hi;
  }
  *pass = T(1);  // NaN lands here too and propagates
  return x;
}

template <class T>
MDTRAIN_HD T row_max(const T* x, std::int64_t n) {
  T m = x[0];
  for (std::int64_t j = 1; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// sum_j exp(x_j - m); stores each exp(x_j - m) into e when e != nullptr (the softmax numerators
// the gradient needs, so exp runs once per element).
template <class T>
MDTRAIN_HD T sum_exp(const T* x, std::int64_t n, T m, T* e) {
  T s = T(0);
  if (e) {
    for (std::int64_t j = 0; j < n; ++j) {
      e[j] = std::exp(x[j] - m);
      s += e[j];
    }
  } else {
    for (std::int64_t j = 0; j < n; ++j) s += std::exp(x[j] - m);
  }
  return s;
}

// Sparse softmax crossentropy of one row of logits: lse(x) - x[label].
// g (optional, may not alias x): scale * (softmax(x) - onehot(label)).
template <class T>
MDTRAIN_HD T sparse_xent_logits_row(const T* x, std::int64_t n, std::int64_t label, T scale, T* g) {
  const T m = row_max(x, n);
  const T s = sum_exp(x, n, m, g);
  const T loss = m + std::log(s) - x[label];
  if (g) {
    const T r = scale / s;
    for (std::int64_t j = 0; j < n; ++j) g[j] *= r;
    g[label] -= scale;
  }
  return loss;
}

// Sparse crossentropy of one row of probabilities (TF's formula, see the top of this file):
// -log(clip(p_y)) + log(sum_j clip(p_j)).
template <class T>
MDTRAIN_HD T sparse_xent_probs_row(const T* p, std::int64_t n, std::int64_t label, T scale, T* g) {
  T s = T(0), pass = T(0);
  for (std::int64_t j = 0; j < n; ++j) s += clip_probability(p[j], &pass);
  T pass_y = T(0);
  const T cy = clip_probability(p[label], &pass_y);
  const T loss = std::log(s) - std::log(cy);
  if (g) {
    const T r = scale / s;
    for (std::int64_t j = 0; j < n; ++j) {
      clip_probability(p[j], &pass);
      g[j] = pass * r;
    }
    g[label] -= pass_y * scale / cy;
  }
  return loss;
}

// Label smoothing of one-hot targets, as Keras applies it before the crossentropy:
// t * (1 - s) + s / classes for categorical, t * (1 - s) + 0.5 * s for binary.
template <class T>
MDTRAIN_HD T smooth_label(T t, T smoothing, T spread) {
  return t * (T(1) - smoothing) + smoothing * spread;
}

// Softmax crossentropy of one row of logits against dense targets t (smoothed as above):
// sum_j t_j * (lse(x) - x_j). g = scale * (softmax(x) * sum(t) - t), the derivative even when
// the targets do not sum to one.
template <class T, class L>
MDTRAIN_HD T xent_logits_row(const T* x, const L* t, std::int64_t n, T smoothing, T scale, T* g) {
  const T spread = T(1) / T(n);
  const T m = row_max(x, n);
  const T s = sum_exp(x, n, m, g);
  const T lse = m + std::log(s);
  T loss = T(0), tsum = T(0);
  for (std::int64_t j = 0; j < n; ++j) {
    const T tj = smooth_label(static_cast<T>(t[j]), smoothing, spread);
    loss += tj * (lse - x[j]);
    tsum += tj;
  }
  if (g) {
    const T r = scale * tsum / s;
    for (std::int64_t j = 0; j < n; ++j)
      g[j] = g[j] * r - scale * smooth_label(static_cast<T>(t[j]), smoothing, spread);
  }
  return loss;
}

// Categorical crossentropy of one row of probabilities: q = p / sum(p), c = clip(q),
// loss = -sum_k t_k log(c_k). With a_k = dL/dq_k = -t_k / c_k (0 where clipped),
// dL/dp_j = (a_j - sum_k a_k q_k) / sum(p).
template <class T, class L>
MDTRAIN_HD T xent_probs_row(const T* p, const L* t, std::int64_t n, T smoothing, T scale, T* g) {
  const T spread = T(1) / T(n);
  T total = T(0);
  for (std::int64_t j = 0; j < n; ++j) total += p[j];
  T loss = T(0), aq = T(0), pass = T(0);
  for (std::int64_t k = 0; k < n; ++k) {
    const T q = p[k] / total;
    const T c = clip_probability(q, &pass);
    const T tk = smooth_label(static_cast<T>(t[k]), smoothing, spread);
    loss -= tk * std::log(c);
    aq += pass * (-tk / c) * q;
  }
  if (g) {
    const T r = scale / total;
    for (std::int64_t j = 0; j < n; ++j) {
      const T q = p[j] / total;
      const T c = clip_probability(q, &pass);
      const T tj = smooth_label(static_cast<T>(t[j]), smoothing, spread);
      g[j] = r * (pass * (-tj / c) - aq);
    }
  }
  return loss;
}

// Binary crossentropy of one probability p against target t (already smoothed):
// -(t log c + (1 - t) log(1 - c)), c = clip(p). *d = d(loss)/dp.
template <class T>
MDTRAIN_HD T bce_probs(T p, T t, T* d) {
  T pass = T(0);
  const T c = clip_probability(p, &pass);
  if (d) *d = pass * ((T(1) - t) / (T(1) - c) - t / c);
  return -(t * std::log(c) + (T(1) - t) * std::log(T(1) - c));
}

// Binary crossentropy of one logit x: max(x, 0) - x t + log1p(exp(-|x|)). *d = sigmoid(x) - t.
template <class T>
MDTRAIN_HD T bce_logits(T x, T t, T* d) {
  const T e = std::exp(-std::fabs(x));
  if (d) *d = (x >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e)) - t;
  return (x > T(0) ? x : T(0)) - x * t + std::log1p(e);
}

// (p - t)^2 and its derivative 2 (p - t).
template <class T>
MDTRAIN_HD T squared_error(T p, T t, T* d) {
  const T diff = p - t;
  if (d) *d = T(2) * diff;
  return diff * diff;
}

// |p - t| and its derivative sign(p - t) (0 at 0, as autodiff of abs gives).
template <class T>
MDTRAIN_HD T absolute_error(T p, T t, T* d) {
  const T diff = p - t;
  if (d) *d = diff > T(0) ? T(1) : (diff < T(0) ? T(-1) : T(0));
  return std::fabs(diff);
}

// Index of the first maximum (ties go to the lowest index, as np.argmax and tf.argmax do).
template <class T>
MDTRAIN_HD std::int64_t argmax_first(const T* x, std::int64_t n) {
  std::int64_t best = 0;
  for (std::int64_t j = 1; j < n; ++j)
    if (x[j] > x[best]) best = j;
  return best;
}

// TF's in_top_k: the label is in the top k when fewer than k classes score strictly higher, so
// ties at the boundary count as in. An out-of-range label or a non-finite score in the row says no.
template <class T>
MDTRAIN_HD bool in_top_k(const T* x, std::int64_t n, std::int64_t label, std::int64_t k) {
  if (label < 0 || label >= n || !std::isfinite(x[label])) return false;
  const T target = x[label];
  std::int64_t higher = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    if (!std::isfinite(x[j])) return false;
    if (x[j] > target) ++higher;
  }
  return higher < k;
}

// A label as the class id Keras's int32 cast gives it before in_top_k; -1 (in no top k) for a NaN,
// infinite or huge label.
MDTRAIN_HD std::int64_t class_id_or_none(double v) {
  return std::isfinite(v) && std::fabs(v) < 9e18 ? static_cast<std::int64_t>(v) : -1;
}

// Binary accuracy of one element: the target equals the prediction thresholded to 0 or 1.
template <class T, class L>
MDTRAIN_HD bool binary_match(L target, T p, T threshold) {
  return static_cast<double>(target) == (p > threshold ? 1.0 : 0.0);
}

}  // namespace mdtrain::math
