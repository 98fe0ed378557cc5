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
#include "mdtrain/nn/masking.h"
#include "mdtrain/nn/simple_rnn.h"

namespace mdtrain {
namespace {

using testing::check_layer_gradients;
using testing::random_tensor;

// (batch 3, 4 steps): padding at the end, at the start and in the middle, and a sequence with every step masked.
Tensor step_mask(DType dtype = DType::Float64) {
  Tensor m({4, 4}, dtype);
  const double v[] = {1, 1, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0};
  for (int i = 0; i < 16; ++i) m.data<double>()[i] = v[i];
  return m;
}

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
TEST(LstmGradient, OtherActivationsMatchFiniteDifferences) {
  for (const char* act : {"relu", "linear", "sigmoid"}) {
    SCOPED_TRACE(act);
    RecurrentLayer::Options o;
    o.units = 3;
    o.activation = act;
    o.recurrent_activation = std::string(act) == "sigmoid" ? "tanh" : "sigmoid";
    o.return_sequences = true;
    LSTM layer("l", o);
    layer.build({4, 2}, 5, DType::Float64);
    std::mt19937_64 rng(21);
    for (Parameter* w : layer.parameters()) w->value.copy_from(random_tensor(w->value.shape(), rng, -0.8, 0.8));
    layer.set_input_mask(step_mask());
    check_layer_gradients(layer, random_tensor({4, 4, 2}, rng), ForwardContext{}, 29);
  }
}

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
  o.reset_after = false;  // Keras's bias (3u,)
  GRU before("g", o);
  before.build({7, 3}, 1);
  EXPECT_EQ(before.parameters()[2]->value.shape(), (Shape{12}));
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
  const Json softmax =
      Json::parse(R"({"class_name": "LSTM", "config": {"name": "l", "units": 2, "activation": "softmax"}})");
  EXPECT_THROW(layer_from_config(softmax), std::invalid_argument);
}

template <class Cell>
void check_masked(bool return_sequences, bool go_backwards) {
  RecurrentLayer::Options o;
  o.units = 3;
  o.return_sequences = return_sequences;
  o.go_backwards = go_backwards;
  Cell layer("cell", o);
  layer.build({4, 2}, 5, DType::Float64);
  std::mt19937_64 rng(15);
  for (Parameter* w : layer.parameters()) w->value.copy_from(random_tensor(w->value.shape(), rng, -0.8, 0.8));
  layer.set_input_mask(step_mask());
  check_layer_gradients(layer, random_tensor({4, 4, 2}, rng), ForwardContext{}, 25);
}

TEST(MaskedRecurrent, GradientsMatchFiniteDifferences) {
  for (bool seq : {false, true})
    for (bool back : {false, true}) {
      SCOPED_TRACE(std::string("return_sequences=") + (seq ? "1" : "0") + " go_backwards=" + (back ? "1" : "0"));
      check_masked<LSTM>(seq, back);
      check_masked<GRU>(seq, back);
      check_masked<SimpleRNN>(seq, back);
    }
}

// Keras: a masked step keeps the state and outputs the carried h (zeros before the first read
// step); its input has no effect. The output carries the mask with return_sequences only.
TEST(MaskedRecurrent, MaskedStepsCarryTheStateAndIgnoreTheirInput) {
  RecurrentLayer::Options o;
  o.units = 2;
  o.return_sequences = true;
  LSTM layer("l", o);
  layer.build({4, 2}, 5, DType::Float64);
  std::mt19937_64 rng(16);
  Tensor x = random_tensor({4, 4, 2}, rng);
  const Tensor mask = step_mask();
  layer.set_input_mask(mask);
  const Tensor y = layer.forward(x, ForwardContext{}).clone();
  EXPECT_EQ(layer.output_mask().shape(), (Shape{4, 4}));
  for (std::int64_t b = 0; b < 4; ++b)
    for (std::int64_t t = 0; t < 4; ++t) {
      if (mask.data<double>()[b * 4 + t] != 0) continue;
      for (std::int64_t j = 0; j < 2; ++j) {
        const double prev = t == 0 ? 0.0 : y.data<double>()[(b * 4 + t - 1) * 2 + j];
        EXPECT_EQ(y.data<double>()[(b * 4 + t) * 2 + j], prev) << b << " " << t;
        x.data<double>()[(b * 4 + t) * 2 + j] += 3.0;  // change the masked input
      }
    }
  const Tensor again = layer.forward(x, ForwardContext{});
  for (std::int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(again.data<double>()[i], y.data<double>()[i]) << i;
  o.return_sequences = false;
  LSTM last("l2", o);
  last.build({4, 2}, 5, DType::Float64);
  last.set_input_mask(mask);
  last.forward(x, ForwardContext{});
  EXPECT_FALSE(last.output_mask().defined());
}

TEST(MaskedRecurrent, MaskOfTheWrongShapeNamesTheLayerAndTheShapes) {
  RecurrentLayer::Options o;
  o.units = 2;
  GRU layer("g", o);
  layer.build({4, 2}, 5, DType::Float64);
  layer.set_input_mask(Tensor({4, 3}, DType::Float64));
  std::mt19937_64 rng(17);
  try {
    layer.forward(random_tensor({4, 4, 2}, rng), ForwardContext{});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "[gru] layer \"g\": the mask must be (batch, timesteps) = (4, 4) of its input, got (4, 3)");
  }
}

Json bidirectional_spec(const std::string& merge_mode, bool seq) {
  return Json::parse(std::string(R"({"class_name": "Bidirectional", "config": {"name": "bi", "merge_mode": ")") +
                     merge_mode + R"(", "layer": {"class_name": "GRU", "config": {"name": "l", "units": 3, )" +
                     R"("return_sequences": )" + (seq ? "true" : "false") + "}}}}");
}

TEST(BidirectionalGradient, MergeModesAndMasksMatchFiniteDifferences) {
  for (const char* mode : {"concat", "sum", "mul", "ave"})
    for (bool seq : {false, true})
      for (bool masked : {false, true}) {
        SCOPED_TRACE(std::string(mode) + (seq ? " seq" : "") + (masked ? " masked" : ""));
        auto layer = layer_from_config(bidirectional_spec(mode, seq));
        layer->build({4, 2}, 5, DType::Float64);
        const std::int64_t width = std::string(mode) == "concat" ? 6 : 3;
        EXPECT_EQ(layer->output_shape(), seq ? (Shape{4, width}) : (Shape{width}));
        EXPECT_EQ(layer->config().at("merge_mode").as_string(), mode);
        std::mt19937_64 rng(18);
        for (Parameter* w : layer->parameters()) w->value.copy_from(random_tensor(w->value.shape(), rng, -0.8, 0.8));
        if (masked) dynamic_cast<Bidirectional&>(*layer).set_input_mask(step_mask());
        Tensor x = random_tensor({4, 4, 2}, rng);
        if (masked && seq) {
          // Keras's zero_output_for_mask: zeros at masked steps.
          const Tensor y = layer->forward(x, ForwardContext{});
          for (std::int64_t j = 0; j < width; ++j) EXPECT_EQ(y.data<double>()[2 * width + j], 0.0);
        }
        check_layer_gradients(*layer, x, ForwardContext{}, 26);
      }
  const Json none = Json::parse(R"({"class_name": "Bidirectional", "config": {"name": "bi", "merge_mode": null, )"
                                R"("layer": {"class_name": "GRU", "config": {"name": "l", "units": 3}}}})");
  EXPECT_THROW(layer_from_config(none), std::invalid_argument);
}

// reset_after=false: bias (3u,), hh = tanh(x_h + b_h + (r * h_prev) @ U_h); with masks and recurrent dropout too.
TEST(GruResetBefore, GradientsMatchFiniteDifferences) {
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE(variant);
    RecurrentLayer::Options o;
    o.units = 3;
    o.reset_after = false;
    o.return_sequences = variant != 1;
    o.go_backwards = variant == 2;
    if (variant == 3) {
      o.recurrent_dropout = 0.4;
      o.seed = 5;
    }
    GRU layer("g", o);
    layer.build({4, 2}, 5, DType::Float64);
    EXPECT_EQ(layer.parameters()[2]->value.shape(), (Shape{9}));
    std::mt19937_64 rng(20);
    for (Parameter* w : layer.parameters()) w->value.copy_from(random_tensor(w->value.shape(), rng, -0.8, 0.8));
    if (variant >= 2) layer.set_input_mask(step_mask());
    check_layer_gradients(layer, random_tensor({4, 4, 2}, rng), ForwardContext{variant == 3, 2, 0}, 28);
  }
}

TEST(Masking, ZeroesPaddingStepsAndGivesTheMask) {
  Masking layer("m", 0.5);
  layer.build({3, 2}, 1, DType::Float64);
  Tensor x({2, 3, 2}, DType::Float64);
  const double v[] = {0.5, 0.5, 1, 0.5, 2, 3, 0.5, 0.5, 0.5, 0.5, 0.5, 4};
  for (int i = 0; i < 12; ++i) x.data<double>()[i] = v[i];
  const Tensor y = layer.forward(x, ForwardContext{});
  const double want[] = {0, 0, 1, 0.5, 2, 3, 0, 0, 0, 0, 0.5, 4};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(y.data<double>()[i], want[i]) << i;
  const Tensor m = layer.output_mask();
  const double want_mask[] = {0, 1, 1, 0, 0, 1};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(m.data<double>()[i], want_mask[i]) << i;
  // dL/dx is dL/dy at the steps kept, zero at padding (finite differences would move the values off mask_value).
  Tensor dy({2, 3, 2}, DType::Float64);
  for (int i = 0; i < 12; ++i) dy.data<double>()[i] = i + 1;
  const Tensor dx = layer.backward(dy, true);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(dx.data<double>()[i], want_mask[i / 2] * (i + 1)) << i;
  EXPECT_EQ(layer_from_config(Json::parse(R"({"class_name": "Masking", "config": {"name": "m"}})"))->class_name(),
            "Masking");
}

}  // namespace
}  // namespace mdtrain
