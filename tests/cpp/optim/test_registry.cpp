// make_optimizer by name and config, config round trips, and argument validation.
#include <gtest/gtest.h>

#include "mdtrain/optim/adam.h"
#include "mdtrain/optim/adamw.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/optim/rmsprop.h"
#include "mdtrain/optim/sgd.h"
#include "optim_test_util.h"

namespace mdtrain {
namespace {

using testing::expect_optim_error;

TEST(Registry, NamesAreCaseInsensitiveWithKerasDefaults) {
  auto adam = make_optimizer("Adam");
  EXPECT_STREQ(adam->class_name(), "Adam");
  EXPECT_EQ(adam->current_learning_rate(), 0.001);
  auto* a = dynamic_cast<Adam*>(adam.get());
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->beta_1(), 0.9);
  EXPECT_EQ(a->beta_2(), 0.999);
  EXPECT_EQ(a->epsilon(), 1e-7);
  EXPECT_FALSE(a->amsgrad());

  auto sgd = make_optimizer("SGD");
  EXPECT_EQ(sgd->current_learning_rate(), 0.01);
  EXPECT_EQ(sgd->name(), "SGD");
  EXPECT_STREQ(make_optimizer("rmsprop")->class_name(), "RMSprop");
  EXPECT_STREQ(make_optimizer("ADAGRAD")->class_name(), "Adagrad");
  EXPECT_STREQ(make_optimizer(Json("adamw"))->class_name(), "AdamW");
}

TEST(Registry, UnknownNameListsTheKnownOnes) {
  expect_optim_error([] { make_optimizer("adamax"); }, "adagrad, adam, adamw, rmsprop, sgd");
}

TEST(Registry, KerasConfigShape) {
  OptimizerOptions o;
  o.clipnorm = 1.5;
  Adam opt(0.002, 0.8, 0.99, 1e-6, true, o);
  Json c = opt.config();
  EXPECT_EQ(c.at("name").as_string(), "adam");
  EXPECT_EQ(c.at("learning_rate").as_number(), 0.002);
  EXPECT_EQ(c.at("beta_1").as_number(), 0.8);
  EXPECT_TRUE(c.at("amsgrad").as_bool());
  EXPECT_EQ(c.at("clipnorm").as_number(), 1.5);
  EXPECT_TRUE(c.at("global_clipnorm").is_null());
  EXPECT_TRUE(c.at("weight_decay").is_null());
  EXPECT_FALSE(c.at("use_ema").as_bool());
}

TEST(Registry, ConfigRoundTripForEveryOptimizer) {
  std::vector<std::unique_ptr<Optimizer>> all;
  OptimizerOptions clip;
  clip.global_clipnorm = 2.0;
  all.push_back(std::make_unique<SGD>(0.05, 0.5, true, clip));
  all.push_back(std::make_unique<Adam>(std::make_shared<ExponentialDecay>(0.1, 10, 0.9, true)));
  all.push_back(std::make_unique<AdamW>(0.003, 0.01));
  all.push_back(std::make_unique<RMSprop>(0.01, 0.8, 0.2, 1e-6, true));
  all.push_back(make_optimizer("adagrad"));
  for (const auto& opt : all) {
    SCOPED_TRACE(opt->class_name());
    // Keras's serialised form, through text.
    auto back = make_optimizer(Json::parse(serialize_optimizer(*opt).dump()));
    EXPECT_STREQ(back->class_name(), opt->class_name());
    EXPECT_EQ(back->config(), opt->config());
    // A bare get_config() dictionary, whose name picks the class.
    EXPECT_EQ(make_optimizer(opt->config())->config(), opt->config());
  }
}

TEST(Registry, KerasConfigFromPythonReadsBack) {
  // As keras.optimizers.serialize(keras.optimizers.SGD(0.1, momentum=0.9)) prints it.
  auto opt = make_optimizer(Json::parse(R"({"module": "keras.optimizers", "class_name": "SGD",
      "config": {"name": "SGD", "learning_rate": 0.1, "weight_decay": null, "clipnorm": null,
      "global_clipnorm": null, "clipvalue": null, "use_ema": false, "ema_momentum": 0.99,
      "ema_overwrite_frequency": null, "loss_scale_factor": null,
      "gradient_accumulation_steps": null, "momentum": 0.9, "nesterov": false},
      "registered_name": null})"));
  auto* sgd = dynamic_cast<SGD*>(opt.get());
  ASSERT_NE(sgd, nullptr);
  EXPECT_EQ(sgd->momentum(), 0.9);
  EXPECT_EQ(sgd->current_learning_rate(), 0.1);
}

TEST(Registry, BadConfigs) {
  expect_optim_error([] { make_optimizer(Json::parse(R"({"class_name": "adam", "config": {"bogus": 1}})")); }, "bogus");
  expect_optim_error([] { make_optimizer(Json::parse(R"({"class_name": "adam", "config": {"use_ema": true}})")); },
                     "use_ema");
  expect_optim_error([] { make_optimizer(Json::parse(R"({"name": "my_optimizer"})")); }, "class_name");
  expect_optim_error(
      [] { make_optimizer(Json::parse(R"({"class_name": "adamw", "config": {"weight_decay": null}})")); },
      "weight_decay");
  expect_optim_error([] { make_optimizer(Json(3)); }, "name or a config");
}

TEST(Registry, BadArguments) {
  expect_optim_error([] { SGD(-0.1); }, "learning_rate");
  expect_optim_error([] { Adam(0.001, 1.0); }, "beta_1");
  expect_optim_error([] { Adam(0.001, 0.9, -0.1); }, "beta_2");
  expect_optim_error([] { SGD(0.01, 1.5); }, "momentum");
  expect_optim_error([] { RMSprop(0.01, 1.0); }, "rho");
  expect_optim_error([] { AdamW(0.001, -0.5); }, "weight_decay");
  OptimizerOptions both;
  both.clipnorm = 1.0;
  both.global_clipnorm = 1.0;
  expect_optim_error([&] { Adam(0.001, 0.9, 0.999, 1e-7, false, both); }, "only one of");
  OptimizerOptions negative;
  negative.clipvalue = -1.0;
  expect_optim_error([&] { SGD(0.01, 0.0, false, negative); }, "clipvalue");
}

}  // namespace
}  // namespace mdtrain
