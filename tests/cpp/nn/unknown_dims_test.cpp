// Layers built for unknown dimensions (core/shape.h: Keras's None, a variable-length time axis):
// one layer built once for (None, features) runs batches of several lengths, and each forward and
// backward is bitwise that of the same layer built for that exact length with the same weights.
// Also: the shapes they declare, a LayerStack of them, and the refusals (layers whose weights or
// geometry need the axis, merges, several packed inputs).
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/nn/layer_factory.h"
#include "mdtrain/nn/layer_graph.h"
#include "mdtrain/nn/layer_stack.h"
#include "gradient_check.h"

namespace mdtrain {
namespace {

using testing::random_tensor;

constexpr std::int64_t N = kUnknownDim;

std::shared_ptr<Layer> make(const std::string& spec) { return layer_from_config(Json::parse(spec)); }

std::string invalid_argument_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "<no std::invalid_argument>";
}

void expect_bitwise(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (std::int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<double>()[i], b.data<double>()[i]) << what << " @" << i;
}

// Builds `spec` once for `declared` and, for each length, once more for the exact shape with the
// variable layer's weights; the forward output, input gradient and weight gradients must agree.
void expect_same_as_exact_builds(const std::string& spec, const Shape& declared, const std::vector<Shape>& exact) {
  auto variable = make(spec);
  variable->build(declared, 7, DType::Float64);
  std::mt19937_64 rng(11);
  for (const Shape& shape : exact) {
    auto fixed = make(spec);
    fixed->build(shape, 7, DType::Float64);
    auto pv = variable->parameters(), pf = fixed->parameters();
    ASSERT_EQ(pv.size(), pf.size());
    for (std::size_t i = 0; i < pv.size(); ++i) pf[i]->value.copy_from(pv[i]->value);
    Shape batch{3};
    batch.insert(batch.end(), shape.begin(), shape.end());
    const Tensor x = random_tensor(batch, rng);
    const ForwardContext ctx;
    const Tensor yv = variable->forward(x, ctx).clone(), yf = fixed->forward(x, ctx).clone();
    const std::string what = spec + " at " + to_string(shape);
    expect_bitwise(yv, yf, what + " forward");
    const Tensor dy = random_tensor(yv.shape(), rng);
    expect_bitwise(variable->backward(dy, true), fixed->backward(dy, true), what + " input gradient");
    for (std::size_t i = 0; i < pv.size(); ++i) expect_bitwise(pv[i]->grad, pf[i]->grad, what + " " + pv[i]->name);
  }
}

TEST(UnknownDims, RecurrentLayersRunEachLengthAsAnExactBuild) {
  for (const char* cls : {"LSTM", "GRU", "SimpleRNN"})
    for (const char* seq : {"true", "false"})
      expect_same_as_exact_builds(std::string(R"({"class_name": ")") + cls +
                                      R"(", "config": {"name": "r", "units": 4, "return_sequences": )" + seq + "}}",
                                  {N, 3}, {{5, 3}, {2, 3}, {9, 3}});
  expect_same_as_exact_builds(R"({"class_name": "Bidirectional", "config": {"name": "bi", "layer":
      {"class_name": "LSTM", "config": {"name": "l", "units": 3, "return_sequences": true}}}})",
                              {N, 2}, {{4, 2}, {6, 2}});
}

TEST(UnknownDims, WindowLayersFitTheirGeometryToEachBatch) {
  expect_same_as_exact_builds(
      R"({"class_name": "Conv1D", "config": {"name": "c", "filters": 3, "kernel_size": 3, "padding": "causal",
          "dilation_rate": 2}})",
      {N, 2}, {{8, 2}, {5, 2}, {13, 2}});
  expect_same_as_exact_builds(
      R"({"class_name": "Conv1D", "config": {"name": "c", "filters": 2, "kernel_size": 2, "strides": 2}})", {N, 3},
      {{7, 3}, {4, 3}});
  expect_same_as_exact_builds(
      R"({"class_name": "MaxPooling1D", "config": {"name": "p", "pool_size": 3, "strides": 2, "padding": "same"}})",
      {N, 2}, {{7, 2}, {4, 2}});
  expect_same_as_exact_builds(R"({"class_name": "AveragePooling1D", "config": {"name": "p"}})", {N, 2},
                              {{6, 2}, {9, 2}});
  expect_same_as_exact_builds(R"({"class_name": "Conv2D", "config": {"name": "c", "filters": 2, "kernel_size": 3,
                                  "padding": "same"}})",
                              {N, N, 2}, {{5, 4, 2}, {3, 6, 2}});
  expect_same_as_exact_builds(R"({"class_name": "GlobalAveragePooling1D", "config": {"name": "g"}})", {N, 3},
                              {{4, 3}, {7, 3}});
  expect_same_as_exact_builds(R"({"class_name": "GlobalMaxPooling1D", "config": {"name": "g"}})", {N, 3},
                              {{4, 3}, {7, 3}});
}

TEST(UnknownDims, RowWiseLayersTakeAnyLeadingAxes) {
  expect_same_as_exact_builds(R"({"class_name": "Dense", "config": {"name": "d", "units": 3, "activation": "tanh"}})",
                              {N, 4}, {{2, 4}, {5, 4}});
  expect_same_as_exact_builds(R"({"class_name": "LayerNormalization", "config": {"name": "n"}})", {N, 4},
                              {{3, 4}, {6, 4}});
  expect_same_as_exact_builds(R"({"class_name": "Activation", "config": {"name": "a", "activation": "softmax"}})",
                              {N, 4}, {{3, 4}, {1, 4}});
}

TEST(UnknownDims, DeclaredShapesKeepTheUnknownAxis) {
  EXPECT_EQ(make(R"({"class_name": "Embedding", "config": {"name": "e", "input_dim": 9, "output_dim": 4}})")
                ->compute_output_shape({N}),
            (Shape{N, 4}));
  EXPECT_EQ(make(R"({"class_name": "Conv1D", "config": {"name": "c", "filters": 5, "kernel_size": 3}})")
                ->compute_output_shape({N, 2}),
            (Shape{N, 5}));
  EXPECT_EQ(make(R"({"class_name": "LSTM", "config": {"name": "l", "units": 6}})")->compute_output_shape({N, 2}),
            (Shape{6}));
  EXPECT_EQ(to_string(Shape{N, 4}), "(None, 4)");
}

TEST(UnknownDims, AStackBuiltOnceRunsSequencesOfEveryLength) {
  LayerStack stack;
  stack.add(make(R"({"class_name": "Embedding", "config": {"name": "e", "input_dim": 9, "output_dim": 4,
                   "mask_zero": true}})"));
  stack.add(make(R"({"class_name": "LSTM", "config": {"name": "l", "units": 3}})"));
  stack.add(make(R"({"class_name": "Dense", "config": {"name": "d", "units": 1}})"));
  stack.build({N}, 5, DType::Float32);
  EXPECT_EQ(stack.input_shape(), (Shape{N}));
  EXPECT_EQ(stack.output_shape(), (Shape{1}));
  // Trailing zeros are masked: a sequence's output does not depend on how far it was padded.
  Tensor short_x({2, 3}, DType::Int32), long_x({2, 6}, DType::Int32);
  const int ids[2][3] = {{3, 1, 4}, {5, 2, 0}};
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t < 6; ++t) {
      if (t < 3) short_x.data<std::int32_t>()[r * 3 + t] = ids[r][t];
      long_x.data<std::int32_t>()[r * 6 + t] = t < 3 ? ids[r][t] : 0;
    }
  const Tensor a = stack.forward(short_x, {}).clone(), b = stack.forward(long_x, {}).clone();
  ASSERT_EQ(a.shape(), (Shape{2, 1}));
  for (int i = 0; i < 2; ++i) EXPECT_FLOAT_EQ(a.data<float>()[i], b.data<float>()[i]);
}

TEST(UnknownDims, LayersThatNeedTheAxisRefuseByName) {
  EXPECT_NE(invalid_argument_of([] {
              make(R"({"class_name": "Flatten", "config": {"name": "f"}})")->build({N, 4}, 1);
            }).find(R"("f" (Flatten) needs every dimension of its input known, got input shape (None, 4))"),
            std::string::npos);
  EXPECT_NE(
      invalid_argument_of([] {
        make(R"({"class_name": "Dense", "config": {"name": "d", "units": 2}})")->build({3, N}, 1);
      }).find(R"("d" (Dense) needs axis 2 of its input known (the kernel's rows), got input shape (None, 3, None))"),
      std::string::npos);
  EXPECT_NE(invalid_argument_of([] {
              make(R"({"class_name": "LSTM", "config": {"name": "l", "units": 2}})")->build({4, N}, 1);
            }).find("needs axis 2 of its input known"),
            std::string::npos);
  EXPECT_NE(invalid_argument_of([] {
              LayerGraph graph({{N, 3}, {3}});
            }).find("2 inputs needs every dimension"),
            std::string::npos);
  const std::string too_short = invalid_argument_of([] {
    auto conv = make(R"({"class_name": "Conv1D", "config": {"name": "c", "filters": 2, "kernel_size": 4}})");
    conv->build({N, 1}, 1, DType::Float64);
    conv->forward(Tensor::zeros({1, 2, 1}, DType::Float64), {});
  });
  EXPECT_NE(too_short.find("\"c\""), std::string::npos) << too_short;
}

}  // namespace
}  // namespace mdtrain
