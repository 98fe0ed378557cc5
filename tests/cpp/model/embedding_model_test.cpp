// An Embedding -> Flatten -> Dense model through the C++ Model API: the batch tensor may hold the
// indices as int32, int64 or floats (the executor gathers rows of any dtype), each giving the same
// training bit for bit, on one replica and on two; replicas stay identical; a bad index stops the
// step naming its position in the global batch.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/model/model.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/embedding.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/mirrored_strategy.h"

namespace mdtrain {
namespace {

constexpr std::int64_t kRows = 45, kLength = 4, kVocab = 30;

std::unique_ptr<Model> embedding_model(int replicas) {
  auto m = std::make_unique<Model>("words", 17);
  Embedding::Options e;
  e.input_dim = kVocab;
  e.output_dim = 6;
  m->add(std::make_shared<Embedding>("embedding", e));
  m->add(std::make_shared<Flatten>("flatten"));
  Dense::Options d;
  d.units = 3;
  m->add(std::make_shared<Dense>("dense", d));
  m->build({kLength});
  std::vector<Device> devices;
  for (int i = 0; i < replicas; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  m->compile(std::make_shared<losses::SparseCategoricalCrossentropy>(true),
             std::shared_ptr<Optimizer>(make_optimizer("sgd")), {"accuracy"},
             std::make_shared<MirroredStrategy>(devices));
  return m;
}

// The indices as `dtype`, and int32 labels.
Tensor indices(DType dtype) {
  Tensor x({kRows, kLength}, dtype);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const std::int64_t v = (i * 7 + i / 5) % kVocab;
    switch (dtype) {
      case DType::Int32: x.data<std::int32_t>()[i] = static_cast<std::int32_t>(v); break;
      case DType::Int64: x.data<std::int64_t>()[i] = v; break;
      case DType::Float32: x.data<float>()[i] = static_cast<float>(v); break;
      default: x.data<double>()[i] = static_cast<double>(v); break;
    }
  }
  return x;
}

Tensor labels() {
  Tensor y({kRows}, DType::Int32);
  for (std::int64_t i = 0; i < kRows; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 3);
  return y;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

std::vector<Tensor> trained(int replicas, DType dtype) {
  auto m = embedding_model(replicas);
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(3));
  const Tensor x = indices(dtype), y = labels();
  for (int epoch = 0; epoch < 2; ++epoch) m->train_epoch(x, y, order.data(), kRows, 10, 5, nullptr);
  for (int r = 1; r < m->engine().num_replicas(); ++r) {
    auto params = m->engine().replica_network(r).parameters();
    auto primary = m->engine().replica_network(0).parameters();
    for (std::size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(bitwise_equal(params[i]->value, primary[i]->value)) << "replica " << r << " weight " << i;
  }
  EXPECT_TRUE(bitwise_equal(m->predict(x, 7), m->predict(indices(DType::Int32), 45)));
  return m->get_weights();
}

class EmbeddingModel : public ::testing::TestWithParam<int> {};

TEST_P(EmbeddingModel, EveryIndexDtypeTrainsTheSameWeights) {
  const int replicas = GetParam();
  const auto reference = trained(replicas, DType::Int32);
  ASSERT_EQ(reference.size(), 3u);
  EXPECT_EQ(reference[0].shape(), (Shape{kVocab, 6}));
  const auto initial = embedding_model(replicas)->get_weights();
  EXPECT_FALSE(bitwise_equal(reference[0], initial[0]));  // the table trained
  for (DType dt : {DType::Int64, DType::Float32, DType::Float64}) {
    const auto w = trained(replicas, dt);
    for (std::size_t i = 0; i < w.size(); ++i)
      EXPECT_TRUE(bitwise_equal(w[i], reference[i])) << name_of(dt) << " weight " << i;
  }
}

TEST_P(EmbeddingModel, BadIndexStopsTheStepNamingItsGlobalRow) {
  auto m = embedding_model(GetParam());
  Tensor x = indices(DType::Int32);
  x.data<std::int32_t>()[8 * kLength + 3] = kVocab;  // row 8 of the first batch (rows 0..9 in order)
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  const auto before = m->get_weights();
  try {
    m->train_epoch(x, labels(), order.data(), kRows, 10, 5, nullptr);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[embedding] layer \"embedding\": index 30 at position (8, 3)"),
              std::string::npos)
        << e.what();
  }
  const auto after = m->get_weights();
  for (std::size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(bitwise_equal(after[i], before[i])) << i;
}

INSTANTIATE_TEST_SUITE_P(Replicas, EmbeddingModel, ::testing::Values(1, 2));

}  // namespace
}  // namespace mdtrain
