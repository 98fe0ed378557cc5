#include "mdtrain/optim/adagrad.h"

#include <cmath>

#include "mdtrain/ops/optimizer_math.h"

namespace mdtrain {

namespace {

template <class T, bool kClip, bool kDecay>
void adagrad_loop(T* __restrict p, const T* __restrict g, T* __restrict acc, std::int64_t n, T lr,
                  T epsilon, T scale, T limit, T decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if constexpr (kClip) gi = math::clip_gradient(gi, scale, limit);
    T pi = p[i];
    if constexpr (kDecay) pi = math::decay_weight(pi, decay);
    math::adagrad_update(pi, acc[i], gi, lr, epsilon);
    p[i] = pi;
  }
}

}  // namespace

Adagrad::Adagrad(LearningRate learning_rate, double initial_accumulator_value, double epsilon,
                 OptimizerOptions options)
    : Optimizer(std::move(learning_rate), std::move(options), "adagrad"),
      initial_accumulator_value_(initial_accumulator_value),
      epsilon_(epsilon) {
  check_range(initial_accumulator_value, 0.0, HUGE_VAL, false, "initial_accumulator_value");
  check_range(epsilon, 0.0, HUGE_VAL, false, "epsilon");
}

std::unique_ptr<Adagrad> Adagrad::from_config(const Json& config) {
  ConfigReader r(config, "Adagrad");
  LearningRate lr = r.learning_rate(0.001);
  OptimizerOptions base = r.base_options();
  double initial = r.number("initial_accumulator_value", 0.1), epsilon = r.number("epsilon", 1e-7);
  r.finish();
  return std::make_unique<Adagrad>(std::move(lr), initial, epsilon, std::move(base));
}

Json Adagrad::config() const {
  Json c = Optimizer::config();
  c.set("initial_accumulator_value", initial_accumulator_value_);
  c.set("epsilon", epsilon_);
  return c;
}

std::vector<Optimizer::SlotSpec> Adagrad::slot_specs() const {
  return {{"accumulator", initial_accumulator_value_}};
}

void Adagrad::update_on_gpu(const std::vector<VariableUpdate>& updates) {
  const VariableUpdate& u = updates.front();
  cuda::adagrad_update(u.value->device().index, u.value->dtype(), gpu_segments(updates, 1), u.learning_rate,
                       epsilon_, u.clip_value);
}

void Adagrad::update(const VariableUpdate& u) {
  dispatch_float(u.value->dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = u.value->data<T>() + u.begin;
    const T* g = u.grad->data<T>() + u.begin;
    T* acc = u.slots[0].data<T>() + u.begin;
    const std::int64_t n = u.end - u.begin;
    const T lr = static_cast<T>(u.learning_rate), eps = static_cast<T>(epsilon_),
            scale = static_cast<T>(u.grad_scale), limit = static_cast<T>(u.clip_value),
            decay = static_cast<T>(u.decay);
    dispatch_flags(u.clip(), u.decays(), [&](auto clip, auto dec) {
      constexpr bool kClip = decltype(clip)::value, kDecay = decltype(dec)::value;
      adagrad_loop<T, kClip, kDecay>(p, g, acc, n, lr, eps, scale, limit, decay);
    });
  });
}

}  // namespace mdtrain
