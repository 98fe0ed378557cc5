#pragma once
// Per-element activation math, shared by the CPU loops and the CUDA kernels.
// Gradients are written in terms of the forward output y where that is cheaper and exact
// (relu, sigmoid, tanh); GELU needs its input x.
#include <cmath>

#include "mdtrain/core/hd.h"

namespace mdtrain::math {

// NaN propagates (as TF's max(x, 0) does): a NaN input must surface in the loss, not vanish.
template <class T> MDTRAIN_HD T relu(T x) { return x < T(0) ? T(0) : x; }
template <class T> MDTRAIN_HD T relu_grad_from_output(T y) { return y > T(0) ? T(1) : T(0); }

template <class T> MDTRAIN_HD T sigmoid(T x) {
  // Two branches so exp never overflows.
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  T e = std::exp(x);
  return e / (T(1) + e);
}
template <class T> MDTRAIN_HD T sigmoid_grad_from_output(T y) { return y * (T(1) - y); }

template <class T> MDTRAIN_HD T tanh_act(T x) { return std::tanh(x); }
template <class T> MDTRAIN_HD T tanh_grad_from_output(T y) { return T(1) - y * y; }

template <class T> MDTRAIN_HD T gelu(T x) {
  return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
}
template <class T> MDTRAIN_HD T gelu_grad(T x) {
  T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
  T pdf = std::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
  return cdf + x * pdf;
}

}  // namespace mdtrain::math
