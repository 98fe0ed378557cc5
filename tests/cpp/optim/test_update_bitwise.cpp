// The optimizer ops against the old per-parameter loops (legacy_optimizer_update.h, a copy of the
// code before the ops): for every optimizer and variant, every clipping argument, weight decay
// with and without exclusions, float32 and float64, parameters packed in one buffer (one merged
// segment) or separate, and the op run on one thread or split over three, the weights and every
// slot after each of three steps must be bitwise those of the old code.
#include <gtest/gtest.h>

#include <cstring>
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

namespace mdtrain {
namespace {

using legacy::Hyper;
using legacy::Kind;

struct Variant {
  std::string label;
  Hyper hyper;
  bool adamw = false;
};

std::vector<Variant> variants() {
  std::vector<Variant> out;
  auto add = [&](std::string label, Hyper h, bool adamw = false) { out.push_back({std::move(label), h, adamw}); };
  Hyper h;
  h.kind = Kind::SGD;
  h.learning_rate = 0.05;
  add("SGD", h);
  h.momentum = 0.9;
  add("SGD momentum", h);
  h.nesterov = true;
  add("SGD nesterov", h);
  h = Hyper{};
  h.kind = Kind::Adam;
  h.learning_rate = 0.01;
  add("Adam", h);
  h.amsgrad = true;
  add("Adam amsgrad", h);
  h.amsgrad = false;
  add("AdamW", h, true);
  h.amsgrad = true;
  add("AdamW amsgrad", h, true);
  h = Hyper{};
  h.kind = Kind::RMSprop;
  h.learning_rate = 0.01;
  for (double mom : {0.0, 0.9})
    for (bool centered : {false, true}) {
      h.momentum = mom;
      h.centered = centered;
      add(std::string("RMSprop") + (mom > 0 ? " momentum" : "") + (centered ? " centered" : ""), h);
    }
  h = Hyper{};
  h.kind = Kind::Adagrad;
  h.learning_rate = 0.05;
  add("Adagrad", h);
  return out;
}

std::unique_ptr<Optimizer> make_optimizer(const Variant& v, const Hyper& h) {
  OptimizerOptions o;
  o.clipnorm = h.clipnorm;
  o.clipvalue = h.clipvalue;
  o.global_clipnorm = h.global_clipnorm;
  o.weight_decay = h.weight_decay;
  switch (h.kind) {
    case Kind::SGD: return std::make_unique<SGD>(h.learning_rate, h.momentum, h.nesterov, o);
    case Kind::Adam:
      if (v.adamw)
        return std::make_unique<AdamW>(h.learning_rate, *h.weight_decay, h.beta_1, h.beta_2, h.epsilon, h.amsgrad, o);
      return std::make_unique<Adam>(h.learning_rate, h.beta_1, h.beta_2, h.epsilon, h.amsgrad, o);
    case Kind::RMSprop: return std::make_unique<RMSprop>(h.learning_rate, h.rho, h.momentum, h.epsilon, h.centered, o);
    case Kind::Adagrad: return std::make_unique<Adagrad>(h.learning_rate, h.initial_accumulator_value, h.epsilon, o);
  }
  return nullptr;
}

// A small model's shapes (two dense layers and an odd one), large enough to be split over threads.
const std::vector<std::pair<std::string, Shape>>& layout() {
  static const std::vector<std::pair<std::string, Shape>> l{{"dense/kernel", {200, 100}},
                                                            {"dense/bias", {100}},
                                                            {"dense_1/kernel", {100, 10}},
                                                            {"dense_1/bias", {10}},
                                                            {"odd/scale", {3}}};
  return l;
}

template <class T>
void fill_random(T* x, std::int64_t n, std::mt19937_64& rng, bool gradient) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (std::int64_t i = 0; i < n; ++i) {
    double v = u(rng);
    // Gradients of mixed sizes (some far beyond clipvalue) and some exact zeros.
    if (gradient) v = (i % 17 == 0) ? 0.0 : (i % 5 == 0 ? v * 30.0 : v * 0.01);
    x[i] = static_cast<T>(v);
  }
}

template <class T>
void run_case(const Variant& variant, Hyper h, bool packed, bool exclude_bias, const std::string& where) {
  // The parameters: views into one values buffer and one grads buffer (as LayerStack packs them),
  // or tensors of their own.
  std::int64_t total = 0;
  for (const auto& [name, shape] : layout()) total += numel(shape);
  const DType dtype = dtype_of<T>::value;
  Tensor values({total}, dtype), grads({total}, dtype);
  std::vector<std::unique_ptr<Parameter>> params;
  ParameterList list;
  std::int64_t off = 0;
  for (const auto& [name, shape] : layout()) {
    const std::int64_t n = numel(shape);
    auto p = std::make_unique<Parameter>(name, Tensor(shape, dtype));
    if (packed) {
      p->value = values.rows(off, off + n).reshape(shape);
      p->grad = grads.rows(off, off + n).reshape(shape);
    }
    off += n;
    list.push_back(p.get());
    params.push_back(std::move(p));
  }
  std::mt19937_64 rng(1234);
  for (auto& p : params) fill_random(p->value.template data<T>(), p->value.numel(), rng, false);

  auto opt = make_optimizer(variant, h);
  if (exclude_bias) opt->exclude_from_weight_decay({"bias"});

  // The reference's own copies of values and slots; it reads the same gradients.
  const int slot_count = h.slot_count();
  std::vector<std::vector<T>> ref_values, ref_slots;
  std::vector<legacy::Variable<T>> vars;
  for (auto& p : params) {
    const T* v = p->value.template data<T>();
    ref_values.emplace_back(v, v + p->value.numel());
    for (int s = 0; s < slot_count; ++s)
      ref_slots.emplace_back(static_cast<std::size_t>(p->value.numel()), static_cast<T>(h.slot_initial_value()));
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    legacy::Variable<T> var{ref_values[i].data(),
                            params[i]->grad.template data<T>(),
                            {nullptr, nullptr, nullptr},
                            params[i]->value.numel(),
                            params[i]->name.find("bias") == std::string::npos || !exclude_bias};
    for (int s = 0; s < slot_count; ++s) var.slots[s] = ref_slots[i * slot_count + s].data();
    vars.push_back(var);
  }

  for (int step = 0; step < 3; ++step) {
    for (auto& p : params) fill_random(p->grad.template data<T>(), p->grad.numel(), rng, true);
    opt->apply(list);
    legacy::apply(h, vars, step);
    const std::string at = where + " step " + std::to_string(step);
    for (std::size_t i = 0; i < params.size(); ++i)
      ASSERT_EQ(std::memcmp(params[i]->value.raw(), ref_values[i].data(), params[i]->value.nbytes()), 0)
          << at << ": value of " << params[i]->name;
    const Optimizer::State state = opt->state();
    ASSERT_EQ(state.size(), 1 + params.size() * slot_count) << at;
    for (int s = 0; s < slot_count; ++s)
      for (std::size_t i = 0; i < params.size(); ++i) {
        const Tensor& slot = state[1 + s * params.size() + i].second;
        ASSERT_EQ(std::memcmp(slot.raw(), ref_slots[i * slot_count + s].data(), slot.nbytes()), 0)
            << at << ": " << state[1 + s * params.size() + i].first;
      }
  }
}

class ThreadsGuard {
 public:
  explicit ThreadsGuard(int threads) : saved_(cpu::intra_op_threads()) { cpu::set_intra_op_threads(threads); }
  ~ThreadsGuard() { cpu::set_intra_op_threads(saved_); }

 private:
  int saved_;
};

TEST(UpdateBitwise, OpsEqualTheOldLoopsForEveryOptimizerFlagAndDtype) {
  int cases = 0;
  for (const Variant& variant : variants())
    for (int clip = 0; clip < 4; ++clip)
      for (int decay = 0; decay < 3; ++decay)
        for (bool packed : {true, false})
          for (int threads : {1, 3}) {
            Hyper h = variant.hyper;
            if (clip == 1) h.clipnorm = 1.0;
            if (clip == 2) h.global_clipnorm = 2.0;
            if (clip == 3) h.clipvalue = 0.5;
            // decay 0: off (AdamW: its default 0.004); 1: on everywhere; 2: on except biases.
            if (decay > 0) h.weight_decay = 0.01;
            else if (variant.adamw) h.weight_decay = 0.004;
            const bool exclude = decay == 2;
            const std::string where = variant.label + " clip " + std::to_string(clip) + " decay " +
                                      std::to_string(decay) + (packed ? " packed" : " separate") + " threads " +
                                      std::to_string(threads);
            ThreadsGuard guard(threads);
            run_case<float>(variant, h, packed, exclude, where + " float32");
            run_case<double>(variant, h, packed, exclude, where + " float64");
            if (::testing::Test::HasFatalFailure()) return;
            cases += 2;
          }
  EXPECT_EQ(cases, 12 * 4 * 3 * 2 * 2 * 2);
}

}  // namespace
}  // namespace mdtrain
