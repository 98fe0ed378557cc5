#pragma once
// Per-element activation math, shared by the CPU loops and the CUDA kernels.
// Gradients are written in terms of the forward output y where that is cheaper and exact
// (relu, sigmoid, tanh); the others need their input x (needs_forward_input).
#include <cmath>
#include <cstdint>

#include "mdtrain/core/hd.h"
#include "mdtrain/core/rng.h"
#include "mdtrain/ops/activation.h"

namespace mdtrain::math {

// NaN propagates (as TF's max(x, 0) does): a NaN input must surface in the loss, not vanish.
template <class T>
MDTRAIN_HD T relu(T x) {
  return x < T(0) ? T(0) : x;
}
template <class T>
MDTRAIN_HD T relu_grad_from_output(T y) {
  return y > T(0) ? T(1) : T(0);
}

template <class T>
MDTRAIN_HD T sigmoid(T x) {
  // Two branches so exp never overflows.
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  T e = std::exp(x);
  return e / (T(1) + e);
}
template <class T>
MDTRAIN_HD T sigmoid_grad_from_output(T y) {
  return y * (T(1) - y);
}

template <class T>
MDTRAIN_HD T tanh_act(T x) {
  return std::tanh(x);
}
template <class T>
MDTRAIN_HD T tanh_grad_from_output(T y) {
  return T(1) - y * y;
}

template <class T>
MDTRAIN_HD T gelu(T x) {
  return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
}
template <class T>
MDTRAIN_HD T gelu_grad(T x) {
  T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
  T pdf = std::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
  return cdf + x * pdf;
}

// ReLU's backward from its output: dy passes where y > 0 (a NaN dy passes too, where it came from).
template <class T>
MDTRAIN_HD T relu_backward(T dy, T y) {
  return y > T(0) ? dy : T(0);
}

// The element-wise activations as Keras 3 writes them (keras.activations), for one value.
template <class T>
MDTRAIN_HD T softplus(T x) {
  // max(x, 0) + log1p(exp(-|x|)): no overflow for large |x|.
  return (x > T(0) ? x : T(0)) + std::log1p(std::exp(-std::fabs(x)));
}
template <class T>
MDTRAIN_HD T relu6(T x) {
  return x < T(0) ? T(0) : (x > T(6) ? T(6) : x);
}
template <class T>
MDTRAIN_HD T hard_sigmoid(T x) {
  return relu6(x + T(3)) / T(6);
}
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;
constexpr double kLeakyReluSlope = 0.2;  // keras.activations.leaky_relu's default negative_slope

// y = A(x), for every activation but softmax (a row function).
template <Activation A, class T>
MDTRAIN_HD T activate(T x) {
  if constexpr (A == Activation::ReLU) return relu(x);
  else if constexpr (A == Activation::Sigmoid) return sigmoid(x);
  else if constexpr (A == Activation::Tanh) return tanh_act(x);
  else if constexpr (A == Activation::GELU) return gelu(x);
  else if constexpr (A == Activation::ELU) return x > T(0) ? x : std::expm1(x);
  else if constexpr (A == Activation::SELU) return T(kSeluScale) * (x > T(0) ? x : T(kSeluAlpha) * std::expm1(x));
  else if constexpr (A == Activation::Softplus) return softplus(x);
  else if constexpr (A == Activation::Softsign) return x / (std::fabs(x) + T(1));
  else if constexpr (A == Activation::SiLU) return x * sigmoid(x);
  else if constexpr (A == Activation::ReLU6) return relu6(x);
  else if constexpr (A == Activation::HardSigmoid) return hard_sigmoid(x);
  else if constexpr (A == Activation::HardSiLU) return x * hard_sigmoid(x);
  else if constexpr (A == Activation::Exponential) return std::exp(x);
  else if constexpr (A == Activation::Mish) return x * std::tanh(softplus(x));
  else if constexpr (A == Activation::LeakyReLU) return x > T(0) ? x : T(kLeakyReluSlope) * x;
  else if constexpr (A == Activation::LogSigmoid) return -softplus(-x);
  else return x;  // Linear (Softmax never comes here)
}

// dz = dy * dA/dx at x (y = A(x)), for every activation but softmax. At a kink the derivative is
// TF's: relu6 passes dy on 0 < x < 6, hard_sigmoid on -3 < x < 3, leaky_relu's slope is 1 for x > 0.
template <Activation A, class T>
MDTRAIN_HD T activation_backward_at(T dy, T x, T y) {
  if constexpr (A == Activation::ReLU) return relu_backward(dy, y);
  else if constexpr (A == Activation::Sigmoid) return dy * sigmoid_grad_from_output(y);
  else if constexpr (A == Activation::Tanh) return dy * tanh_grad_from_output(y);
  else if constexpr (A == Activation::GELU) return dy * gelu_grad(x);
  else if constexpr (A == Activation::ELU) return x > T(0) ? dy : dy * std::exp(x);
  else if constexpr (A == Activation::SELU)
    return dy * (x > T(0) ? T(kSeluScale) : T(kSeluScale * kSeluAlpha) * std::exp(x));
  else if constexpr (A == Activation::Softplus) return dy * sigmoid(x);
  else if constexpr (A == Activation::Softsign) {
    const T d = std::fabs(x) + T(1);
    return dy / (d * d);
  } else if constexpr (A == Activation::SiLU) {
    const T s = sigmoid(x);
    return dy * (s + x * s * (T(1) - s));
  } else if constexpr (A == Activation::ReLU6) return x > T(0) && x < T(6) ? dy : T(0);
  else if constexpr (A == Activation::HardSigmoid) return x > T(-3) && x < T(3) ? dy / T(6) : T(0);
  else if constexpr (A == Activation::HardSiLU)
    return dy * (hard_sigmoid(x) + (x > T(-3) && x < T(3) ? x / T(6) : T(0)));
  else if constexpr (A == Activation::Exponential) return dy * y;
  else if constexpr (A == Activation::Mish) {
    const T t = std::tanh(softplus(x));
    return dy * (t + x * (T(1) - t * t) * sigmoid(x));
  } else if constexpr (A == Activation::LeakyReLU) return x > T(0) ? dy : dy * T(kLeakyReluSlope);
  else if constexpr (A == Activation::LogSigmoid) return dy * sigmoid(-x);
  else return dy;  // Linear
}

// keras.activations.relu(x, negative_slope, max_value, threshold) and elu(x, alpha), as the ReLU,
// LeakyReLU and ELU layers apply them (ops/parametric_activation.h), in the element type.
// ReLU: x > threshold → min(x, max_value); otherwise negative_slope * (x - threshold) (the
// product Keras subtracts, negative_slope * relu(threshold - x), to the last bit). The derivative
// at the kinks is the one TF takes through the ops Keras composes: 0 at x == threshold except on
// Keras's leaky_relu path (threshold 0, no max_value), where it is negative_slope; dy passes at
// x == max_value through tf.clip_by_value's minimum, but not on Keras's relu6 path (max_value 6,
// threshold 0: TF's Relu6Grad passes 0 < x < 6 only). ops::relu_args works out both flags.
template <class T>
struct ReluArgs {
  T negative_slope = T(0);
  T threshold = T(0);
  T max_value = T(INFINITY);  // none: +inf
  T slope_at_threshold = T(0);
  bool passes_at_max = true;
};

template <class T>
MDTRAIN_HD T relu_with_args(T x, const ReluArgs<T>& a) {
  if (x > a.threshold) return x < a.max_value ? x : a.max_value;
  return a.negative_slope * (x - a.threshold);  // NaN stays NaN
}

template <class T>
MDTRAIN_HD T relu_with_args_backward(T dy, T x, const ReluArgs<T>& a) {
  if (x > a.threshold) return x < a.max_value || (a.passes_at_max && x == a.max_value) ? dy : T(0);
  if (x < a.threshold) return dy * a.negative_slope;
  return dy * a.slope_at_threshold;
}

// ELU with Keras's alpha: x > 0 → x, else alpha * (exp(x) - 1); its derivative alpha * exp(x) for
// x <= 0 (TF's tf.where(x > 0, elu, alpha * elu) gives x == 0 the alpha side).
template <class T>
MDTRAIN_HD T elu_with_alpha(T x, T alpha) {
  return x > T(0) ? x : alpha * std::expm1(x);
}
template <class T>
MDTRAIN_HD T elu_with_alpha_backward(T dy, T x, T alpha) {
  return x > T(0) ? dy : dy * alpha * std::exp(x);
}

// PReLU (Keras: relu(x) - alpha * relu(-x)) for one element and its alpha; the derivative in x is
// 1 for x > 0, alpha for x < 0 and 0 at 0 (two relus, each 0 at its kink); in alpha it is
// min(x, 0), summed by the caller over the elements sharing that alpha.
template <class T>
MDTRAIN_HD T prelu(T x, T alpha) {
  return x > T(0) ? x : alpha * x;
}
template <class T>
MDTRAIN_HD T prelu_input_grad(T dy, T x, T alpha) {
  return x > T(0) ? dy : (x < T(0) ? dy * alpha : T(0));
}
template <class T>
MDTRAIN_HD T prelu_alpha_grad_term(T dy, T x) {
  return x < T(0) ? dy * x : T(0);
}

// Softmax of one row of z + bias (bias may be null): exp(v - max) / sum, one exp per element.
// The max is taken as std::max(m, v) takes it, so a NaN entry does not become the max.
template <class T>
MDTRAIN_HD void softmax_row(const T* z, const T* bias, std::int64_t n, T* y) {
  T m = T(-INFINITY);
  for (std::int64_t j = 0; j < n; ++j) {
    const T v = z[j] + (bias ? bias[j] : T(0));
    m = m < v ? v : m;
  }
  T s = T(0);
  for (std::int64_t j = 0; j < n; ++j) {
    y[j] = std::exp(z[j] + (bias ? bias[j] : T(0)) - m);
    s += y[j];
  }
  const T inv = T(1) / s;
  for (std::int64_t j = 0; j < n; ++j) y[j] *= inv;
}

// Softmax's backward for one row: dz = y * (dy - <dy, y>) (the Jacobian-vector product).
template <class T>
MDTRAIN_HD void softmax_backward_row(const T* y, const T* dy, std::int64_t n, T* dz) {
  T dot = T(0);
  for (std::int64_t j = 0; j < n; ++j) dot += dy[j] * y[j];
  for (std::int64_t j = 0; j < n; ++j) dz[j] = y[j] * (dy[j] - dot);
}

// Inverted dropout's multiplier for the element at global position e: `scale` (1 / (1 - rate))
// where it is kept, 0 where dropped, so the mask is a pure function of the element's position.
// One Philox block, philox4x32(seed, stream, e >> 2), gives the uniforms of four consecutive
// elements: the caller computes it once per four (the CPU loop) or once per element (a GPU thread).
template <class T>
MDTRAIN_HD T dropout_mask_from_block(const Philox4& block, std::uint64_t e, float threshold, T scale) {
  return uniform_from_bits(block.v[e & 3]) >= threshold ? scale : T(0);
}

// x * 0: zero for a finite x, NaN for a NaN or infinite one. all_finite adds these up (a loop
// without branches) or tests them one by one.
template <class T>
MDTRAIN_HD T nonfinite_probe(T x) {
  return x * T(0);
}

}  // namespace mdtrain::math
