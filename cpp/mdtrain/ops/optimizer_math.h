#pragma once
// Per-element optimizer updates, written exactly as Keras 3 orders the arithmetic
// (keras/src/optimizers/*.py), shared by the CPU loops in optim/ and the CUDA kernels.
// Every per-step scalar (learning rate, bias corrections, 1 - beta) is computed once per step by
// the caller, in double, and handed in already cast to T: the per-element code is then only
// multiply/add/sqrt/divide in T, which vectorises and runs the same on both backends.
#include <cmath>

#include "mdtrain/core/hd.h"

namespace mdtrain::math {

// Gradient clipping folded into the update: `scale` carries clipnorm / global_clipnorm (1 when
// off) and `limit` carries clipvalue (+inf when off). NaN stays NaN, as with Keras's ops.clip.
template <class T>
MDTRAIN_HD T clip_gradient(T g, T scale, T limit) {
  g = g * scale;
  g = g < -limit ? -limit : g;
  g = g > limit ? limit : g;
  return g;
}

// Keras base optimizer's decoupled weight decay, applied before the update step:
// variable - variable * (weight_decay * lr). `decay` is weight_decay * lr.
template <class T>
MDTRAIN_HD T decay_weight(T p, T decay) {
  return p - p * decay;
}

// SGD without momentum: p -= g * lr.
template <class T>
MDTRAIN_HD void sgd_update(T& p, T g, T lr) {
  p -= g * lr;
}

// SGD with momentum: m = m * momentum - g * lr; then p += m, or with Nesterov
// p += m * momentum - g * lr.
template <class T>
MDTRAIN_HD void sgd_momentum_update(T& p, T& m, T g, T lr, T momentum, bool nesterov) {
  m = m * momentum - g * lr;
  p += nesterov ? m * momentum - g * lr : m;
}

// Adam. alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) with t = iterations + 1.
template <class T>
struct AdamScalars {
  T alpha, one_minus_beta_1, one_minus_beta_2, epsilon;
};

template <class T>
MDTRAIN_HD void adam_update(T& p, T& m, T& v, T g, const AdamScalars<T>& s) {
  using std::sqrt;
  m += (g - m) * s.one_minus_beta_1;
  v += (g * g - v) * s.one_minus_beta_2;
  p -= (m * s.alpha) / (sqrt(v) + s.epsilon);
}

// AMSGrad: the denominator uses the running maximum v_hat = max(v_hat, v).
template <class T>
MDTRAIN_HD void adam_amsgrad_update(T& p, T& m, T& v, T& v_hat, T g, const AdamScalars<T>& s) {
  using std::sqrt;
  m += (g - m) * s.one_minus_beta_1;
  v += (g * g - v) * s.one_minus_beta_2;
  // Written so a NaN in v reaches v_hat (as ops.maximum propagates NaN).
  v_hat = v_hat >= v ? v_hat : v;
  p -= (m * s.alpha) / (sqrt(v_hat) + s.epsilon);
}

// RMSprop. Epsilon sits inside the square root: increment = lr * g / sqrt(v + eps), or
// lr * g / sqrt(v - a^2 + eps) when centered (a = running mean of g).
template <class T>
struct RmspropScalars {
  T lr, rho, one_minus_rho, momentum, epsilon;
};

template <class T>
MDTRAIN_HD T rmsprop_increment(T& v, T g, const RmspropScalars<T>& s) {
  using std::sqrt;
  v = s.rho * v + s.one_minus_rho * (g * g);
  return (s.lr * g) / sqrt(v + s.epsilon);
}

template <class T>
MDTRAIN_HD T rmsprop_centered_increment(T& v, T& a, T g, const RmspropScalars<T>& s) {
  using std::sqrt;
  v = s.rho * v + s.one_minus_rho * (g * g);
  a = s.rho * a + s.one_minus_rho * g;
  return (s.lr * g) / sqrt(v - a * a + s.epsilon);
}

// With momentum > 0 the increment feeds a velocity: mom = momentum * mom + increment; p -= mom.
template <class T>
MDTRAIN_HD void rmsprop_apply(T& p, T increment) {
  p -= increment;
}
template <class T>
MDTRAIN_HD void rmsprop_momentum_apply(T& p, T& mom, T increment, T momentum) {
  mom = momentum * mom + increment;
  p -= mom;
}

// Adagrad: acc += g^2; p -= lr * g / sqrt(acc + eps).
template <class T>
MDTRAIN_HD void adagrad_update(T& p, T& acc, T g, T lr, T epsilon) {
  using std::sqrt;
  acc += g * g;
  p -= (lr * g) / sqrt(acc + epsilon);
}

}  // namespace mdtrain::math
