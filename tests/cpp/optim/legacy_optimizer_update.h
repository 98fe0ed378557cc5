#pragma once
// The optimizer update as mdtrain ran it before the optimizer ops (commit d9c7b9e): a copy of the
// per-parameter host loops of optim/{sgd,adam,rmsprop,adagrad}.cpp and of the clipping factors of
// Optimizer::apply_range, kept verbatim as the reference the ops must match bit for bit
// (tests/cpp/optim/test_update_bitwise.cpp) and as the "old loop" of
// bench/cpp/optimizer_update_bench.cpp. Do not "improve" it: its value is that it is the old code.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "mdtrain/ops/optimizer_math.h"

namespace mdtrain::legacy {

enum class Kind { SGD, Adam, RMSprop, Adagrad };

// The hyperparameters of any of the optimizers (AdamW = Adam with weight_decay).
struct Hyper {
  Kind kind = Kind::Adam;
  double learning_rate = 0.001;
  double momentum = 0.0;  // SGD, RMSprop
  bool nesterov = false;
  double beta_1 = 0.9, beta_2 = 0.999, epsilon = 1e-7;
  bool amsgrad = false;
  double rho = 0.9;
  bool centered = false;
  double initial_accumulator_value = 0.1;
  std::optional<double> weight_decay, clipnorm, clipvalue, global_clipnorm;

  int slot_count() const {
    switch (kind) {
      case Kind::SGD: return momentum == 0.0 ? 0 : 1;
      case Kind::Adam: return amsgrad ? 3 : 2;
      case Kind::RMSprop: return 1 + (momentum > 0 ? 1 : 0) + (centered ? 1 : 0);
      case Kind::Adagrad: return 1;
    }
    return 0;
  }
  double slot_initial_value() const { return kind == Kind::Adagrad ? initial_accumulator_value : 0.0; }
};

// One host parameter (all pointers to `n` elements).
template <class T>
struct Variable {
  T* value;
  const T* grad;
  T* slots[3];
  std::int64_t n;
  bool decays;  // weight decay applies to it (not excluded)
};

// ---- the old loops (optim/*.cpp anonymous namespaces) -------------------------------------------

template <class T, bool kClip, bool kDecay>
void sgd_loop(T* __restrict p, const T* __restrict g, std::int64_t n, T lr, T scale, T limit, T decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if constexpr (kClip) gi = math::clip_gradient(gi, scale, limit);
    T pi = p[i];
    if constexpr (kDecay) pi = math::decay_weight(pi, decay);
    math::sgd_update(pi, gi, lr);
    p[i] = pi;
  }
}

template <class T, bool kClip, bool kDecay, bool kNesterov>
void sgd_momentum_loop(T* __restrict p, const T* __restrict g, T* __restrict m, std::int64_t n, T lr, T momentum,
                       T scale, T limit, T decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if constexpr (kClip) gi = math::clip_gradient(gi, scale, limit);
    T pi = p[i];
    if constexpr (kDecay) pi = math::decay_weight(pi, decay);
    math::sgd_momentum_update(pi, m[i], gi, lr, momentum, kNesterov);
    p[i] = pi;
  }
}

template <class T, bool kClip, bool kDecay, bool kAmsgrad>
void adam_loop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, T* __restrict v_hat,
               std::int64_t n, math::AdamScalars<T> s, T scale, T limit, T decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if constexpr (kClip) gi = math::clip_gradient(gi, scale, limit);
    T pi = p[i];
    if constexpr (kDecay) pi = math::decay_weight(pi, decay);
    if constexpr (kAmsgrad) math::adam_amsgrad_update(pi, m[i], v[i], v_hat[i], gi, s);
    else math::adam_update(pi, m[i], v[i], gi, s);
    p[i] = pi;
  }
}

template <class T, bool kClip, bool kDecay, bool kCentered, bool kMomentum>
void rmsprop_loop(T* __restrict p, const T* __restrict g, T* __restrict v, T* __restrict mom, T* __restrict avg,
                  std::int64_t n, math::RmspropScalars<T> s, T scale, T limit, T decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if constexpr (kClip) gi = math::clip_gradient(gi, scale, limit);
    T pi = p[i];
    if constexpr (kDecay) pi = math::decay_weight(pi, decay);
    T inc;
    if constexpr (kCentered) inc = math::rmsprop_centered_increment(v[i], avg[i], gi, s);
    else inc = math::rmsprop_increment(v[i], gi, s);
    if constexpr (kMomentum) math::rmsprop_momentum_apply(pi, mom[i], inc, s.momentum);
    else math::rmsprop_apply(pi, inc);
    p[i] = pi;
  }
}

template <class T, bool kClip, bool kDecay>
void adagrad_loop(T* __restrict p, const T* __restrict g, T* __restrict acc, std::int64_t n, T lr, T epsilon, T scale,
                  T limit, T decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if constexpr (kClip) gi = math::clip_gradient(gi, scale, limit);
    T pi = p[i];
    if constexpr (kDecay) pi = math::decay_weight(pi, decay);
    math::adagrad_update(pi, acc[i], gi, lr, epsilon);
    p[i] = pi;
  }
}

template <class F>
void dispatch_flags(bool clip, bool decay, F&& f) {
  if (clip) {
    if (decay) f(std::true_type{}, std::true_type{});
    else f(std::true_type{}, std::false_type{});
  } else {
    if (decay) f(std::false_type{}, std::true_type{});
    else f(std::false_type{}, std::false_type{});
  }
}

// ---- the old update(const VariableUpdate&) bodies, one parameter ------------------------------

template <class T>
void update_variable(const Hyper& h, const Variable<T>& var, double learning_rate, std::int64_t iterations,
                     double grad_scale, double clip_value, double decay_d) {
  T* p = var.value;
  const T* g = var.grad;
  const std::int64_t n = var.n;
  const bool clip = grad_scale != 1.0 || clip_value != std::numeric_limits<double>::infinity();
  const bool decays = decay_d != 0.0;
  const T scale = static_cast<T>(grad_scale), limit = static_cast<T>(clip_value), decay = static_cast<T>(decay_d);
  switch (h.kind) {
    case Kind::SGD: {
      const T lr = static_cast<T>(learning_rate);
      dispatch_flags(clip, decays, [&](auto c, auto d) {
        constexpr bool kClip = decltype(c)::value, kDecay = decltype(d)::value;
        if (h.momentum == 0.0) {
          sgd_loop<T, kClip, kDecay>(p, g, n, lr, scale, limit, decay);
        } else {
          T* m = var.slots[0];
          const T mom = static_cast<T>(h.momentum);
          if (h.nesterov) sgd_momentum_loop<T, kClip, kDecay, true>(p, g, m, n, lr, mom, scale, limit, decay);
          else sgd_momentum_loop<T, kClip, kDecay, false>(p, g, m, n, lr, mom, scale, limit, decay);
        }
      });
      break;
    }
    case Kind::Adam: {
      const double t = static_cast<double>(iterations + 1);
      const double alpha = learning_rate * std::sqrt(1 - std::pow(h.beta_2, t)) / (1 - std::pow(h.beta_1, t));
      math::AdamScalars<T> s{static_cast<T>(alpha), static_cast<T>(1 - h.beta_1), static_cast<T>(1 - h.beta_2),
                             static_cast<T>(h.epsilon)};
      T* m = var.slots[0];
      T* v = var.slots[1];
      T* vh = h.amsgrad ? var.slots[2] : nullptr;
      dispatch_flags(clip, decays, [&](auto c, auto d) {
        constexpr bool kClip = decltype(c)::value, kDecay = decltype(d)::value;
        if (h.amsgrad) adam_loop<T, kClip, kDecay, true>(p, g, m, v, vh, n, s, scale, limit, decay);
        else adam_loop<T, kClip, kDecay, false>(p, g, m, v, vh, n, s, scale, limit, decay);
      });
      break;
    }
    case Kind::RMSprop: {
      math::RmspropScalars<T> s{static_cast<T>(learning_rate), static_cast<T>(h.rho), static_cast<T>(1 - h.rho),
                                static_cast<T>(h.momentum), static_cast<T>(h.epsilon)};
      int slot = 0;
      T* v = var.slots[slot++];
      T* mom = h.momentum > 0 ? var.slots[slot++] : nullptr;
      T* avg = h.centered ? var.slots[slot++] : nullptr;
      dispatch_flags(clip, decays, [&](auto c, auto d) {
        constexpr bool kClip = decltype(c)::value, kDecay = decltype(d)::value;
        if (h.centered) {
          if (mom) rmsprop_loop<T, kClip, kDecay, true, true>(p, g, v, mom, avg, n, s, scale, limit, decay);
          else rmsprop_loop<T, kClip, kDecay, true, false>(p, g, v, mom, avg, n, s, scale, limit, decay);
        } else {
          if (mom) rmsprop_loop<T, kClip, kDecay, false, true>(p, g, v, mom, avg, n, s, scale, limit, decay);
          else rmsprop_loop<T, kClip, kDecay, false, false>(p, g, v, mom, avg, n, s, scale, limit, decay);
        }
      });
      break;
    }
    case Kind::Adagrad: {
      T* acc = var.slots[0];
      const T lr = static_cast<T>(learning_rate), eps = static_cast<T>(h.epsilon);
      dispatch_flags(clip, decays, [&](auto c, auto d) {
        constexpr bool kClip = decltype(c)::value, kDecay = decltype(d)::value;
        adagrad_loop<T, kClip, kDecay>(p, g, acc, n, lr, eps, scale, limit, decay);
      });
      break;
    }
  }
}

// ---- the old Optimizer::apply_range (clipping factors, then every parameter in order) ---------

template <class T>
double sum_of_squares(const T* g, std::int64_t n) {
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(g[i + j]) * static_cast<double>(g[i + j]);
  for (int j = 0; i < n; ++i, ++j) lane[j] += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  double s = 0;
  for (double x : lane) s += x;
  return s;
}

// One whole step over `vars` (a constant learning rate); iterations is the count before it.
template <class T>
void apply(const Hyper& h, const std::vector<Variable<T>>& vars, std::int64_t iterations) {
  const double lr = h.learning_rate;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> scale(vars.size(), 1.0);
  if (h.clipnorm) {
    const double c = *h.clipnorm;
    for (std::size_t i = 0; i < vars.size(); ++i) {
      const double l2sum = sum_of_squares(vars[i].grad, vars[i].n);
      const double l2norm = l2sum > 0 ? std::sqrt(l2sum) : l2sum;
      scale[i] = c / std::max(l2norm, c);
      if (std::isnan(l2norm)) scale[i] = l2norm;
    }
  } else if (h.global_clipnorm) {
    const double c = *h.global_clipnorm;
    double total = 0;
    for (const auto& v : vars) total += sum_of_squares(v.grad, v.n);
    const double use_norm = std::sqrt(total);
    const double s = c * std::min(1.0 / use_norm, 1.0 / c) + (use_norm - use_norm);
    std::fill(scale.begin(), scale.end(), s);
  }
  const double clip_value = h.clipvalue ? *h.clipvalue : inf;
  const double wd = h.weight_decay ? *h.weight_decay : 0.0;
  for (std::size_t i = 0; i < vars.size(); ++i)
    update_variable(h, vars[i], lr, iterations, scale[i], clip_value, (wd != 0.0 && vars[i].decays) ? wd * lr : 0.0);
}

}  // namespace mdtrain::legacy
