// SimpleRNN, LSTM, GRU (nn/recurrent_layer.h): backward through time against float64 finite differences for every
// option, Keras's weight shapes and initial values, and the errors it names. (Outputs and gradients against Keras/TF
// itself: tests/py/test_rnn.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "gradient_check.h"
#include "mdtrain/nn/layer_factory.h"
#include "mdtrain/nn/bidirectional.h"
#include "mdtrain/nn/gru.h"
#include "mdtrain/nn/lstm.h"
#include "mdtrain/nn/simple_rnn.h"

namespace mdtrain {
namespace {

using testing::check_layer_gradients;
using testing::random_tensor;

struct LstmCase {
  bool return_sequences, go_backwards, use_bias, regularized;
};

class LstmGradient : public ::testing::TestWithParam<LstmCase> {};

TEST_P(LstmGradient, MatchesFiniteDifferences) {
  const LstmCase p = GetParam();
  LSTM::Options o;
  o.units = 3;
  o.return_sequences = p.return_sequences;
  o.go_backwards = p.go_backwards;
  o.use_bias = p.use_bias;
  if (p.regularized) {
    o.kernel_regularizer = "l2";
    o.recurrent_regularizer = "l1";
  }
  LSTM layer("lstm", o);
  layer.build({4, 2}, 5, DType::Float64);
  std::mt19937_64 rng(11);
  // Weights away from the initial ones so every gate matters.
  for (Parameter* w : layer.parameters()) w->value.copy_from(random_tensor(w->value.shape(), rng, -0.8, 0.8));
  EXPECT_EQ(check_layer_gradients(layer, random_tensor({3, 4, 2}, rng), ForwardContext{}, 21, p.regularized),
            p.use_bias ? 3u : 2u);
}

INSTANTIATE_TEST_SUITE_P(Options, LstmGradient,
                         ::testing::Values(LstmCase{false, false, true, false}, LstmCase{true, false, true, false},
                                           LstmCase{false, true, true, false}, LstmCase{true, true, false, false},
                                           LstmCase{true, false, true, true}));

template <class Cell>
void check_cell(const LstmCase& p, const char* activation = "tanh") {
  RecurrentLayer::Options o;
  o.units = 3;
  o.activation = activation;
  o.return_sequences = p.return_sequences;
  o.go_backwards = p.go_backwards;
  o.use_bias = p.use_bias;
  if (p.regularized) {
    o.kernel_regularizer = "l2";
    o.bias_regularizer = "l1";
  }
  Cell layer("cell", o);
  layer.build({4, 2}, 5, DType::Float64);
  std::mt19937_64 rng(12);
  for (Parameter* w : layer.parameters()) w->value.copy_from(random_tensor(w->value.shape(), rng, -0.8, 0.8));
  EXPECT_EQ(check_layer_gradients(layer, random_tensor({3, 4, 2}, rng), ForwardContext{}, 22, p.regularized),
            p.use_bias ? 3u : 2u);
}

TEST_P(LstmGradient, GruMatchesFiniteDifferences) { check_cell<GRU>(GetParam()); }
TEST_P(LstmGradient, SimpleRnnMatchesFiniteDifferences) { check_cell<SimpleRNN>(GetParam()); }
TEST(SimpleRnnGradient, ReluAndSigmoidMatchFiniteDifferences) {
  check_cell<SimpleRNN>({true, false, true, false}, "relu");
  check_cell<SimpleRNN>({false, true, true, false}, "sigmoid");
}

// Training with dropout and recurrent_dropout: the masks are fixed by (seed, step, row), so the
// finite differences see the same masks as backward.
template <class Cell>
void check_dropout(std::int64_t first_row) {
  RecurrentLayer::Options o;
  o.units = 3;
  o.return_sequences = true;
  o.dropout = 0.4;
  o.recurrent_dropout = 0.3;
  o.seed = 17;
  Cell layer("cell", o);
  layer.build({4, 2}, 5, DType::Float64);
  std::mt19937_64 rng(13);
  for (Parameter* w : layer.parameters()) w->value.copy_from(random_tensor(w->value.shape(), rng, -0.8, 0.8));
  check_layer_gradients(layer, random_tensor({5, 4, 2}, rng), ForwardContext{true, 3, first_row}, 23);
}

TEST(RecurrentDropout, GradientsMatchFiniteDifferences) {
  check_dropout<LSTM>(0);
  check_dropout<GRU>(7);
  check_dropout<SimpleRNN>(2);
}

TEST(RecurrentDropout, MasksDependOnTheGlobalRowNotTheSplit) {
  RecurrentLayer::Options o;
  o.units = 3;
  o.return_sequences = true;
  o.dropout = 0.5;
  o.recurrent_dropout = 0.5;
  o.seed = 3;
  LSTM whole("l", o);
  whole.build({4, 2}, 5);
  auto part = whole.clone();
  std::mt19937_64 rng(1);
  Tensor x = random_tensor({6, 4, 2}, rng, -1, 1, DType::Float32);
  Tensor all = whole.forward(x, ForwardContext{true, 9, 0}).clone();
  Tensor rows = part->forward(x.rows(4, 6), ForwardContext{true, 9, 4});
  for (std::int64_t i = 0; i < rows.numel(); ++i)
    EXPECT_EQ(rows.data<float>()[i], all.data<float>()[4 * 4 * 3 + i]) << i;
  // Inference ignores dropout; another step draws other masks.
  Tensor eval = whole.forward(x, ForwardContext{false, 9, 0}).clone();
  Tensor other = whole.forward(x, ForwardContext{true, 10, 0});
  bool differs_eval = false, differs_step = false;
  for (std::int64_t i = 0; i < all.numel(); ++i) {
    differs_eval |= eval.data<float>()[i] != all.data<float>()[i];
    differs_step |= other.data<float>()[i] != all.data<float>()[i];
  }
  EXPECT_TRUE(differs_eval);
  EXPECT_TRUE(differs_step);
}

TEST(BidirectionalGradient, MatchesFiniteDifferences) {
  for (bool seq : {false, true}) {
    const Json spec = Json::parse(std::string(R"({"class_name": "Bidirectional", "config": {"name": "bi", "layer": )") +
                                  R"({"class_name": "LSTM", "config": {"name": "l", "units": 3, "return_sequences": )" +
                                  (seq ? "true" : "false") + "}}}}");
    auto layer = layer_from_config(spec);
    layer->build({4, 2}, 5, DType::Float64);
    EXPECT_EQ(layer->output_shape(), seq ? (Shape{4, 6}) : (Shape{6}));
    std::mt19937_64 rng(14);
    for (Parameter* w : layer->parameters()) w->value.copy_from(random_tensor(w->value.shape(), rng, -0.8, 0.8));
    EXPECT_EQ(layer->parameters().size(), 6u);
    EXPECT_EQ(layer->parameters()[3]->name, "backward_l/kernel");
    check_layer_gradients(*layer, random_tensor({3, 4, 2}, rng), ForwardContext{}, 24);
  }
}

TEST(Gru, WeightsHaveKerasShapes) {
  GRU::Options o;
  o.units = 4;
  GRU layer("gru", o);
  layer.build({7, 3}, 1);
  auto params = layer.parameters();
  ASSERT_EQ(params.size(), 3u);
  EXPECT_EQ(params[0]->value.shape(), (Shape{3, 12}));
  EXPECT_EQ(params[1]->value.shape(), (Shape{4, 12}));
  EXPECT_EQ(params[2]->value.shape(), (Shape{2, 12}));
  o.reset_after = false;
  EXPECT_THROW(GRU("g", o), std::invalid_argument);
}

TEST(Lstm, WeightsHaveKerasShapesAndInitialValues) {
  LSTM::Options o;
  o.units = 4;
  LSTM layer("lstm", o);
  layer.build({7, 3}, 1);
  auto params = layer.parameters();
  ASSERT_EQ(params.size(), 3u);
  EXPECT_EQ(params[0]->value.shape(), (Shape{3, 16}));
  EXPECT_EQ(params[1]->value.shape(), (Shape{4, 16}));
  EXPECT_EQ(params[2]->value.shape(), (Shape{16}));
  EXPECT_EQ(params[1]->name, "lstm/recurrent_kernel");
  for (int j = 0; j < 16; ++j) EXPECT_EQ(params[2]->value.data<float>()[j], j >= 4 && j < 8 ? 1.0f : 0.0f) << j;
  // Orthogonal (4, 16): orthonormal rows.
  const float* r = params[1]->value.data<float>();
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      double s = 0;
      for (int k = 0; k < 16; ++k) s += static_cast<double>(r[a * 16 + k]) * r[b * 16 + k];
      EXPECT_NEAR(s, a == b ? 1.0 : 0.0, 1e-5);
    }
  EXPECT_EQ(layer.output_shape(), (Shape{4}));
}

TEST(Lstm, InputOfTheWrongRankNamesTheLayerAndTheShape) {
  LSTM::Options o;
  o.units = 2;
  LSTM layer("seq", o);
  try {
    layer.build({5}, 1);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "[lstm] Input 0 of layer \"seq\" is incompatible with the layer: expected ndim=3 (batch, timesteps, "
                 "features), found ndim=2. Full shape received: (None, 5)");
  }
}

TEST(Lstm, UnsupportedOptionsAreRefusedByName) {
  for (const char* field : {R"("dropout": 1.5)", R"("return_state": true)", R"("stateful": true)"}) {
    const Json spec =
        Json::parse(std::string(R"({"class_name": "LSTM", "config": {"name": "l", "units": 2, )") + field + "}}");
    EXPECT_THROW(layer_from_config(spec), std::invalid_argument) << field;
  }
  const Json relu = Json::parse(R"({"class_name": "LSTM", "config": {"name": "l", "units": 2, "activation": "relu"}})");
  EXPECT_THROW(layer_from_config(relu), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain
