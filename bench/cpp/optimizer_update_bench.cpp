// One optimizer step's update of the seed model (Dense(128, relu) on 784 inputs, Dense(10):
// 101,770 float32 parameters packed as LayerStack packs them), old against new in the same run:
//   old: the per-parameter host loops mdtrain ran before the optimizer ops (a verbatim copy in
//        tests/cpp/optim/legacy_optimizer_update.h), one pass per parameter, one thread;
//   new: Optimizer::apply (clipping factors, segments, one op call over the one merged segment),
//        on one thread and on the intra-op team (every core).
// Prints microseconds per update (median of batches) and old/new. Run through
// bench/optimizer_update.py, or directly: optimizer_update_bench [--updates N].
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/core/parameter.h"
#include "mdtrain/core/threading/thread_team.h"
#include "mdtrain/optim/adagrad.h"
#include "mdtrain/optim/adam.h"
#include "mdtrain/optim/adamw.h"
#include "mdtrain/optim/rmsprop.h"
#include "mdtrain/optim/sgd.h"
#include "optim/legacy_optimizer_update.h"

using namespace mdtrain;

namespace {

struct Case {
  const char* label;
  legacy::Hyper hyper;
  std::function<std::unique_ptr<Optimizer>()> make;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  legacy::Hyper h;
  h.kind = legacy::Kind::SGD;
  h.learning_rate = 0.01;
  out.push_back({"SGD", h, [] { return std::make_unique<SGD>(0.01); }});
  h.momentum = 0.9;
  out.push_back({"SGD momentum", h, [] { return std::make_unique<SGD>(0.01, 0.9); }});
  h.nesterov = true;
  out.push_back({"SGD nesterov", h, [] { return std::make_unique<SGD>(0.01, 0.9, true); }});
  h = legacy::Hyper{};
  out.push_back({"Adam", h, [] { return std::make_unique<Adam>(0.001); }});
  h.amsgrad = true;
  out.push_back({"Adam amsgrad", h, [] { return std::make_unique<Adam>(0.001, 0.9, 0.999, 1e-7, true); }});
  h.amsgrad = false;
  h.weight_decay = 0.004;
  out.push_back({"AdamW", h, [] { return std::make_unique<AdamW>(0.001); }});
  h = legacy::Hyper{};
  h.kind = legacy::Kind::RMSprop;
  out.push_back({"RMSprop", h, [] { return std::make_unique<RMSprop>(0.001); }});
  h.centered = true;
  h.momentum = 0.9;
  out.push_back({"RMSprop centered+mom", h, [] { return std::make_unique<RMSprop>(0.001, 0.9, 0.9, 1e-7, true); }});
  h = legacy::Hyper{};
  h.kind = legacy::Kind::Adagrad;
  out.push_back({"Adagrad", h, [] { return std::make_unique<Adagrad>(0.001); }});
  return out;
}

// Median over batches of the time per call of f, in microseconds.
double time_us(const std::function<void()>& f, int updates) {
  constexpr int kBatches = 15;
  const int per_batch = std::max(1, updates / kBatches);
  for (int i = 0; i < per_batch; ++i) f();  // warm up
  std::vector<double> us;
  for (int b = 0; b < kBatches; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per_batch; ++i) f();
    const auto t1 = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / per_batch);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int updates = 3000;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--updates") == 0) updates = std::atoi(argv[i + 1]);

  const std::vector<std::pair<std::string, Shape>> layout{{"dense/kernel", {784, 128}},
                                                          {"dense/bias", {128}},
                                                          {"dense_1/kernel", {128, 10}},
                                                          {"dense_1/bias", {10}}};
  std::int64_t total = 0;
  for (const auto& [name, shape] : layout) total += numel(shape);
  Tensor values({total}), grads({total});
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (std::int64_t i = 0; i < total; ++i) {
    values.data<float>()[i] = normal(rng);
    grads.data<float>()[i] = normal(rng) * 0.1f;
  }
  std::vector<std::unique_ptr<Parameter>> params;
  ParameterList list;
  std::int64_t off = 0;
  for (const auto& [name, shape] : layout) {
    auto p = std::make_unique<Parameter>(name, values.rows(off, off + numel(shape)).reshape(shape));
    p->grad = grads.rows(off, off + numel(shape)).reshape(shape);
    off += numel(shape);
    list.push_back(p.get());
    params.push_back(std::move(p));
  }

  const int cores = cpu::intra_op_threads();
  std::printf("optimizer update of %lld float32 parameters (seed model), us per update, median of batches\n",
              static_cast<long long>(total));
  std::printf("%-22s %10s %12s %12s %12s %9s\n", "optimizer", "old loop", "new 1 thread",
              ("new " + std::to_string(cores) + " thr").c_str(), "old/new(1)", "old/new");
  for (const Case& c : cases()) {
    // Old: the reference's own values and slots, over the same gradients.
    const int slot_count = c.hyper.slot_count();
    std::vector<std::vector<float>> ref_values, ref_slots;
    std::vector<legacy::Variable<float>> vars;
    for (auto& p : params) {
      const float* v = p->value.data<float>();
      ref_values.emplace_back(v, v + p->value.numel());
      for (int s = 0; s < slot_count; ++s)
        ref_slots.emplace_back(static_cast<std::size_t>(p->value.numel()),
                               static_cast<float>(c.hyper.slot_initial_value()));
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      legacy::Variable<float> var{ref_values[i].data(),
                                  params[i]->grad.data<float>(),
                                  {nullptr, nullptr, nullptr},
                                  params[i]->value.numel(),
                                  true};
      for (int s = 0; s < slot_count; ++s) var.slots[s] = ref_slots[i * slot_count + s].data();
      vars.push_back(var);
    }
    std::int64_t step = 0;
    const double old_us = time_us([&] { legacy::apply(c.hyper, vars, step++); }, updates);

    auto opt = c.make();
    cpu::set_intra_op_threads(1);
    const double new1_us = time_us([&] { opt->apply(list); }, updates);
    cpu::set_intra_op_threads(cores);
    const double newn_us = time_us([&] { opt->apply(list); }, updates);
    std::printf("%-22s %10.1f %12.1f %12.1f %11.2fx %8.2fx\n", c.label, old_us, new1_us, newn_us, old_us / new1_us,
                old_us / newn_us);
  }
  return 0;
}
