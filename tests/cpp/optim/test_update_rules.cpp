// Each optimizer's first three steps on a float64 parameter against the Keras 3 formulas,
// written out here as scalar loops independent of the implementation.
#include <gtest/gtest.h>

#include <cmath>

#include "mdtrain/optim/adagrad.h"
#include "mdtrain/optim/adam.h"
#include "mdtrain/optim/adamw.h"
#include "mdtrain/optim/rmsprop.h"
#include "mdtrain/optim/sgd.h"
#include "optim_test_util.h"

namespace mdtrain {
namespace {

using testing::expect_close;
using testing::make_param;
using testing::start_values;
using testing::three_grads;
using testing::values;
using Vec = std::vector<double>;

// Applies three_grads() one step at a time and returns the parameter after each step.
std::vector<Vec> run_three_steps(Optimizer& opt, DType dtype = DType::Float64) {
  auto p = make_param("w", start_values(), {}, dtype);
  std::vector<Vec> out;
  for (const auto& g : three_grads()) {
    testing::set_values(p->grad, g);
    opt.apply({p.get()});
    out.push_back(values(p->value));
  }
  return out;
}

void expect_steps(const std::vector<Vec>& actual, const std::vector<Vec>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t t = 0; t < actual.size(); ++t) expect_close(actual[t], expected[t], "step " + std::to_string(t + 1));
}

TEST(UpdateRules, SgdPlain) {
  SGD opt(0.1);
  Vec x = start_values();
  std::vector<Vec> expected;
  for (const auto& g : three_grads()) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = x[i] - g[i] * 0.1;
    expected.push_back(x);
  }
  expect_steps(run_three_steps(opt), expected);
  EXPECT_EQ(opt.iterations(), 3);
}

TEST(UpdateRules, SgdMomentumAndNesterov) {
  for (bool nesterov : {false, true}) {
    SGD opt(0.1, 0.9, nesterov);
    Vec x = start_values(), m(x.size(), 0.0);
    std::vector<Vec> expected;
    for (const auto& g : three_grads()) {
      for (std::size_t i = 0; i < x.size(); ++i) {
        m[i] = 0.9 * m[i] - 0.1 * g[i];
        x[i] += nesterov ? 0.9 * m[i] - 0.1 * g[i] : m[i];
      }
      expected.push_back(x);
    }
    SCOPED_TRACE(nesterov ? "nesterov" : "momentum");
    expect_steps(run_three_steps(opt), expected);
  }
}

Vec adam_reference(bool amsgrad, double weight_decay, std::vector<Vec>* expected) {
  const double lr = 0.01, b1 = 0.8, b2 = 0.95, eps = 1e-3;  // non-defaults so mixing them up shows
  Vec x = start_values(), m(4, 0.0), v(4, 0.0), vhat(4, 0.0);
  for (int t = 1; t <= 3; ++t) {
    const Vec& g = three_grads()[t - 1];
    const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (std::size_t i = 0; i < 4; ++i) {
      x[i] = x[i] - x[i] * weight_decay * lr;  // Keras applies weight decay before the step
      m[i] = m[i] + (g[i] - m[i]) * (1 - b1);
      v[i] = v[i] + (g[i] * g[i] - v[i]) * (1 - b2);
      vhat[i] = std::max(vhat[i], v[i]);
      const double denom = std::sqrt(amsgrad ? vhat[i] : v[i]) + eps;
      x[i] = x[i] - m[i] * alpha / denom;
    }
    expected->push_back(x);
  }
  return x;
}

TEST(UpdateRules, Adam) {
  for (bool amsgrad : {false, true}) {
    SCOPED_TRACE(amsgrad ? "amsgrad" : "adam");
    Adam opt(0.01, 0.8, 0.95, 1e-3, amsgrad);
    std::vector<Vec> expected;
    adam_reference(amsgrad, 0.0, &expected);
    expect_steps(run_three_steps(opt), expected);
  }
}

TEST(UpdateRules, AmsgradDiffersFromAdam) {
  // The gradients shrink on element 2, so max(v_hat, v) must bite: guards against a test
  // sequence where AMSGrad would pass by being plain Adam.
  std::vector<Vec> plain, ams;
  adam_reference(false, 0.0, &plain);
  adam_reference(true, 0.0, &ams);
  EXPECT_NE(plain[2][2], ams[2][2]);
}

TEST(UpdateRules, AdamW) {
  AdamW opt(0.01, 0.1, 0.8, 0.95, 1e-3);
  std::vector<Vec> expected;
  adam_reference(false, 0.1, &expected);
  expect_steps(run_three_steps(opt), expected);
  EXPECT_EQ(opt.name(), "adamw");
  EXPECT_EQ(opt.options().weight_decay.value(), 0.1);
}

TEST(UpdateRules, AdamWDefaultWeightDecayIsKeras) {
  AdamW opt;
  EXPECT_EQ(opt.options().weight_decay.value(), 0.004);
  EXPECT_EQ(opt.current_learning_rate(), 0.001);
}

TEST(UpdateRules, RmspropVariants) {
  const double lr = 0.01, rho = 0.8, eps = 1e-3;
  for (double momentum : {0.0, 0.5}) {
    for (bool centered : {false, true}) {
      SCOPED_TRACE("momentum=" + std::to_string(momentum) + " centered=" + std::to_string(centered));
      RMSprop opt(lr, rho, momentum, eps, centered);
      Vec x = start_values(), v(4, 0.0), a(4, 0.0), mom(4, 0.0);
      std::vector<Vec> expected;
      for (const auto& g : three_grads()) {
        for (std::size_t i = 0; i < 4; ++i) {
          v[i] = rho * v[i] + (1 - rho) * g[i] * g[i];
          double denominator = v[i] + eps;  // epsilon inside the square root
          if (centered) {
            a[i] = rho * a[i] + (1 - rho) * g[i];
            denominator = v[i] - a[i] * a[i] + eps;
          }
          const double increment = lr * g[i] / std::sqrt(denominator);
          if (momentum > 0) {
            mom[i] = momentum * mom[i] + increment;
            x[i] -= mom[i];
          } else {
            x[i] -= increment;
          }
        }
        expected.push_back(x);
      }
      expect_steps(run_three_steps(opt), expected);
    }
  }
}

TEST(UpdateRules, RmspropKerasDocExample) {
  // From the RMSprop docstring: var1 = 10, loss = var1^2 / 2, lr = 0.1 -> 9.683772 after one step.
  RMSprop opt(0.1);
  auto p = make_param("var1", {10.0});
  p->grad.data<double>()[0] = 10.0;
  opt.apply({p.get()});
  EXPECT_NEAR(p->value.data<double>()[0], 9.683772, 5e-7);
}

TEST(UpdateRules, Adagrad) {
  const double lr = 0.1, init = 0.2, eps = 1e-3;
  Adagrad opt(lr, init, eps);
  Vec x = start_values(), acc(4, init);
  std::vector<Vec> expected;
  for (const auto& g : three_grads()) {
    for (std::size_t i = 0; i < 4; ++i) {
      acc[i] += g[i] * g[i];
      x[i] -= lr * g[i] / std::sqrt(acc[i] + eps);
    }
    expected.push_back(x);
  }
  expect_steps(run_three_steps(opt), expected);
}

TEST(UpdateRules, WeightDecayOnAnyOptimizer) {
  OptimizerOptions o;
  o.weight_decay = 0.5;
  SGD opt(0.1, 0.0, false, o);
  Vec x = start_values();
  std::vector<Vec> expected;
  for (const auto& g : three_grads()) {
    for (std::size_t i = 0; i < 4; ++i) {
      x[i] = x[i] - x[i] * 0.5 * 0.1;
      x[i] = x[i] - g[i] * 0.1;
    }
    expected.push_back(x);
  }
  expect_steps(run_three_steps(opt), expected);
}

TEST(UpdateRules, WeightDecayExclusionByName) {
  OptimizerOptions o;
  o.weight_decay = 0.5;
  SGD opt(0.1, 0.0, false, o);
  opt.exclude_from_weight_decay({"bias"});
  auto kernel = make_param("dense/kernel", {2.0});
  auto bias = make_param("dense/bias", {2.0});
  opt.apply({kernel.get(), bias.get()});  // zero gradients: only the decay moves anything
  EXPECT_DOUBLE_EQ(kernel->value.data<double>()[0], 2.0 - 2.0 * 0.5 * 0.1);
  EXPECT_EQ(bias->value.data<double>()[0], 2.0);
}

TEST(UpdateRules, NonTrainableParametersAreLeftAlone) {
  SGD opt(0.1);
  auto a = make_param("a", {1.0});
  auto frozen = make_param("frozen", {1.0});
  frozen->trainable = false;
  a->grad.data<double>()[0] = 1.0;
  frozen->grad.data<double>()[0] = 1.0;
  opt.apply({a.get(), frozen.get()});
  EXPECT_DOUBLE_EQ(a->value.data<double>()[0], 0.9);
  EXPECT_EQ(frozen->value.data<double>()[0], 1.0);
}

TEST(UpdateRules, Float32FollowsFloat64) {
  // Same rules in float: agreement to float precision, for every optimizer.
  std::vector<std::unique_ptr<Optimizer>> a, b;
  a.push_back(std::make_unique<Adam>(0.01, 0.9, 0.999, 1e-7, true));
  a.push_back(std::make_unique<RMSprop>(0.01, 0.9, 0.5, 1e-7, true));
  a.push_back(std::make_unique<SGD>(0.1, 0.9, true));
  a.push_back(std::make_unique<Adagrad>(0.1));
  a.push_back(std::make_unique<AdamW>(0.01));
  for (auto& opt : a) {
    auto twin = opt->clone();
    auto r64 = run_three_steps(*opt, DType::Float64);
    auto r32 = run_three_steps(*twin, DType::Float32);
    for (std::size_t t = 0; t < 3; ++t)
      for (std::size_t i = 0; i < 4; ++i)
        EXPECT_NEAR(r32[t][i], r64[t][i], 1e-5) << opt->class_name() << " step " << t << " elem " << i;
  }
}

TEST(UpdateRules, ScheduleIsReadAtTheIterationBeforeTheStep) {
  // ExponentialDecay(0.1, 1, 0.5): step k uses lr = 0.1 * 0.5^k with k = iterations before it.
  SGD opt(std::make_shared<ExponentialDecay>(0.1, 1.0, 0.5));
  Vec x = start_values();
  std::vector<Vec> expected;
  for (int k = 0; k < 3; ++k) {
    const double lr = 0.1 * std::pow(0.5, k);
    for (std::size_t i = 0; i < 4; ++i) x[i] -= three_grads()[k][i] * lr;
    expected.push_back(x);
  }
  expect_steps(run_three_steps(opt), expected);
  EXPECT_DOUBLE_EQ(opt.current_learning_rate(), 0.1 * 0.125);
}

}  // namespace
}  // namespace mdtrain
