// keras.layers.Embedding: forward gathers table rows, backward scatters dy into a dense table
// gradient (finite differences in float64, repeated indices adding up, the same bits for any
// thread split), and bad indices are refused, naming the layer, value and position, before
// anything is written.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "gradient_check.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/embedding.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/layer_factory.h"
#include "mdtrain/nn/layer_stack.h"
#include "mdtrain/ops/embedding.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {
namespace {

using namespace testing;

Embedding::Options options(std::int64_t input_dim, std::int64_t output_dim) {
  Embedding::Options o;
  o.input_dim = input_dim;
  o.output_dim = output_dim;
  return o;
}

template <class T>
Tensor indices(const Shape& shape, std::initializer_list<double> values) {
  Tensor t(shape, dtype_of<T>::value);
  std::int64_t i = 0;
  for (double v : values) t.data<T>()[i++] = static_cast<T>(v);
  EXPECT_EQ(i, t.numel());
  return t;
}

// The message of the std::invalid_argument fn throws ("" and a failure when it throws none).
template <class F>
std::string invalid_argument_of(F&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::invalid_argument";
  return "";
}

TEST(Embedding, ForwardIsTheTableRowsForEveryIndexDtype) {
  Embedding e("emb", options(5, 3));
  e.build({2, 2}, 7, DType::Float64);
  EXPECT_EQ(e.output_shape(), (Shape{2, 2, 3}));
  const double* table = e.embeddings().value.data<double>();
  const std::vector<std::int64_t> want = {4, 0, 2, 2, 1, 3, 0, 4};
  for (const Tensor& x :
       {indices<std::int32_t>({2, 2, 2}, {4, 0, 2, 2, 1, 3, 0, 4}),
        indices<std::int64_t>({2, 2, 2}, {4, 0, 2, 2, 1, 3, 0, 4}), indices<float>({2, 2, 2}, {4, 0, 2, 2, 1, 3, 0, 4}),
        indices<double>({2, 2, 2}, {4, 0, 2, 2, 1, 3, 0, 4})}) {
    SCOPED_TRACE(name_of(x.dtype()));
    Tensor y = e.forward(x, {});
    ASSERT_EQ(y.shape(), (Shape{2, 2, 2, 3}));
    for (std::size_t i = 0; i < want.size(); ++i)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(y.data<double>()[i * 3 + c], table[want[i] * 3 + c]) << i << "," << c;
  }
}

TEST(Embedding, KerasUniformInitializerAndWeightName) {
  Embedding e("embedding", options(400, 50));
  e.build({3}, 1);
  ASSERT_EQ(e.parameters().size(), 1u);
  EXPECT_EQ(e.parameters()[0]->name, "embedding/embeddings");
  EXPECT_EQ(e.embeddings().value.shape(), (Shape{400, 50}));
  const float* w = e.embeddings().value.data<float>();
  float lo = 1, hi = -1;
  double sum = 0;
  for (std::int64_t i = 0; i < 400 * 50; ++i) {
    lo = std::min(lo, w[i]);
    hi = std::max(hi, w[i]);
    sum += w[i];
  }
  EXPECT_GE(lo, -0.05f);
  EXPECT_LT(hi, 0.05f);
  EXPECT_LT(lo, -0.049f);  // spread over the whole interval, not a constant
  EXPECT_GT(hi, 0.049f);
  EXPECT_NEAR(sum / (400 * 50), 0.0, 0.002);
  const Json init = e.config().at("embeddings_initializer");
  EXPECT_EQ(init.at("class_name").as_string(), "RandomUniform");
  EXPECT_DOUBLE_EQ(init.at("config").at("minval").as_number(), -0.05);
  EXPECT_DOUBLE_EQ(init.at("config").at("maxval").as_number(), 0.05);
}

TEST(Embedding, TableGradientMatchesFiniteDifferences) {
  // Repeated indices (3 three times, 0 twice) and unused rows (5): L = sum(G * y) + L2 penalty.
  Embedding::Options o = options(6, 4);
  o.embeddings_regularizer = Json::parse(R"({"class_name": "L2", "config": {"l2": 0.01}})");
  Embedding e("emb", o);
  e.build({3}, 11, DType::Float64);
  std::mt19937_64 rng(5);
  const Tensor x = indices<std::int64_t>({3, 3}, {3, 0, 3, 1, 2, 3, 0, 4, 4});
  const Tensor G = random_tensor({3, 3, 4}, rng);
  e.forward(x, {});
  EXPECT_FALSE(e.backward(G, false).defined());
  e.add_regularization_gradients();
  const Tensor grad = e.embeddings().grad.clone();
  auto loss = [&] { return dot(G, e.forward(x, {})) + e.regularization_loss(); };
  expect_close(grad, numeric_gradient(e.embeddings().value, loss), "emb/embeddings");
}

TEST(Embedding, RepeatedIndicesAccumulateAndUnusedRowsAreZero) {
  Embedding e("emb", options(4, 2));
  e.build({4}, 3, DType::Float64);
  e.embeddings().grad.fill(123.0);  // a stale gradient must not leak into the new one
  e.forward(indices<std::int32_t>({1, 4}, {2, 2, 0, 2}), {});
  Tensor dy({1, 4, 2}, DType::Float64);
  const double d[] = {1, 10, 2, 20, 4, 40, 8, 80};
  std::memcpy(dy.data<double>(), d, sizeof(d));
  e.backward(dy, false);
  const double* g = e.embeddings().grad.data<double>();
  const double want[] = {4, 40, 0, 0, 1 + 2 + 8, 10 + 20 + 80, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(g[i], want[i]) << i;
}

TEST(Embedding, ScatterAddGivesTheSameBitsForAnyThreadSplit) {
  // 3000 indices into 50 rows of 64 columns: large enough to be split over the intra-op threads.
  std::mt19937_64 rng(9);
  const Tensor dy = random_tensor({3000, 64}, rng, -1, 1, DType::Float32);
  Tensor rows({3000}, DType::Int64);
  std::uniform_int_distribution<std::int64_t> pick(0, 49);
  for (std::int64_t i = 0; i < 3000; ++i) rows.data<std::int64_t>()[i] = pick(rng);
  // The reference: one loop in index order.
  std::vector<float> want(50 * 64, 0.0f);
  for (std::int64_t i = 0; i < 3000; ++i)
    for (int c = 0; c < 64; ++c) want[rows.data<std::int64_t>()[i] * 64 + c] += dy.data<float>()[i * 64 + c];
  const int threads = ops::cpu_thread_count();
  for (int t : {1, 2, 3}) {
    ops::set_cpu_threads(t);
    Tensor grad({50, 64}, DType::Float32);
    ops::embedding_scatter_add(dy, rows, grad);
    EXPECT_EQ(std::memcmp(grad.data<float>(), want.data(), want.size() * sizeof(float)), 0) << t << " threads";
  }
  ops::set_cpu_threads(threads);
}

TEST(Embedding, LargeLookupSplitOverThreadsMatchesTheRows) {
  Embedding e("emb", options(1000, 64));
  e.build({50}, 4);
  Tensor x({40, 50}, DType::Int32);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 37) % 1000);
  const int threads = ops::cpu_thread_count();
  ops::set_cpu_threads(2);
  Tensor y = e.forward(x, {}).clone();
  ops::set_cpu_threads(threads);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    ASSERT_EQ(std::memcmp(y.data<float>() + i * 64, e.embeddings().value.data<float>() + ((i * 37) % 1000) * 64,
                          64 * sizeof(float)),
              0)
        << i;
}

TEST(Embedding, OutOfRangeIndexIsRefusedBeforeAnythingIsWritten) {
  Embedding e("emb", options(10, 2));
  e.build({3}, 1, DType::Float64);
  Tensor y = e.forward(indices<std::int64_t>({2, 3}, {1, 2, 3, 4, 5, 6}), {}).clone();
  const Tensor table = e.embeddings().value.clone();
  ForwardContext ctx;
  ctx.global_row_offset = 8;  // this replica's rows start at row 8 of the global batch
  const std::string msg = invalid_argument_of([&] {
    e.forward(indices<std::int32_t>({2, 3}, {1, 2, 3, 4, 10, -1}), ctx);
  });
  EXPECT_EQ(msg,
            "[embedding] layer \"emb\": index 10 at position (9, 1) of the input (shape (2, 3)) is outside [0, 10) "
            "(input_dim=10)");
  EXPECT_NE(invalid_argument_of([&] {
              e.forward(indices<std::int64_t>({1, 3}, {-1, 0, 0}), {});
            }).find("index -1 at position (0, 0)"),
            std::string::npos);
  EXPECT_NE(invalid_argument_of([&] {
              e.forward(indices<float>({1, 3}, {0, 1e30, 0}), {});
            }).find("index 1e+30 at position (0, 1)"),
            std::string::npos);
  // Nothing changed: the last good output and the table are as they were.
  Tensor again = e.forward(indices<std::int64_t>({2, 3}, {1, 2, 3, 4, 5, 6}), {});
  EXPECT_EQ(std::memcmp(again.data<double>(), y.data<double>(), y.nbytes()), 0);
  EXPECT_EQ(std::memcmp(e.embeddings().value.data<double>(), table.data<double>(), table.nbytes()), 0);
}

TEST(Embedding, NonIntegralFloatIndexIsRefusedBeforeAnythingIsWritten) {
  Embedding e("emb", options(10, 2));
  e.build({2}, 1);
  Tensor y = e.forward(indices<float>({2, 2}, {1, 2, 3, 4}), {}).clone();
  const std::string msg = invalid_argument_of([&] { e.forward(indices<float>({2, 2}, {1, 2, 2.5, 99}), {}); });
  EXPECT_EQ(msg,
            "[embedding] layer \"emb\": index 2.5 at position (1, 0) of the input (shape (2, 2)) is not a whole "
            "number; indices must be integers in [0, 10) (input_dim=10)");
  EXPECT_NE(invalid_argument_of([&] {
              e.forward(indices<double>({2, 2}, {0, NAN, 0, 0}), {});
            }).find("index nan at position (0, 1)"),
            std::string::npos);
  Tensor again = e.forward(indices<float>({2, 2}, {1, 2, 3, 4}), {});
  EXPECT_EQ(std::memcmp(again.data<float>(), y.data<float>(), y.nbytes()), 0);
}

TEST(Embedding, CheckIndicesCountsPositionsOverTheWholeArray) {
  Embedding e("words", options(3, 2));
  e.build({2}, 1);
  const Tensor good = indices<std::int32_t>({3, 2}, {0, 1, 2, 0, 1, 2});
  EXPECT_NO_THROW(e.check_indices(good));
  EXPECT_EQ(invalid_argument_of([&] {
              e.check_indices(indices<std::int32_t>({3, 2}, {0, 1, 2, 0, 1, 3}));
            }),
            "[embedding] layer \"words\": index 3 at position (2, 1) of the input (shape (3, 2)) is outside [0, 3) "
            "(input_dim=3)");
  EXPECT_NE(invalid_argument_of([&] {
              e.check_indices(indices<std::uint8_t>({3, 2}, {0, 1, 2, 0, 1, 2}));
            }).find("indices must be int32, int64, float32 or float64"),
            std::string::npos);
  EXPECT_NE(invalid_argument_of([&] {
              e.check_indices(indices<std::int32_t>({2, 3}, {0, 1, 2, 0, 1, 2}));
            }).find("expected shape (None, 2), but received input with shape (2, 3)"),
            std::string::npos);
}

TEST(Embedding, BadSizesAndConstraintsAreRefused) {
  EXPECT_EQ(invalid_argument_of([] { Embedding("e", options(0, 4)); }),
            "[embedding] layer \"e\": input_dim must be a positive integer (the vocabulary size), got 0");
  EXPECT_EQ(invalid_argument_of([] { Embedding("e", options(4, -2)); }),
            "[embedding] layer \"e\": output_dim must be a positive integer, got -2");
  EXPECT_NE(invalid_argument_of([] {
              layer_from_config(Json::parse(R"({"class_name": "Embedding", "config": {"name": "e", "input_dim": 4,
                  "output_dim": 2, "embeddings_constraint": {"class_name": "NonNeg", "config": {}}}})"));
            }).find("embeddings_constraint is not supported"),
            std::string::npos);
}

TEST(Embedding, RefusesAnInputGradientSoItMustBeFirst) {
  LayerStack stack;
  stack.add(std::make_shared<Dense>("dense", Dense::Options{3}));
  stack.add(std::make_shared<Embedding>("emb", options(4, 2)));
  stack.build({2}, 1);
  Tensor x({1, 2}, DType::Float32);
  x.fill(0.0);  // the dense output is 0 (zero bias): a valid index
  Tensor y = stack.forward(x, {});
  Tensor dy(y.shape(), DType::Float32);
  dy.fill(1.0);
  EXPECT_NE(invalid_argument_of([&] { stack.backward(dy, nullptr); }).find("must be the first layer"),
            std::string::npos);
}

TEST(Embedding, CloneIsIndependent) {
  Embedding::Options o = options(5, 3);
  o.mask_zero = true;
  o.embeddings_regularizer = "l2";
  Embedding e("emb", o);
  e.build({2}, 3);
  auto copy = e.clone();
  auto* c = dynamic_cast<Embedding*>(copy.get());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->config(), e.config());
  EXPECT_TRUE(c->options().mask_zero);
  ASSERT_EQ(std::memcmp(c->embeddings().value.data<float>(), e.embeddings().value.data<float>(), 15 * sizeof(float)),
            0);
  EXPECT_NE(c->embeddings().value.data<float>(), e.embeddings().value.data<float>());
  const float before = e.embeddings().value.data<float>()[0];
  c->embeddings().value.fill(7.0);
  EXPECT_EQ(e.embeddings().value.data<float>()[0], before);
  // Each keeps its own per-call state: the clone's forward does not change the original's rows.
  const Tensor x = indices<std::int32_t>({1, 2}, {1, 4});
  Tensor y = e.forward(x, {}).clone();
  c->forward(indices<std::int32_t>({1, 2}, {0, 0}), {});
  Tensor dy({1, 2, 3}, DType::Float32);
  dy.fill(1.0);
  e.backward(dy, false);
  EXPECT_EQ(e.embeddings().grad.data<float>()[1 * 3], 1.0f);
  EXPECT_EQ(e.embeddings().grad.data<float>()[0], 0.0f);
  EXPECT_DOUBLE_EQ(c->regularization_loss() > 0, true);
}

TEST(Embedding, ConfigRoundTripsKerasFields) {
  auto layer = layer_from_config(Json::parse(R"({"class_name": "Embedding", "config": {"name": "emb",
      "input_dim": 1000, "output_dim": 64, "mask_zero": true, "embeddings_initializer": "uniform",
      "input_length": 10, "embeddings_constraint": null, "activity_regularizer": null}})"));
  const Json c = layer->config();
  EXPECT_EQ(c.at("input_dim").as_int(), 1000);
  EXPECT_EQ(c.at("output_dim").as_int(), 64);
  EXPECT_TRUE(c.at("mask_zero").as_bool());
  EXPECT_EQ(c.at("embeddings_initializer").at("class_name").as_string(), "RandomUniform");
  EXPECT_TRUE(c.at("embeddings_regularizer").is_null());
  EXPECT_EQ(layer->compute_output_shape({10}), (Shape{10, 64}));
  EXPECT_EQ(layer->compute_output_shape({}), (Shape{64}));
}

}  // namespace
}  // namespace mdtrain
