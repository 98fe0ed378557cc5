// A functional model (Model over a LayerGraph) through the C++ Model API: it trains under
// MirroredStrategy with replicas that stay identical and the one-device weights to float32
// rounding, and its file (a Keras-shaped Functional config) loads back to the same predictions.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "mdtrain/model/model.h"
#include "mdtrain/nn/concatenate.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/elementwise_merge.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/mirrored_strategy.h"

namespace mdtrain {
namespace {

constexpr std::int64_t kRows = 48, kFeatures = 5;

std::shared_ptr<Dense> dense(const std::string& name, std::int64_t units, const std::string& activation) {
  Dense::Options o;
  o.units = units;
  o.activation = activation;
  return std::make_shared<Dense>(name, o);
}

// x -> a -> b; Add(a, b) -> Concatenate(add, a) -> out (softmax).
std::unique_ptr<Model> residual_model(int replicas) {
  auto g = std::make_unique<LayerGraph>(std::vector<Shape>{{kFeatures}});
  const int a = g->add_node(dense("a", 6, "relu"), {0});
  const int b = g->add_node(dense("b", 6, "tanh"), {a});
  const int sum = g->add_node(std::make_shared<Add>("add"), {a, b});
  const int cat = g->add_node(std::make_shared<Concatenate>("cat"), {sum, a});
  g->set_outputs({g->add_node(dense("out", 3, "softmax"), {cat})});
  auto m = std::make_unique<Model>("residual", 21, std::move(g), std::vector<std::string>{"features"});
  std::vector<Device> devices;
  for (int i = 0; i < replicas; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  m->compile(std::make_shared<losses::SparseCategoricalCrossentropy>(false),
             std::shared_ptr<Optimizer>(make_optimizer("sgd")), {"accuracy"},
             std::make_shared<MirroredStrategy>(devices));
  return m;
}

Tensor features() {
  Tensor x({kRows, kFeatures});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::sin(0.37f * static_cast<float>(i));
  return x;
}

Tensor labels() {
  Tensor y({kRows}, DType::Int32);
  for (std::int64_t i = 0; i < kRows; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 3);
  return y;
}

std::vector<Tensor> trained(Model& m) {
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  m.train_epoch(features(), labels(), order.data(), kRows, 16, 3, nullptr);
  return m.get_weights();
}

TEST(FunctionalModel, TrainsUnderMirroredStrategyLikeOneDevice) {
  auto one = residual_model(1), two = residual_model(2);
  const auto w1 = trained(*one), w2 = trained(*two);
  ASSERT_EQ(w1.size(), 6u);
  for (std::size_t i = 0; i < w1.size(); ++i)
    for (std::int64_t k = 0; k < w1[i].numel(); ++k)
      EXPECT_NEAR(w1[i].data<float>()[k], w2[i].data<float>()[k], 1e-6) << "weight " << i;
  // The replicas hold the same bits.
  auto r0 = two->engine().replica_network(0).parameters(), r1 = two->engine().replica_network(1).parameters();
  for (std::size_t i = 0; i < r0.size(); ++i)
    EXPECT_EQ(0, std::memcmp(r0[i]->value.raw(), r1[i]->value.raw(), r0[i]->value.nbytes()));
}

TEST(FunctionalModel, SavesAFunctionalConfigAndLoadsTheSamePredictions) {
  auto m = residual_model(1);
  trained(*m);
  const Json config = m->config();
  EXPECT_EQ(config.at("class_name").as_string(), "Functional");
  const auto& layers = config.at("config").at("layers").as_array();
  ASSERT_EQ(layers.size(), 6u);  // the InputLayer and five nodes
  EXPECT_EQ(layers[0].at("class_name").as_string(), "InputLayer");
  EXPECT_EQ(layers[3].at("inbound_nodes").as_array()[0].at("args").as_array()[0].as_array().size(), 2u);

  char dir[] = "/tmp/mdtrain_functional_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/m.mdtrain";
  m->save(path);
  auto loaded = Model::load(path);
  ASSERT_TRUE(loaded->is_functional());
  EXPECT_EQ(loaded->config().dump(), config.dump());
  const Tensor a = m->predict(features(), 16), b = loaded->predict(features(), 16);
  EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes()));
  std::remove(path.c_str());
  ::rmdir(dir);
}

TEST(FunctionalModel, RefusesAddOnAFunctionalModel) {
  auto m = residual_model(1);
  EXPECT_THROW(m->add(dense("extra", 2, "linear")), std::logic_error);
  EXPECT_THROW(m->stack(), std::logic_error);
}

}  // namespace
}  // namespace mdtrain
