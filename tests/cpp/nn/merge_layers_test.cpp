// The element-wise merges with Keras's broadcasting (Add, Subtract, Multiply, Average, Maximum,
// Minimum) and Dot: values against direct loops, float64 finite-difference gradients of every
// input, TF's tie and NaN rule for Maximum/Minimum, clones, and the shape errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "mdtrain/nn/dot.h"
#include "mdtrain/nn/elementwise_merge.h"

namespace mdtrain {
namespace {

using testing::dot;
using testing::expect_close;
using testing::numeric_gradient;
using testing::random_tensor;

Tensor filled(const Shape& shape, const std::vector<double>& values) {
  Tensor t(shape, DType::Float64);
  for (std::size_t i = 0; i < values.size(); ++i) t.data<double>()[i] = values[i];
  return t;
}

std::vector<double> values_of(const Tensor& t) {
  return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
}

Shape batched(std::int64_t batch, const Shape& s) {
  Shape out{batch};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

// backward_inputs of L = sum(G * forward_inputs(x)) against central differences, every input.
void check_merge_gradients(MergeLayer& layer, std::vector<Tensor> x, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Tensor y = layer.forward_inputs(x);
  const Tensor G = random_tensor(y.shape(), rng);
  std::vector<Tensor> dx = layer.backward_inputs(G);
  ASSERT_EQ(dx.size(), x.size());
  for (auto& d : dx) d = d.clone();
  for (std::size_t k = 0; k < x.size(); ++k) {
    ASSERT_EQ(dx[k].shape(), x[k].shape()) << layer.name() << " input " << k;
    auto loss = [&] { return dot(G, layer.forward_inputs(x)); };
    expect_close(dx[k], numeric_gradient(x[k], loss), layer.name() + " dL/dx" + std::to_string(k));
  }
}

struct BroadcastCase {
  std::vector<Shape> shapes;
  Shape out;
};

const std::vector<BroadcastCase> kBroadcast = {
    {{{4}, {4}}, {4}},
    {{{3, 4}, {1, 4}}, {3, 4}},
    {{{3, 4}, {4}}, {3, 4}},  // a lower rank gains axes after the batch axis
    {{{2, 3, 4}, {3, 1}, {1, 1, 4}}, {2, 3, 4}},
    {{{3, 1}, {1, 5}}, {3, 5}},  // both broadcast
    {{{1}, {2, 3}}, {2, 3}},
};

std::unique_ptr<ElementwiseMerge> make(ElementwiseMerge::Fold fold, const std::string& name) {
  using F = ElementwiseMerge::Fold;
  switch (fold) {
    case F::Sum: return std::make_unique<Add>(name);
    case F::Product: return std::make_unique<Multiply>(name);
    case F::Difference: return std::make_unique<Subtract>(name);
    case F::Mean: return std::make_unique<Average>(name);
    case F::Maximum: return std::make_unique<Maximum>(name);
    case F::Minimum: return std::make_unique<Minimum>(name);
  }
  return nullptr;
}

// The reference: each input read at the broadcast position of output element (b, j).
double read_broadcast(const Tensor& x, const Shape& in, const Shape& out, std::int64_t b, std::int64_t j) {
  std::vector<std::int64_t> index(out.size());
  for (std::size_t d = out.size(); d-- > 0;) {
    index[d] = j % out[d];
    j /= out[d];
  }
  std::int64_t offset = 0;
  const std::size_t lead = out.size() - in.size();
  for (std::size_t d = 0; d < in.size(); ++d) offset = offset * in[d] + (in[d] == 1 ? 0 : index[lead + d]);
  return x.data<double>()[b * x.row_size() + offset];
}

TEST(ElementwiseMerges, BroadcastAsKerasAndFoldInInputOrder) {
  using F = ElementwiseMerge::Fold;
  std::mt19937_64 rng(1);
  for (F fold : {F::Sum, F::Product, F::Difference, F::Mean, F::Maximum, F::Minimum}) {
    for (const auto& c : kBroadcast) {
      if (fold == F::Difference && c.shapes.size() != 2) continue;
      auto layer = make(fold, "m");
      layer->build_inputs(c.shapes, DType::Float64);
      ASSERT_EQ(layer->output_shape(), c.out) << layer->class_name();
      std::vector<Tensor> x;
      for (const auto& s : c.shapes) x.push_back(random_tensor(batched(3, s), rng));
      const Tensor y = layer->forward_inputs(x);
      const std::int64_t row = y.row_size();
      for (std::int64_t b = 0; b < 3; ++b)
        for (std::int64_t j = 0; j < row; ++j) {
          double want = read_broadcast(x[0], c.shapes[0], c.out, b, j);
          for (std::size_t k = 1; k < x.size(); ++k) {
            const double v = read_broadcast(x[k], c.shapes[k], c.out, b, j);
            switch (fold) {
              case F::Sum:
              case F::Mean: want += v; break;
              case F::Product: want *= v; break;
              case F::Difference: want -= v; break;
              case F::Maximum: want = std::max(want, v); break;
              case F::Minimum: want = std::min(want, v); break;
            }
          }
          if (fold == F::Mean) want /= static_cast<double>(x.size());
          ASSERT_DOUBLE_EQ(y.data<double>()[b * row + j], want) << layer->class_name() << " element " << j;
        }
    }
  }
}

TEST(ElementwiseMerges, GradientsOfEveryInputMatchFiniteDifferencesWhenBroadcast) {
  using F = ElementwiseMerge::Fold;
  std::mt19937_64 rng(2);
  for (F fold : {F::Sum, F::Product, F::Difference, F::Mean, F::Maximum, F::Minimum}) {
    for (const auto& c : kBroadcast) {
      if (fold == F::Difference && c.shapes.size() != 2) continue;
      auto layer = make(fold, "m");
      SCOPED_TRACE(layer->class_name());
      layer->build_inputs(c.shapes, DType::Float64);
      std::vector<Tensor> x;
      for (const auto& s : c.shapes) x.push_back(random_tensor(batched(2, s), rng));
      check_merge_gradients(*layer, x, 3);
      // A clone keeps the plan of its reads.
      auto copy = layer->clone();
      auto* merge = dynamic_cast<MergeLayer*>(copy.get());
      ASSERT_NE(merge, nullptr);
      EXPECT_EQ(values_of(merge->forward_inputs(x)), values_of(layer->forward_inputs(x)));
    }
  }
}

TEST(ElementwiseMerges, MaximumAndMinimumFollowTfOnTiesAndNan) {
  // tf.maximum/minimum: NaN propagates; the gradient of max(a, b) goes to a where a >= b, else to
  // b (so to b where either is NaN); folded over three inputs as Keras folds them.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor a = filled({1, 6}, {1, 2, nan, 3, 0.5, nan});
  const Tensor b = filled({1, 6}, {1, nan, 2, 3, 0.5, 1});
  const Tensor c = filled({1, 6}, {0, 1, 2, 3, 0.5, nan});
  const Tensor dy = filled({1, 6}, {1, 2, 3, 4, 5, 6});
  for (bool is_max : {true, false}) {
    std::unique_ptr<ElementwiseMerge> m = is_max ? std::unique_ptr<ElementwiseMerge>(std::make_unique<Maximum>("mx"))
                                                 : std::unique_ptr<ElementwiseMerge>(std::make_unique<Minimum>("mn"));
    m->build_inputs({{6}, {6}, {6}}, DType::Float64);
    const std::vector<double> y = values_of(m->forward_inputs({a, b, c}));
    EXPECT_EQ(y[0], is_max ? 1.0 : 0.0);
    EXPECT_TRUE(std::isnan(y[1]) && std::isnan(y[2]) && std::isnan(y[5]));
    EXPECT_EQ(y[3], 3.0);
    const auto g = m->backward_inputs(dy);
    // Ties (elements 3 and 4, all equal) go to the first input; element 0: max 1 = a (tie with b),
    // min 0 = c; NaN elements go to the input after the first NaN appears, as TF's fold does.
    const std::vector<double> ga = values_of(g[0]), gb = values_of(g[1]), gc = values_of(g[2]);
    EXPECT_EQ(ga, (std::vector<double>{is_max ? 1.0 : 0.0, 0, 0, 4, 5, 0}));
    EXPECT_EQ(gb, (std::vector<double>{0, 0, 0, 0, 0, 0}));
    EXPECT_EQ(gc, (std::vector<double>{is_max ? 0.0 : 1.0, 2, 3, 0, 0, 6}));
  }
}

TEST(ElementwiseMerges, RefuseWhatKerasRefusesNamingTheLayerAndShapes) {
  Subtract sub("my_sub");
  try {
    sub.build_inputs({{3}, {3}, {3}});
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("exactly 2 inputs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("my_sub"), std::string::npos) << e.what();
  }
  Maximum mx("my_max");
  try {
    mx.build_inputs({{3, 4}, {2, 4}});
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("(3, 4) and (2, 4)"), std::string::npos) << e.what();
  }
  Average avg("avg");
  EXPECT_THROW(avg.build_inputs({{3}}), std::invalid_argument);
  EXPECT_NO_THROW(avg.build_inputs({{3, 1}, {4}}));
  EXPECT_EQ(avg.output_shape(), (Shape{3, 4}));
}

// Dot: out[b, i, j] = sum_t X[b, i, t] Y[b, t, j] with X, Y the inputs' other axes around their
// dot axes (Keras's batch_dot), here computed from the definition.
struct DotCase {
  Shape a, b;
  std::vector<int> axes;
  Shape out;
};

const std::vector<DotCase> kDots = {
    {{4}, {4}, {1}, {1}},           {{3, 5}, {4, 3}, {1, 2}, {5, 4}}, {{2, 3, 4}, {4, 5}, {-1, 1}, {2, 3, 5}},
    {{3, 5}, {3, 5}, {-1}, {3, 3}}, {{4, 3}, {4}, {1, 1}, {3}},       {{3}, {2, 3}, {1, 2}, {2}},
};

TEST(DotLayer, ComputesKerassBatchDotAndItsGradients) {
  std::mt19937_64 rng(4);
  for (const auto& c : kDots) {
    for (bool normalize : {false, true}) {
      Dot layer("dot", c.axes, normalize);
      SCOPED_TRACE(to_string(c.a) + " . " + to_string(c.b) + (normalize ? " normalized" : ""));
      layer.build_inputs({c.a, c.b}, DType::Float64);
      ASSERT_EQ(layer.output_shape(), c.out);
      std::vector<Tensor> x{random_tensor(batched(2, c.a), rng), random_tensor(batched(2, c.b), rng)};
      const Tensor y = layer.forward_inputs(x);
      // The first case by hand: the row dot product, or the cosine.
      if (c.a == Shape{4} && c.b == Shape{4}) {
        for (std::int64_t r = 0; r < 2; ++r) {
          double s = 0, na = 0, nb = 0;
          for (int t = 0; t < 4; ++t) {
            const double p = x[0].data<double>()[r * 4 + t], q = x[1].data<double>()[r * 4 + t];
            s += p * q;
            na += p * p;
            nb += q * q;
          }
          EXPECT_NEAR(y.data<double>()[r], normalize ? s / std::sqrt(na * nb) : s, 1e-14);
        }
      }
      check_merge_gradients(layer, x, 5);
    }
  }
}

TEST(DotLayer, NormalizeCapsTheInverseNormAsKeras) {
  // A zero row: rsqrt(0) = inf is capped at 1e7, so the output is 0 and the gradient 1e7 * dy . y.
  Dot layer("cos", {1}, true);
  layer.build_inputs({{2}, {2}}, DType::Float64);
  const Tensor a = filled({1, 2}, {0, 0}), b = filled({1, 2}, {3, 4});
  EXPECT_EQ(values_of(layer.forward_inputs({a, b})), (std::vector<double>{0}));
  const auto g = layer.backward_inputs(filled({1, 1}, {1}));
  EXPECT_NEAR(g[0].data<double>()[0], 1e7 * 0.6, 1e-6);
  EXPECT_NEAR(g[0].data<double>()[1], 1e7 * 0.8, 1e-6);
}

TEST(DotLayer, RefusesBadAxesAndShapesNamingTheLayer) {
  const auto message = [](Dot& d, const std::vector<Shape>& shapes) {
    try {
      d.build_inputs(shapes);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  Dot batch("d0", {0, 1}, false);
  EXPECT_NE(message(batch, {{3}, {3}}).find("Cannot perform batch_dot over axis 0"), std::string::npos);
  Dot sizes("ds", {1}, false);
  const std::string m = message(sizes, {{3}, {4}});
  EXPECT_NE(m.find("axis values 3 (at axis 1) != 4 (at axis 1)"), std::string::npos) << m;
  EXPECT_NE(m.find("\"ds\""), std::string::npos) << m;
  Dot range("dr", {3}, false);
  EXPECT_NE(message(range, {{3}, {3}}).find("out of range"), std::string::npos);
  Dot three("d3", {1}, false);
  EXPECT_NE(message(three, {{3}, {3}, {3}}).find("list of 2 inputs"), std::string::npos);
  EXPECT_THROW(Dot("bad", {1, 2, 3}, false), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain
