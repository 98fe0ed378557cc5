#include "mdtrain/optim/rmsprop.h"

#include <cmath>

#include "mdtrain/ops/optimizer_math.h"

namespace mdtrain {

namespace {

template <class T, bool kClip, bool kDecay, bool kCentered, bool kMomentum>
void rmsprop_loop(T* __restrict p, const T* __restrict g, T* __restrict v, T* __restrict mom,
                  T* __restrict avg, std::int64_t n, math::RmspropScalars<T> s, T scale, T limit,
                  T decay) {
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

}  // namespace

RMSprop::RMSprop(LearningRate learning_rate, double rho, double momentum, double epsilon,
                 bool centered, OptimizerOptions options)
    : Optimizer(std::move(learning_rate), std::move(options), "rmsprop"),
      rho_(rho),
      momentum_(momentum),
      epsilon_(epsilon),
      centered_(centered) {
  check_range(rho, 0.0, 1.0, false, "RMSprop rho");
  check_range(momentum, 0.0, 1.0, true, "RMSprop momentum");
  check_range(epsilon, 0.0, HUGE_VAL, false, "epsilon");
}

std::unique_ptr<RMSprop> RMSprop::from_config(const Json& config) {
  ConfigReader r(config, "RMSprop");
  LearningRate lr = r.learning_rate(0.001);
  OptimizerOptions base = r.base_options();
  double rho = r.number("rho", 0.9), momentum = r.number("momentum", 0.0),
         epsilon = r.number("epsilon", 1e-7);
  bool centered = r.boolean("centered", false);
  r.finish();
  return std::make_unique<RMSprop>(std::move(lr), rho, momentum, epsilon, centered,
                                   std::move(base));
}

Json RMSprop::config() const {
  Json c = Optimizer::config();
  c.set("rho", rho_);
  c.set("momentum", momentum_);
  c.set("epsilon", epsilon_);
  c.set("centered", centered_);
  return c;
}

std::vector<Optimizer::SlotSpec> RMSprop::slot_specs() const {
  // Keras's order: velocities, momentums (momentum > 0 only), average gradients (centered only).
  std::vector<SlotSpec> specs{{"velocity", 0.0}};
  if (momentum_ > 0) specs.push_back({"momentum", 0.0});
  if (centered_) specs.push_back({"average_gradient", 0.0});
  return specs;
}

void RMSprop::update_on_gpu(const std::vector<VariableUpdate>& updates) {
  const VariableUpdate& u = updates.front();
  const int slot_count = 1 + (momentum_ > 0 ? 1 : 0) + (centered_ ? 1 : 0);
  cuda::rmsprop_update(u.value->device().index, u.value->dtype(), gpu_segments(updates, slot_count),
                       u.learning_rate, rho_, momentum_, epsilon_, centered_, u.clip_value);
}

void RMSprop::update(const VariableUpdate& u) {
  dispatch_float(u.value->dtype(), [&](auto tag) {
    using T = decltype(tag);
    math::RmspropScalars<T> s{static_cast<T>(u.learning_rate), static_cast<T>(rho_),
                              static_cast<T>(1 - rho_), static_cast<T>(momentum_),
                              static_cast<T>(epsilon_)};
    T* p = u.value->data<T>() + u.begin;
    const T* g = u.grad->data<T>() + u.begin;
    int slot = 0;
    T* v = u.slots[slot++].data<T>() + u.begin;
    T* mom = momentum_ > 0 ? u.slots[slot++].data<T>() + u.begin : nullptr;
    T* avg = centered_ ? u.slots[slot++].data<T>() + u.begin : nullptr;
    const std::int64_t n = u.end - u.begin;
    const T scale = static_cast<T>(u.grad_scale), limit = static_cast<T>(u.clip_value),
            decay = static_cast<T>(u.decay);
    dispatch_flags(u.clip(), u.decays(), [&](auto clip, auto dec) {
      constexpr bool kClip = decltype(clip)::value, kDecay = decltype(dec)::value;
      if (centered_) {
        if (mom) rmsprop_loop<T, kClip, kDecay, true, true>(p, g, v, mom, avg, n, s, scale, limit, decay);
        else rmsprop_loop<T, kClip, kDecay, true, false>(p, g, v, mom, avg, n, s, scale, limit, decay);
      } else {
        if (mom) rmsprop_loop<T, kClip, kDecay, false, true>(p, g, v, mom, avg, n, s, scale, limit, decay);
        else rmsprop_loop<T, kClip, kDecay, false, false>(p, g, v, mom, avg, n, s, scale, limit, decay);
      }
    });
  });
}

}  // namespace mdtrain
