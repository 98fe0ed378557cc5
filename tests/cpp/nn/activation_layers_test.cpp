// Keras's activation layers with arguments (ReLU, LeakyReLU, ELU, PReLU, Softmax) and
// UnitNormalization, made from their Keras configs as model files make them: forward values
// against the formulas written here in float64, gradients against central differences, the
// derivative at the kinks, configs, tensor-parallel forms, masks, and the bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "mdtrain/nn/layer_factory.h"
#include "mdtrain/nn/prelu.h"
#include "mdtrain/nn/sequence_mask.h"
#include "mdtrain/ops/over_axes.h"

namespace mdtrain {
namespace {

using namespace testing;

std::unique_ptr<Layer> make(const std::string& cls, const std::string& fields) {
  return layer_from_config(Json::parse(R"({"class_name": ")" + cls + R"(", "config": {"name": "l")" +
                                       (fields.empty() ? "" : ", ") + fields + "}}"));
}

std::string invalid_argument_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<wrong exception type> ") + e.what();
  }
  return "<no exception>";
}

#define EXPECT_CONTAINS(s, part) \
  EXPECT_NE((s).find(part), std::string::npos) << "message: " << (s) << "\nexpected: " << (part)

Shape with_batch(std::int64_t batch, const Shape& s) {
  Shape full{batch};
  full.insert(full.end(), s.begin(), s.end());
  return full;
}

// Keras's formulas (keras/src/layers/activations/*.py), per element, in float64.
double keras_relu(double x, double slope, double max_value, double threshold) {
  if (x >= max_value) return max_value;
  if (x >= threshold) return x;
  return slope * (x - threshold);
}

struct ElementCase {
  std::string cls, fields;
  std::function<double(double)> formula;
};

std::vector<ElementCase> element_cases() {
  const double inf = INFINITY;
  return {
      {"ReLU", "", [=](double x) { return keras_relu(x, 0, inf, 0); }},
      {"ReLU", R"("max_value": 1.5, "negative_slope": 0.25, "threshold": 0.5)",
       [](double x) { return keras_relu(x, 0.25, 1.5, 0.5); }},
      {"ReLU", R"("max_value": 6, "negative_slope": 0.1)", [](double x) { return keras_relu(x, 0.1, 6, 0); }},
      {"ReLU", R"("threshold": 0.3)", [=](double x) { return keras_relu(x, 0, inf, 0.3); }},
      {"ReLU", R"("max_value": 0.2, "threshold": 0.6)", [](double x) { return x > 0.6 ? 0.2 : 0.0; }},
      {"LeakyReLU", "", [](double x) { return x >= 0 ? x : 0.3 * x; }},
      {"LeakyReLU", R"("negative_slope": 0.05)", [](double x) { return x >= 0 ? x : 0.05 * x; }},
      {"LeakyReLU", R"("alpha": 0.7)", [](double x) { return x >= 0 ? x : 0.7 * x; }},  // Keras 2's name
      {"ELU", "", [](double x) { return x >= 0 ? x : std::exp(x) - 1; }},
      {"ELU", R"("alpha": 0.4)", [](double x) { return x >= 0 ? x : 0.4 * (std::exp(x) - 1); }},
      {"ELU", R"("alpha": -1.5)", [](double x) { return x >= 0 ? x : -1.5 * (std::exp(x) - 1); }},
  };
}

TEST(ActivationLayers, ElementWiseLayersComputeKerassFormulasAndTheirGradients) {
  std::mt19937_64 rng(3);
  for (const auto& c : element_cases()) {
    SCOPED_TRACE(c.cls + " {" + c.fields + "}");
    auto layer = make(c.cls, c.fields);
    layer->build({4, 5}, 0, DType::Float64);
    EXPECT_TRUE(layer->has_cuda_kernels());
    EXPECT_EQ(layer->tensor_parallel_form(), Layer::TensorParallelForm::Elementwise);
    EXPECT_TRUE(passes_mask(*layer));
    EXPECT_TRUE(layer->parameters().empty());
    Tensor x = random_tensor({3, 4, 5}, rng, -3.0, 3.0);
    const Tensor y = layer->forward(x, ForwardContext{});
    for (std::int64_t i = 0; i < x.numel(); ++i)
      ASSERT_NEAR(y.data<double>()[i], c.formula(x.data<double>()[i]), 1e-15) << "element " << i;
    // Random points are away from the kinks (by far more than the step of the differences).
    check_layer_gradients(*layer, x, ForwardContext{}, 11);
  }
}

TEST(ActivationLayers, FloatOutputsAreTheFloat64FormulaRounded) {
  std::mt19937_64 rng(4);
  for (const auto& c : element_cases()) {
    SCOPED_TRACE(c.cls + " {" + c.fields + "}");
    auto layer = make(c.cls, c.fields);
    layer->build({7}, 0, DType::Float32);
    const Tensor x = random_tensor({6, 7}, rng, -3.0, 3.0, DType::Float32);
    const Tensor y = layer->forward(x, ForwardContext{});
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const double want = c.formula(x.data<float>()[i]);
      ASSERT_NEAR(y.data<float>()[i], want, 2e-7 * std::max(1.0, std::fabs(want))) << "element " << i;
    }
  }
}

// TF's derivative where the formula has a kink, on each path Keras's relu takes (the Python tests
// compare these with TF's GradientTape).
TEST(ActivationLayers, DerivativesAtTheKinksAreTfs) {
  struct Kink {
    std::string cls, fields;
    double x, dydx;
  };
  const std::vector<Kink> kinks = {
      {"ReLU", "", 0.0, 0.0},
      {"LeakyReLU", R"("negative_slope": 0.2)", 0.0, 0.2},  // TF's LeakyReluGrad: x > 0 ? 1 : slope
      {"ReLU", R"("negative_slope": 0.2)", 0.0, 0.2},       // the same path
      {"ReLU", R"("negative_slope": 0.2, "threshold": 0.5)", 0.5, 0.0},
      {"ReLU", R"("negative_slope": 0.2, "max_value": 2.0)", 0.0, 0.0},
      {"ReLU", R"("max_value": 2.0)", 2.0, 1.0},  // tf.clip_by_value's minimum passes x == max
      {"ReLU", R"("max_value": 6.0)", 6.0, 0.0},  // relu6: 0 < x < 6 only
      {"ReLU", R"("max_value": 6.0, "threshold": 1.0)", 6.0, 1.0},
      {"ELU", R"("alpha": 0.5)", 0.0, 0.5},
  };
  for (const auto& k : kinks) {
    SCOPED_TRACE(k.cls + " {" + k.fields + "} at " + std::to_string(k.x));
    auto layer = make(k.cls, k.fields);
    layer->build({1}, 0, DType::Float64);
    Tensor x({1, 1}, DType::Float64);
    x.data<double>()[0] = k.x;
    layer->forward(x, ForwardContext{});
    Tensor dy({1, 1}, DType::Float64);
    dy.data<double>()[0] = 1.0;
    EXPECT_EQ(layer->backward(dy, true).data<double>()[0], k.dydx);
  }
}

// The index of each element of a tensor of `shape` (row-major).
std::vector<std::int64_t> index_of(std::int64_t i, const Shape& shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

// Whether elements i and j of `shape` lie on one row along `axes` (they differ only on those).
bool same_row(std::int64_t i, std::int64_t j, const Shape& shape, const std::vector<int>& axes) {
  const auto a = index_of(i, shape), b = index_of(j, shape);
  for (std::size_t d = 0; d < shape.size(); ++d) {
    bool reduced = false;
    for (int ax : axes) reduced = reduced || ax == static_cast<int>(d);
    if (!reduced && a[d] != b[d]) return false;
  }
  return true;
}

struct AxesCase {
  std::string axis;       // the config's "axis"
  Shape input;            // batch excluded
  std::vector<int> axes;  // resolved, batch counted
};

std::vector<AxesCase> axes_cases() {
  return {
      {"-1", {3, 4}, {2}},     {"1", {3, 4}, {1}},     {"[1, 2]", {3, 4}, {1, 2}},      {"[-1, 1]", {2, 3, 4}, {1, 3}},
      {"[2]", {2, 3, 4}, {2}}, {"-2", {2, 1, 5}, {2}}, {"[3, 1]", {2, 3, 2, 2}, {1, 3}}};
}

TEST(ActivationLayers, SoftmaxOverAnyAxesIsTheFormulaAndItsGradient) {
  std::mt19937_64 rng(6);
  for (const auto& c : axes_cases()) {
    SCOPED_TRACE("axis " + c.axis);
    auto layer = make("Softmax", R"("axis": )" + c.axis);
    layer->build(c.input, 0, DType::Float64);
    const Shape shape = with_batch(3, c.input);
    Tensor x = random_tensor(shape, rng, -4.0, 4.0);
    const Tensor y = layer->forward(x, ForwardContext{}).clone();
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      double s = 0;
      for (std::int64_t j = 0; j < x.numel(); ++j)
        if (same_row(i, j, shape, c.axes)) s += std::exp(x.data<double>()[j]);
      ASSERT_NEAR(y.data<double>()[i], std::exp(x.data<double>()[i]) / s, 1e-15) << "element " << i;
    }
    check_layer_gradients(*layer, x, ForwardContext{}, 12);
    const bool last = c.axes.back() == static_cast<int>(c.input.size());
    EXPECT_EQ(layer->tensor_parallel_form(),
              last ? Layer::TensorParallelForm::None : Layer::TensorParallelForm::Elementwise);
    EXPECT_EQ(layer->output_activation(), c.axes.size() == 1 && last ? Activation::Softmax : Activation::Linear);
  }
}

TEST(ActivationLayers, SoftmaxOverTheLastAxisHasActivationSoftmaxsBits) {
  std::mt19937_64 rng(7);
  auto softmax = make("Softmax", "");
  auto activation = make("Activation", R"("activation": "softmax")");
  softmax->build({3, 6}, 0);
  activation->build({3, 6}, 0);
  const Tensor x = random_tensor({5, 3, 6}, rng, -5.0, 5.0, DType::Float32);
  const Tensor a = softmax->forward(x, ForwardContext{}), b = activation->forward(x, ForwardContext{});
  for (std::int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]) << i;
  const Tensor g = random_tensor({5, 3, 6}, rng, -1.0, 1.0, DType::Float32);
  const Tensor da = softmax->backward(g, true), db = activation->backward(g, true);
  for (std::int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(da.data<float>()[i], db.data<float>()[i]) << i;
  // The engine may take a crossentropy from its logits, as Keras does.
  EXPECT_EQ(softmax->output_activation(), Activation::Softmax);
}

TEST(ActivationLayers, UnitNormalizationIsKeras3sFormulaAndItsGradient) {
  std::mt19937_64 rng(8);
  for (const auto& c : axes_cases()) {
    SCOPED_TRACE("axis " + c.axis);
    auto layer = make("UnitNormalization", R"("axis": )" + c.axis);
    layer->build(c.input, 0, DType::Float64);
    EXPECT_TRUE(passes_mask(*layer));
    const Shape shape = with_batch(3, c.input);
    Tensor x = random_tensor(shape, rng, -2.0, 2.0);
    const Tensor y = layer->forward(x, ForwardContext{}).clone();
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      double s = 0;
      for (std::int64_t j = 0; j < x.numel(); ++j)
        if (same_row(i, j, shape, c.axes)) s += x.data<double>()[j] * x.data<double>()[j];
      ASSERT_NEAR(y.data<double>()[i], x.data<double>()[i] / std::sqrt(s), 1e-15) << "element " << i;
    }
    check_layer_gradients(*layer, x, ForwardContext{}, 13);
    const bool last = c.axes.back() == static_cast<int>(c.input.size());
    EXPECT_EQ(layer->tensor_parallel_form(),
              last ? Layer::TensorParallelForm::None : Layer::TensorParallelForm::Elementwise);
  }
}

// Keras 3: x * min(rsqrt(sum x^2), 1 / 1e-12): a zero row stays zero, a tiny one is scaled by
// 1e12 with the constant's gradient.
TEST(ActivationLayers, UnitNormalizationCapsTheScaleOfTinyRows) {
  auto layer = make("UnitNormalization", "");
  layer->build({2}, 0, DType::Float64);
  Tensor x({3, 2}, DType::Float64);
  const double values[] = {0.0, 0.0, 3e-13, -4e-13, 3e-11, 4e-11};
  for (int i = 0; i < 6; ++i) x.data<double>()[i] = values[i];
  const Tensor y = layer->forward(x, ForwardContext{}).clone();
  EXPECT_EQ(y.data<double>()[0], 0.0);
  EXPECT_EQ(y.data<double>()[1], 0.0);
  EXPECT_DOUBLE_EQ(y.data<double>()[2], 3e-13 * 1e12);  // norm 5e-13 < 1e-12: capped
  EXPECT_DOUBLE_EQ(y.data<double>()[3], -4e-13 * 1e12);
  EXPECT_DOUBLE_EQ(y.data<double>()[4], 0.6);  // norm 5e-11: unit norm
  EXPECT_DOUBLE_EQ(y.data<double>()[5], 0.8);
  Tensor dy({3, 2}, DType::Float64);
  for (int i = 0; i < 6; ++i) dy.data<double>()[i] = 1.0;
  const Tensor dx = layer->backward(dy, true);
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(dx.data<double>()[i], 1e12) << i;
}

TEST(ActivationLayers, PreluComputesItsFormulaWithAlphaInKerassLayout) {
  struct Case {
    std::string shared;
    Shape input, alpha;
  };
  const std::vector<Case> cases = {
      {"null", {3, 4}, {3, 4}},         {"[1]", {3, 4}, {1, 4}},          {"2", {3, 4}, {3, 1}},
      {"[1, 2]", {2, 3, 4}, {1, 1, 4}}, {"[1, 3]", {2, 3, 4}, {1, 3, 1}}, {"[1, 2, 3]", {2, 3, 4}, {1, 1, 1}}};
  std::mt19937_64 rng(9);
  for (const auto& c : cases) {
    SCOPED_TRACE("shared_axes " + c.shared);
    auto layer = make("PReLU", R"("shared_axes": )" + c.shared);
    layer->build(c.input, 0, DType::Float64);
    EXPECT_EQ(layer->tensor_parallel_form(), Layer::TensorParallelForm::None);
    EXPECT_TRUE(passes_mask(*layer));
    auto params = layer->parameters();
    ASSERT_EQ(params.size(), 1u);
    EXPECT_EQ(params[0]->name, "l/alpha");
    ASSERT_EQ(params[0]->value.shape(), c.alpha);
    for (std::int64_t i = 0; i < params[0]->value.numel(); ++i) EXPECT_EQ(params[0]->value.data<double>()[i], 0.0);
    params[0]->value.copy_from(random_tensor(c.alpha, rng, -0.5, 0.8));
    const Shape shape = with_batch(4, c.input);
    Tensor x = random_tensor(shape, rng, -2.0, 2.0);
    const Tensor y = layer->forward(x, ForwardContext{}).clone();
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const auto idx = index_of(i, shape);
      std::int64_t a = 0;  // alpha's element: the index without the batch, 0 on the shared axes
      for (std::size_t d = 0; d < c.alpha.size(); ++d) a = a * c.alpha[d] + (c.alpha[d] == 1 ? 0 : idx[d + 1]);
      const double v = x.data<double>()[i];
      ASSERT_EQ(y.data<double>()[i], v > 0 ? v : params[0]->value.data<double>()[a] * v) << "element " << i;
    }
    EXPECT_EQ(check_layer_gradients(*layer, x, ForwardContext{}, 14), 1u);
  }
}

TEST(ActivationLayers, PreluTakesAnInitializerAndARegularizer) {
  auto layer = make("PReLU", R"("alpha_initializer": "ones", "alpha_regularizer": {"class_name": "L2", "config": )"
                             R"({"l2": 0.5}}, "shared_axes": [1])");
  layer->build({3, 2}, 0, DType::Float64);
  auto& alpha = dynamic_cast<PReLU&>(*layer).alpha();
  for (std::int64_t i = 0; i < alpha.value.numel(); ++i) EXPECT_EQ(alpha.value.data<double>()[i], 1.0);
  EXPECT_DOUBLE_EQ(layer->regularization_loss(), 0.5 * 2);
  std::mt19937_64 rng(10);
  check_layer_gradients(*layer, random_tensor({3, 3, 2}, rng), ForwardContext{}, 15, true);
  auto copy = layer->clone();
  EXPECT_EQ(copy->parameters()[0]->value.data<double>()[1], 1.0);
  EXPECT_NE(copy->parameters()[0]->value.data<double>(), alpha.value.data<double>());
}

TEST(ActivationLayers, ConfigsAreKerassAndRoundTrip) {
  const std::vector<std::pair<std::string, std::string>> specs = {
      {"ReLU", R"("max_value": null, "negative_slope": 0.0, "threshold": 0.0)"},
      {"ReLU", R"("max_value": 2.5, "negative_slope": 0.5, "threshold": 1.0)"},
      {"LeakyReLU", R"("negative_slope": 0.3)"},
      {"ELU", R"("alpha": 1.0)"},
      {"Softmax", R"("axis": -1)"},
      {"Softmax", R"("axis": [1, 3])"},
      {"UnitNormalization", R"("axis": [-1])"},
  };
  for (const auto& [cls, fields] : specs) {
    SCOPED_TRACE(cls + " {" + fields + "}");
    auto layer = make(cls, fields);
    const Json c = layer->config();
    const Json want = Json::parse("{" + fields + "}");
    for (const auto& [key, value] : want.as_object()) EXPECT_EQ(c.at(key), value) << key;
    EXPECT_EQ(layer_to_config(*layer_from_config(layer_to_config(*layer))), layer_to_config(*layer));
  }
  // Defaults, and Keras 2's LeakyReLU(alpha=...) read as negative_slope.
  EXPECT_EQ(make("LeakyReLU", "")->config().at("negative_slope").as_number(), 0.3);
  EXPECT_EQ(make("LeakyReLU", R"("alpha": 0.1)")->config().at("negative_slope").as_number(), 0.1);
  const Json prelu = make("PReLU", "")->config();
  EXPECT_TRUE(prelu.at("shared_axes").is_null());
  EXPECT_TRUE(prelu.at("alpha_constraint").is_null());
  EXPECT_EQ(make("PReLU", R"("shared_axes": 2)")->config().at("shared_axes"), Json::parse("[2]"));
}

TEST(ActivationLayers, BadArgumentsAreRefusedWithKerassMessages) {
  struct Bad {
    std::string cls, fields, message;
  };
  const std::vector<Bad> bad = {
      {"ReLU", R"("max_value": -1)", "max_value of a ReLU layer cannot be a negative value. Received: max_value=-1"},
      {"ReLU", R"("negative_slope": -0.5)", "negative_slope of a ReLU layer cannot be None or a negative value"},
      {"ReLU", R"("negative_slope": null)", "negative_slope must be a number, got null"},
      {"ReLU", R"("threshold": -1)", "threshold of a ReLU layer cannot be None or a negative value"},
      {"LeakyReLU", R"("negative_slope": -0.1)",
       "The negative_slope value of a Leaky ReLU layer cannot be None or negative value"},
      {"LeakyReLU", R"("negative_slope": null)", "negative_slope must be a number, got null"},
      {"ELU", R"("alpha": "big")", "alpha must be a number"},
      {"Softmax", R"("axis": "last")", "Invalid value for `axis` argument: expected an int or a list/tuple of ints"},
      {"Softmax", R"("axis": [])", "`axis` must name at least one axis"},
      {"UnitNormalization", R"("axis": 1.5)", "Invalid value for `axis` argument"},
      {"PReLU", R"("alpha_constraint": "non_neg")", "alpha_constraint is not supported by mdtrain"},
      {"PReLU", R"("shared_axes": "x")", "shared_axes must be an int or a list of ints"},
      {"PReLU", R"("alpha_initializer": "nope")", "nope"},
  };
  for (const auto& b : bad) {
    SCOPED_TRACE(b.cls + " {" + b.fields + "}");
    EXPECT_CONTAINS(invalid_argument_of([&] { make(b.cls, b.fields); }), b.message);
  }
}

TEST(ActivationLayers, AxesThatDoNotFitTheInputAreRefusedAtBuild) {
  EXPECT_CONTAINS(invalid_argument_of([] {
                    make("Softmax", R"("axis": 3)")->build({4, 5}, 0);
                  }),
                  "Axis 3 is out of bounds for input shape (None, 4, 5).");
  EXPECT_CONTAINS(invalid_argument_of([] {
                    make("UnitNormalization", R"("axis": [-4])")->build({4, 5}, 0);
                  }),
                  "Axis [-4] is out of bounds for input shape (None, 4, 5).");
  EXPECT_CONTAINS(invalid_argument_of([] { make("Softmax", R"("axis": 0)")->build({4}, 0); }),
                  "includes the batch axis of input shape (None, 4)");
  EXPECT_CONTAINS(invalid_argument_of([] {
                    make("Softmax", R"("axis": [1, -2])")->build({4, 5}, 0);
                  }),
                  "names axis 1 twice");
  EXPECT_CONTAINS(invalid_argument_of([] {
                    make("PReLU", R"("shared_axes": [3])")->build({4, 5}, 0);
                  }),
                  "shared_axes must be axes of the input from 1 (the first after the batch) to 2");
  EXPECT_CONTAINS(invalid_argument_of([] { make("PReLU", R"("shared_axes": [0])")->build({4, 5}, 0); }), "got 0");
}

TEST(ActivationLayers, AxesPlansMergeAdjacentAxesAndDropOnes) {
  const math::AxesPlan p = ops::axes_plan("test", {2, 3, 1, 4, 5}, {1, 2, 3});
  EXPECT_EQ(p.kept_rank, 2);  // the batch and the last axis
  EXPECT_EQ(p.reduced_rank, 1);
  EXPECT_EQ(p.reduced_extent[0], 12);
  EXPECT_EQ(p.reduced_stride[0], 5);
  EXPECT_EQ(p.rows, 10);
  EXPECT_EQ(p.row_length, 12);
  for (std::int64_t i = 0; i < 2 * 3 * 4 * 5; ++i) EXPECT_EQ(math::row_of(p, i), (i / 60) * 5 + i % 5) << i;
  EXPECT_CONTAINS(invalid_argument_of([] {
                    ops::axes_plan("test", {2, 3}, {2});
                  }),
                  "[ops] test: axes (2) must be distinct axes of a tensor of shape (2, 3)");
}

}  // namespace
}  // namespace mdtrain
