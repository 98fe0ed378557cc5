// The float32 gate math of ops/recurrent_math.h (polynomial exp, rational tanh: vectorizable, also
// what the CUDA kernels compute) against float64 libm, and the recurrent step ops' device checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

#include "mdtrain/core/threading/thread_team.h"
#include "mdtrain/ops/recurrent.h"
#include "mdtrain/ops/recurrent_math.h"

namespace mdtrain {
namespace {

constexpr double kUlp = std::numeric_limits<float>::epsilon();  // 2^-23

TEST(RecurrentGateMath, Float32ExpIsWithinOneUlp) {
  double worst = 0.0;
  for (double x = -87.0; x <= 88.0; x += 1e-3) {
    const float f = static_cast<float>(x);
    const double want = std::exp(static_cast<double>(f));
    worst = std::max(worst, std::abs(math::exp_polynomial(f) - want) / want);
  }
  EXPECT_LE(worst, kUlp);
  EXPECT_TRUE(std::isnan(math::exp_polynomial(std::nanf(""))));
  EXPECT_EQ(math::exp_polynomial(0.0f), 1.0f);
}

TEST(RecurrentGateMath, Float32TanhAndSigmoidAreWithinThreeUlps) {
  double worst_tanh = 0.0, worst_sigmoid = 0.0;
  for (double x = -12.0; x <= 12.0; x += 1e-4) {
    const float f = static_cast<float>(x);
    const double t = std::tanh(static_cast<double>(f)), s = 1.0 / (1.0 + std::exp(-static_cast<double>(f)));
    if (t != 0.0) worst_tanh = std::max(worst_tanh, std::abs(math::gate_tanh(f) - t) / std::abs(t));
    worst_sigmoid = std::max(worst_sigmoid, std::abs(math::gate_sigmoid(f) - s) / s);
  }
  EXPECT_LE(worst_tanh, 3 * kUlp);
  EXPECT_LE(worst_sigmoid, 3 * kUlp);
  // Saturation and NaN, as tanh and sigmoid give them.
  EXPECT_EQ(math::gate_tanh(std::numeric_limits<float>::infinity()), math::gate_tanh(100.0f));
  EXPECT_NEAR(math::gate_tanh(100.0f), 1.0f, kUlp);
  EXPECT_NEAR(math::gate_tanh(-100.0f), -1.0f, kUlp);
  EXPECT_EQ(math::gate_tanh(1e-6f), 1e-6f);
  EXPECT_EQ(math::gate_sigmoid(100.0f), 1.0f);
  EXPECT_LT(math::gate_sigmoid(-100.0f), 1e-37f);
  EXPECT_TRUE(std::isnan(math::gate_tanh(std::nanf(""))));
  EXPECT_TRUE(std::isnan(math::gate_sigmoid(std::nanf(""))));
}

TEST(RecurrentGateMath, Float64KeepsLibm) {
  for (double x : {-30.0, -2.5, -1e-3, 0.0, 0.7, 4.0}) {
    EXPECT_EQ(math::gate_tanh(x), std::tanh(x));
    EXPECT_EQ(math::gate_sigmoid(x), math::sigmoid(x));
  }
}

TEST(RecurrentOps, LstmStepMatchesTheCellFormulas) {
  // One row, one unit: z = (i, f, c, o) pre-activations.
  Tensor z({1, 4}), c_prev({1, 1}), gates({1, 4}), c({1, 1}), h({1, 1});
  const float zs[4] = {0.3f, -1.2f, 0.8f, 2.0f};
  for (int k = 0; k < 4; ++k) z.data<float>()[k] = zs[k];
  c_prev.data<float>()[0] = 0.5f;
  ops::lstm_step_forward(z, c_prev, gates, c, h);
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  const double cell = sig(-1.2) * 0.5 + sig(0.3) * std::tanh(0.8);
  EXPECT_NEAR(c.data<float>()[0], cell, 1e-6);
  EXPECT_NEAR(h.data<float>()[0], sig(2.0) * std::tanh(cell), 1e-6);
}

TEST(RecurrentOps, TensorsOfAnotherDeviceOrShapeAreRefusedByName) {
  Tensor z({2, 8}), c_prev({2, 2}), gates({2, 8}), c({2, 2}), h({2, 3});
  try {
    ops::lstm_step_forward(z, c_prev, gates, c, h);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[recurrent] lstm_step_forward: h must be float32 (2, 2), got (2, 3)"),
              std::string::npos)
        << e.what();
  }
}

TEST(SerialTimeSteps, RunsTheStepsOnOneThreadAndRestoresTheCountOnEveryPath) {
  const int before = cpu::intra_op_threads();
  cpu::set_intra_op_threads(3);
  {
    const ops::SerialTimeSteps serial;
    EXPECT_EQ(cpu::intra_op_threads(), 1);
    {
      const ops::SerialTimeSteps nested;
      EXPECT_EQ(cpu::intra_op_threads(), 1);
    }
    EXPECT_EQ(cpu::intra_op_threads(), 1);
    int seen_by_another_thread = 0;
    std::thread([&] { seen_by_another_thread = cpu::intra_op_threads(); }).join();
    EXPECT_EQ(seen_by_another_thread, 3);  // only the thread running the steps is serial
  }
  EXPECT_EQ(cpu::intra_op_threads(), 3);
  try {
    const ops::SerialTimeSteps serial;
    throw std::runtime_error("a step failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(cpu::intra_op_threads(), 3);
  cpu::set_intra_op_threads(before);
}

}  // namespace
}  // namespace mdtrain
