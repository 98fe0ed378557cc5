// Gradient clipping as Keras 3's base optimizer: clipnorm per variable, global_clipnorm over all
// variables, clipvalue element-wise; checked through SGD(lr=1) so the step equals the clipped g.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "mdtrain/optim/sgd.h"
#include "optim_test_util.h"

namespace mdtrain {
namespace {

using testing::make_param;
using testing::values;

struct TwoParams {
  std::unique_ptr<Parameter> a = make_param("a", {0.0, 0.0});
  std::unique_ptr<Parameter> b = make_param("b", {0.0});
  TwoParams(std::vector<double> ga, std::vector<double> gb) {
    testing::set_values(a->grad, ga);
    testing::set_values(b->grad, gb);
  }
  // With SGD(lr=1) from zero, -value is the clipped gradient.
  std::vector<double> clipped_a() const {
    auto v = values(a->value);
    for (auto& x : v) x = -x;
    return v;
  }
  std::vector<double> clipped_b() const {
    auto v = values(b->value);
    for (auto& x : v) x = -x;
    return v;
  }
};

SGD sgd_with(OptimizerOptions o) { return SGD(1.0, 0.0, false, std::move(o)); }

TEST(Clipping, ClipnormIsPerVariable) {
  OptimizerOptions o;
  o.clipnorm = 1.0;
  SGD opt = sgd_with(o);
  TwoParams p({3.0, 4.0}, {0.5});  // ||a|| = 5 gets scaled, ||b|| = 0.5 < 1 does not
  opt.apply({p.a.get(), p.b.get()});
  testing::expect_close(p.clipped_a(), {3.0 * 1.0 / 5.0, 4.0 * 1.0 / 5.0}, "a");
  testing::expect_close(p.clipped_b(), {0.5}, "b");
}

TEST(Clipping, ClipnormLeavesZeroGradientsAlone) {
  OptimizerOptions o;
  o.clipnorm = 1.0;
  SGD opt = sgd_with(o);
  TwoParams p({0.0, 0.0}, {0.0});
  opt.apply({p.a.get(), p.b.get()});
  EXPECT_EQ(values(p.a->value), (std::vector<double>{0.0, 0.0}));
}

TEST(Clipping, GlobalClipnormUsesTheNormOfAllGradients) {
  OptimizerOptions o;
  o.global_clipnorm = 2.0;
  SGD opt = sgd_with(o);
  TwoParams p({3.0, 4.0}, {12.0});  // global norm 13
  opt.apply({p.a.get(), p.b.get()});
  const double scale = 2.0 * std::min(1.0 / 13.0, 1.0 / 2.0);
  testing::expect_close(p.clipped_a(), {3.0 * scale, 4.0 * scale}, "a");
  testing::expect_close(p.clipped_b(), {12.0 * scale}, "b");
}

TEST(Clipping, GlobalClipnormBelowTheLimitIsANoOp) {
  OptimizerOptions o;
  o.global_clipnorm = 100.0;
  SGD opt = sgd_with(o);
  TwoParams p({3.0, 4.0}, {12.0});
  opt.apply({p.a.get(), p.b.get()});
  testing::expect_close(p.clipped_a(), {3.0, 4.0}, "a");
  testing::expect_close(p.clipped_b(), {12.0}, "b");
}

TEST(Clipping, GlobalClipnormWithAnInfiniteGradientGivesNaN) {
  // Keras adds (norm - norm) to the scale so a non-finite norm poisons every update.
  OptimizerOptions o;
  o.global_clipnorm = 1.0;
  SGD opt = sgd_with(o);
  TwoParams p({1.0, 1.0}, {std::numeric_limits<double>::infinity()});
  opt.apply({p.a.get(), p.b.get()});
  EXPECT_TRUE(std::isnan(p.a->value.data<double>()[0]));
}

TEST(Clipping, ClipvalueClampsEachElement) {
  OptimizerOptions o;
  o.clipvalue = 0.5;
  SGD opt = sgd_with(o);
  TwoParams p({3.0, -0.25}, {-7.0});
  opt.apply({p.a.get(), p.b.get()});
  testing::expect_close(p.clipped_a(), {0.5, -0.25}, "a");
  testing::expect_close(p.clipped_b(), {-0.5}, "b");
}

TEST(Clipping, ClipvalueKeepsNaN) {
  OptimizerOptions o;
  o.clipvalue = 0.5;
  SGD opt = sgd_with(o);
  TwoParams p({std::nan(""), 1.0}, {0.0});
  opt.apply({p.a.get(), p.b.get()});
  EXPECT_TRUE(std::isnan(p.a->value.data<double>()[0]));
}

TEST(Clipping, ClippingDoesNotWriteTheGradients) {
  OptimizerOptions o;
  o.clipnorm = 1.0;
  SGD opt = sgd_with(o);
  TwoParams p({3.0, 4.0}, {0.5});
  opt.apply({p.a.get(), p.b.get()});
  EXPECT_EQ(values(p.a->grad), (std::vector<double>{3.0, 4.0}));
}

}  // namespace
}  // namespace mdtrain
