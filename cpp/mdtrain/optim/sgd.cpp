#include "mdtrain/optim/sgd.h"

#include "mdtrain/ops/optimizer_math.h"

namespace mdtrain {

namespace {

template <class T, bool kClip, bool kDecay>
void sgd_loop(T* __restrict p, const T* __restrict g, std::int64_t n, T lr, T scale, T limit,
              T decay) {
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
void sgd_momentum_loop(T* __restrict p, const T* __restrict g, T* __restrict m, std::int64_t n,
                       T lr, T momentum, T scale, T limit, T decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if constexpr (kClip) gi = math::clip_gradient(gi, scale, limit);
    T pi = p[i];
    if constexpr (kDecay) pi = math::decay_weight(pi, decay);
    math::sgd_momentum_update(pi, m[i], gi, lr, momentum, kNesterov);
    p[i] = pi;
  }
}

}  // namespace

SGD::SGD(LearningRate learning_rate, double momentum, bool nesterov, OptimizerOptions options)
    : Optimizer(std::move(learning_rate), std::move(options), "SGD"),
      momentum_(momentum),
      nesterov_(nesterov) {
  check_range(momentum, 0.0, 1.0, true, "SGD momentum");
}

std::unique_ptr<SGD> SGD::from_config(const Json& config) {
  ConfigReader r(config, "SGD");
  LearningRate lr = r.learning_rate(0.01);
  OptimizerOptions base = r.base_options();
  double momentum = r.number("momentum", 0.0);
  bool nesterov = r.boolean("nesterov", false);
  r.finish();
  return std::make_unique<SGD>(std::move(lr), momentum, nesterov, std::move(base));
}

Json SGD::config() const {
  Json c = Optimizer::config();
  c.set("momentum", momentum_);
  c.set("nesterov", nesterov_);
  return c;
}

std::vector<Optimizer::SlotSpec> SGD::slot_specs() const {
  if (momentum_ == 0.0) return {};
  return {{"momentum", 0.0}};
}

void SGD::update_on_gpu(const std::vector<VariableUpdate>& updates) {
  const VariableUpdate& u = updates.front();
  cuda::sgd_update(u.value->device().index, u.value->dtype(), gpu_segments(updates, momentum_ == 0.0 ? 0 : 1),
                   u.learning_rate, momentum_, nesterov_, u.clip_value);
}

void SGD::update(const VariableUpdate& u) {
  dispatch_float(u.value->dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = u.value->data<T>() + u.begin;
    const T* g = u.grad->data<T>() + u.begin;
    const std::int64_t n = u.end - u.begin;
    const T lr = static_cast<T>(u.learning_rate), scale = static_cast<T>(u.grad_scale),
            limit = static_cast<T>(u.clip_value), decay = static_cast<T>(u.decay);
    dispatch_flags(u.clip(), u.decays(), [&](auto clip, auto dec) {
      constexpr bool kClip = decltype(clip)::value, kDecay = decltype(dec)::value;
      if (momentum_ == 0.0) {
        sgd_loop<T, kClip, kDecay>(p, g, n, lr, scale, limit, decay);
      } else {
        T* m = u.slots[0].data<T>() + u.begin;
        const T mom = static_cast<T>(momentum_);
        if (nesterov_) sgd_momentum_loop<T, kClip, kDecay, true>(p, g, m, n, lr, mom, scale, limit, decay);
        else sgd_momentum_loop<T, kClip, kDecay, false>(p, g, m, n, lr, mom, scale, limit, decay);
      }
    });
  });
}

}  // namespace mdtrain
