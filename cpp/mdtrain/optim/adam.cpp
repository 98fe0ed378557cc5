#include "mdtrain/optim/adam.h"

#include <cmath>

#include "mdtrain/ops/optimizer_math.h"

namespace mdtrain {

namespace {

// One pass over p, g, m, v (and v_hat): the per-step scalars are fixed before the loop so the
// body is straight-line float math the compiler vectorises.
template <class T, bool kClip, bool kDecay, bool kAmsgrad>
void adam_loop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
               T* __restrict v_hat, std::int64_t n, math::AdamScalars<T> s, T scale, T limit,
               T decay) {
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

}  // namespace

Adam::Adam(LearningRate learning_rate, double beta_1, double beta_2, double epsilon, bool amsgrad,
           OptimizerOptions options)
    : Adam(std::move(learning_rate), beta_1, beta_2, epsilon, amsgrad, std::move(options), "adam") {}

Adam::Adam(LearningRate learning_rate, double beta_1, double beta_2, double epsilon, bool amsgrad,
           OptimizerOptions options, const char* default_name)
    : Optimizer(std::move(learning_rate), std::move(options), default_name),
      beta_1_(beta_1),
      beta_2_(beta_2),
      epsilon_(epsilon),
      amsgrad_(amsgrad) {
  check_range(beta_1, 0.0, 1.0, false, "beta_1");
  check_range(beta_2, 0.0, 1.0, false, "beta_2");
  check_range(epsilon, 0.0, HUGE_VAL, false, "epsilon");
}

std::unique_ptr<Adam> Adam::from_config(const Json& config) {
  ConfigReader r(config, "Adam");
  LearningRate lr = r.learning_rate(0.001);
  OptimizerOptions base = r.base_options();
  double beta_1 = r.number("beta_1", 0.9), beta_2 = r.number("beta_2", 0.999),
         epsilon = r.number("epsilon", 1e-7);
  bool amsgrad = r.boolean("amsgrad", false);
  r.finish();
  return std::make_unique<Adam>(std::move(lr), beta_1, beta_2, epsilon, amsgrad, std::move(base));
}

Json Adam::config() const {
  Json c = Optimizer::config();
  c.set("beta_1", beta_1_);
  c.set("beta_2", beta_2_);
  c.set("epsilon", epsilon_);
  c.set("amsgrad", amsgrad_);
  return c;
}

std::vector<Optimizer::SlotSpec> Adam::slot_specs() const {
  if (amsgrad_) return {{"momentum", 0.0}, {"velocity", 0.0}, {"velocity_hat", 0.0}};
  return {{"momentum", 0.0}, {"velocity", 0.0}};
}

double Adam::step_size(const VariableUpdate& u) const {
  const double t = static_cast<double>(u.iterations + 1);
  return u.learning_rate * std::sqrt(1 - std::pow(beta_2_, t)) / (1 - std::pow(beta_1_, t));
}

void Adam::update_on_gpu(const std::vector<VariableUpdate>& updates) {
  const VariableUpdate& u = updates.front();
  cuda::adam_update(u.value->device().index, u.value->dtype(), gpu_segments(updates, amsgrad_ ? 3 : 2), step_size(u),
                    beta_1_, beta_2_, epsilon_, amsgrad_, u.clip_value);
}

void Adam::update(const VariableUpdate& u) {
  const double alpha = step_size(u);
  dispatch_float(u.value->dtype(), [&](auto tag) {
    using T = decltype(tag);
    math::AdamScalars<T> s{static_cast<T>(alpha), static_cast<T>(1 - beta_1_),
                           static_cast<T>(1 - beta_2_), static_cast<T>(epsilon_)};
    T* p = u.value->data<T>() + u.begin;
    const T* g = u.grad->data<T>() + u.begin;
    T* m = u.slots[0].data<T>() + u.begin;
    T* v = u.slots[1].data<T>() + u.begin;
    T* vh = amsgrad_ ? u.slots[2].data<T>() + u.begin : nullptr;
    const std::int64_t n = u.end - u.begin;
    const T scale = static_cast<T>(u.grad_scale), limit = static_cast<T>(u.clip_value),
            decay = static_cast<T>(u.decay);
    dispatch_flags(u.clip(), u.decays(), [&](auto clip, auto dec) {
      constexpr bool kClip = decltype(clip)::value, kDecay = decltype(dec)::value;
      if (amsgrad_) adam_loop<T, kClip, kDecay, true>(p, g, m, v, vh, n, s, scale, limit, decay);
      else adam_loop<T, kClip, kDecay, false>(p, g, m, v, vh, n, s, scale, limit, decay);
    });
  });
}

}  // namespace mdtrain
