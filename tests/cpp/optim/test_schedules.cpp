// Learning-rate schedules' values at given steps, against Keras's documented formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "mdtrain/optim/learning_rate_schedule.h"
#include "optim_test_util.h"

namespace mdtrain {
namespace {

using testing::expect_optim_error;

TEST(Schedules, ExponentialDecayContinuous) {
  ExponentialDecay s(0.1, 10, 0.5);
  EXPECT_DOUBLE_EQ(s(0), 0.1);
  EXPECT_DOUBLE_EQ(s(5), 0.1 * std::pow(0.5, 0.5));
  EXPECT_DOUBLE_EQ(s(10), 0.05);
  EXPECT_DOUBLE_EQ(s(25), 0.1 * std::pow(0.5, 2.5));
}

TEST(Schedules, ExponentialDecayStaircase) {
  ExponentialDecay s(0.1, 10, 0.5, /*staircase=*/true);
  EXPECT_DOUBLE_EQ(s(0), 0.1);
  EXPECT_DOUBLE_EQ(s(9), 0.1);
  EXPECT_DOUBLE_EQ(s(10), 0.05);
  EXPECT_DOUBLE_EQ(s(19), 0.05);
  EXPECT_DOUBLE_EQ(s(25), 0.025);
}

TEST(Schedules, PiecewiseConstantDecayBoundariesBelongToTheLeft) {
  // Keras docstring: values[0] when step <= boundaries[0], values[1] when
  // boundaries[0] < step <= boundaries[1], values[-1] after.
  PiecewiseConstantDecay s({100000, 110000}, {1.0, 0.5, 0.1});
  EXPECT_EQ(s(0), 1.0);
  EXPECT_EQ(s(100000), 1.0);
  EXPECT_EQ(s(100001), 0.5);
  EXPECT_EQ(s(110000), 0.5);
  EXPECT_EQ(s(110001), 0.1);
}

TEST(Schedules, CosineDecay) {
  const double pi = 3.14159265358979323846;
  CosineDecay s(0.2, 100, 0.1);
  EXPECT_DOUBLE_EQ(s(0), 0.2);
  EXPECT_NEAR(s(30), 0.2 * (0.9 * 0.5 * (1 + std::cos(pi * 0.3)) + 0.1), 1e-16);
  EXPECT_NEAR(s(100), 0.2 * 0.1, 1e-16);
  EXPECT_NEAR(s(1000), 0.2 * 0.1, 1e-16);  // clamped at decay_steps
}

TEST(Schedules, CosineDecayWithWarmup) {
  const double pi = 3.14159265358979323846;
  CosineDecay s(0.0, 100, 0.0, "CosineDecay", 0.1, 10);
  EXPECT_DOUBLE_EQ(s(0), 0.0);
  EXPECT_DOUBLE_EQ(s(5), 0.05);
  EXPECT_DOUBLE_EQ(s(10), 0.1);
  EXPECT_NEAR(s(60), 0.1 * 0.5 * (1 + std::cos(pi * 0.5)), 1e-16);
  EXPECT_NEAR(s(500), 0.0, 1e-16);
}

TEST(Schedules, ConfigRoundTrip) {
  std::vector<std::shared_ptr<const LearningRateSchedule>> all{
      std::make_shared<ExponentialDecay>(0.1, 7, 0.3, true),
      std::make_shared<PiecewiseConstantDecay>(std::vector<double>{3, 8}, std::vector<double>{1, 0.5, 0.25}),
      std::make_shared<CosineDecay>(0.2, 50, 0.1, "cos", 0.4, 5)};
  for (const auto& s : all) {
    Json j = serialize_schedule(*s);
    EXPECT_EQ(j.at("class_name").as_string(), s->class_name());
    auto back = schedule_from_config(Json::parse(j.dump()));
    EXPECT_EQ(serialize_schedule(*back), j);
    for (std::int64_t step : {0, 4, 9, 30, 80}) EXPECT_EQ((*back)(step), (*s)(step)) << s->class_name();
  }
}

TEST(Schedules, LearningRateConfigIsANumberForAConstant) {
  EXPECT_EQ(LearningRate(0.25).config(), Json(0.25));
  LearningRate lr(std::make_shared<ExponentialDecay>(0.1, 10, 0.5));
  EXPECT_TRUE(lr.config().is_object());
  EXPECT_FALSE(lr.is_constant());
  EXPECT_DOUBLE_EQ(LearningRate::from_config(lr.config()).at(10), 0.05);
}

TEST(Schedules, BadArguments) {
  expect_optim_error([] { ExponentialDecay(0.1, 0, 0.5); }, "decay_steps");
  expect_optim_error([] { CosineDecay(0.1, -1); }, "decay_steps");
  expect_optim_error([] { PiecewiseConstantDecay({1, 2}, {1.0, 2.0}); }, "length of boundaries");
  expect_optim_error([] { PiecewiseConstantDecay({2, 1}, {1.0, 2.0, 3.0}); }, "increase");
  expect_optim_error([] { LearningRate(-0.1); }, "learning_rate");
  expect_optim_error([] { schedule_from_config(Json::parse(R"({"class_name": "Nope", "config": {}})")); }, "Nope");
  expect_optim_error(
      [] {
        schedule_from_config(Json::parse(
            R"({"class_name": "ExponentialDecay", "config": {"initial_learning_rate": 0.1, "decay_steps": 3}})"));
      },
      "decay_rate");
  expect_optim_error(
      [] {
        schedule_from_config(Json::parse(R"({"class_name": "ExponentialDecay", "config":
            {"initial_learning_rate": 0.1, "decay_steps": 3, "decay_rate": 0.5, "bogus": 1}})"));
      },
      "bogus");
}

}  // namespace
}  // namespace mdtrain
