// The public op API (ops/ops.h) against naive loops and scalar formulas written out here, in
// float32 and float64, plus the argument checks every op makes before it touches memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/ops/ops.h"

namespace mdtrain {
namespace {

double get(const Tensor& t, std::int64_t i) {
  return t.dtype() == DType::Float32 ? static_cast<double>(t.data<float>()[i]) : t.data<double>()[i];
}
void put(Tensor& t, std::int64_t i, double v) {
  if (t.dtype() == DType::Float32) t.data<float>()[i] = static_cast<float>(v);
  else t.data<double>()[i] = v;
}

Tensor random_tensor(Shape shape, DType dtype, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  Tensor t(std::move(shape), dtype);
  std::uniform_real_distribution<double> d(lo, hi);
  for (std::int64_t i = 0; i < t.numel(); ++i) put(t, i, d(rng));
  return t;
}

// Values as the op sees them (float32 inputs rounded once), in double.
std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) v[static_cast<std::size_t>(i)] = get(t, i);
  return v;
}

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Rounding budget for a dot product of length k: each of the k terms may carry one rounding of
// the type's epsilon relative to the sum of |terms|.
double dot_tolerance(DType dtype, std::int64_t k, double abs_sum) {
  const double eps =
      dtype == DType::Float32 ? std::numeric_limits<float>::epsilon() : std::numeric_limits<double>::epsilon();
  return 2.0 * eps * static_cast<double>(k + 2) * (abs_sum + 1e-30);
}

// ---- gemm -------------------------------------------------------------------------------------

struct GemmCase {
  DType dtype;
  bool ta, tb;
};

class GemmTest : public ::testing::TestWithParam<GemmCase> {};

void check_gemm(DType dtype, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                double beta, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, dtype, rng);
  Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, dtype, rng);
  Tensor c = random_tensor({m, n}, dtype, rng);
  if (beta == 0.0) {
    // beta == 0 means "c is not read": stale NaNs in a reused buffer must not leak through.
    for (std::int64_t i = 0; i < c.numel(); ++i) put(c, i, std::nan(""));
  }
  const std::vector<double> av = values(a), bv = values(b), c0 = values(c);
  ops::gemm(a, ta, b, tb, c, alpha, beta);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0, abs_sum = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double x = ta ? av[static_cast<std::size_t>(p * m + i)] : av[static_cast<std::size_t>(i * k + p)];
        const double y = tb ? bv[static_cast<std::size_t>(j * k + p)] : bv[static_cast<std::size_t>(p * n + j)];
        sum += x * y;
        abs_sum += std::fabs(x * y);
      }
      const double prior = beta == 0.0 ? 0.0 : beta * c0[static_cast<std::size_t>(i * n + j)];
      const double expected = alpha * sum + prior;
      const double tol = dot_tolerance(dtype, k, std::fabs(alpha) * abs_sum + std::fabs(prior));
      ASSERT_NEAR(get(c, i * n + j), expected, tol)
          << name_of(dtype) << " ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k
          << " alpha=" << alpha << " beta=" << beta << " at (" << i << ", " << j << ")";
    }
  }
}

TEST_P(GemmTest, MatchesNaiveLoopOnOddSizes) {
  const auto p = GetParam();
  check_gemm(p.dtype, p.ta, p.tb, 7, 5, 9, 1.0, 0.0, 1);
  check_gemm(p.dtype, p.ta, p.tb, 1, 13, 3, 1.0, 0.0, 2);
  check_gemm(p.dtype, p.ta, p.tb, 33, 1, 17, 1.0, 0.0, 3);
  check_gemm(p.dtype, p.ta, p.tb, 65, 31, 70, 1.0, 0.0, 4);  // past BLAS blocking thresholds
}

TEST_P(GemmTest, AlphaAndBetaScale) {
  const auto p = GetParam();
  check_gemm(p.dtype, p.ta, p.tb, 6, 11, 5, 1.0, 1.0, 5);  // accumulate (the gradient sum case)
  check_gemm(p.dtype, p.ta, p.tb, 6, 11, 5, -0.5, 0.25, 6);
  check_gemm(p.dtype, p.ta, p.tb, 3, 4, 7, 2.0, 0.0, 7);
}

TEST_P(GemmTest, EmptyInnerDimensionScalesC) {
  const auto p = GetParam();
  // k == 0: op(a) @ op(b) is an all-zero (m, n) matrix, so c = beta * c.
  check_gemm(p.dtype, p.ta, p.tb, 4, 3, 0, 1.0, 0.0, 8);
  check_gemm(p.dtype, p.ta, p.tb, 4, 3, 0, 1.0, 2.5, 9);
  check_gemm(p.dtype, p.ta, p.tb, 4, 3, 0, 1.0, 1.0, 10);
}

TEST_P(GemmTest, EmptyOutputIsANoOp) {
  const auto p = GetParam();
  Tensor a(p.ta ? Shape{3, 0} : Shape{0, 3}, p.dtype), b(p.tb ? Shape{2, 3} : Shape{3, 2}, p.dtype);
  Tensor c({0, 2}, p.dtype);
  EXPECT_NO_THROW(ops::gemm(a, p.ta, b, p.tb, c));
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, GemmTest,
                         ::testing::Values(GemmCase{DType::Float32, false, false},
                                           GemmCase{DType::Float32, true, false}, GemmCase{DType::Float32, false, true},
                                           GemmCase{DType::Float32, true, true}, GemmCase{DType::Float64, false, false},
                                           GemmCase{DType::Float64, true, false}, GemmCase{DType::Float64, false, true},
                                           GemmCase{DType::Float64, true, true}),
                         [](const ::testing::TestParamInfo<GemmCase>& info) {
                           return std::string(name_of(info.param.dtype)) + (info.param.ta ? "_At" : "_A") +
                                  (info.param.tb ? "_Bt" : "_B");
                         });

TEST(GemmErrors, ShapeMismatch) {
  Tensor a({3, 4}), b({5, 2}), c({3, 2});
  EXPECT_THROW(ops::gemm(a, false, b, false, c), std::invalid_argument);
  const std::string msg = message_of([&] { ops::gemm(a, false, b, false, c); });
  EXPECT_TRUE(starts_with(msg, "[gemm]")) << msg;
  EXPECT_NE(msg.find("(3, 4)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(5, 2)"), std::string::npos) << msg;
  // Inner dimensions agree but c has the wrong shape.
  Tensor b2({4, 2}), c2({2, 3});
  EXPECT_TRUE(starts_with(message_of([&] { ops::gemm(a, false, b2, false, c2); }), "[gemm]"));
  // Transposes are taken into account: a^T is (4, 3), which does not chain with b2 (4, 2).
  Tensor c3({4, 2});
  EXPECT_THROW(ops::gemm(a, true, b2, false, c3), std::invalid_argument);
}

TEST(GemmErrors, DtypeMismatch) {
  Tensor a({2, 2}, DType::Float32), b({2, 2}, DType::Float64), c({2, 2}, DType::Float32);
  const std::string msg = message_of([&] { ops::gemm(a, false, b, false, c); });
  EXPECT_TRUE(starts_with(msg, "[gemm]")) << msg;
  EXPECT_NE(msg.find("float64"), std::string::npos) << msg;
  EXPECT_THROW(ops::gemm(a, false, b, false, c), std::invalid_argument);
  Tensor c64({2, 2}, DType::Float64);
  EXPECT_THROW(ops::gemm(a, false, a, false, c64), std::invalid_argument);
  Tensor i32({2, 2}, DType::Int32);
  EXPECT_THROW(ops::gemm(i32, false, i32, false, i32), std::invalid_argument);
}

TEST(GemmErrors, NotTwoDimensional) {
  Tensor a({2, 2, 2}), b({2, 2}), c({2, 2});
  const std::string msg = message_of([&] { ops::gemm(a, false, b, false, c); });
  EXPECT_TRUE(starts_with(msg, "[gemm]")) << msg;
  EXPECT_THROW(ops::gemm(a, false, b, false, c), std::invalid_argument);
}

// ---- bias_activation and activation_backward --------------------------------------------------

double scalar_act(Activation act, double v) {
  switch (act) {
    case Activation::Linear: return v;
    case Activation::ReLU: return v > 0 ? v : 0;
    case Activation::Sigmoid: return 1.0 / (1.0 + std::exp(-v));
    case Activation::Tanh: return std::tanh(v);
    case Activation::GELU: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case Activation::ELU: return v > 0 ? v : std::exp(v) - 1;
    case Activation::SELU: return 1.0507009873554805 * (v > 0 ? v : 1.6732632423543772 * (std::exp(v) - 1));
    case Activation::Softplus: return std::log(1 + std::exp(v));
    case Activation::Softsign: return v / (1 + std::fabs(v));
    case Activation::SiLU: return v / (1 + std::exp(-v));
    case Activation::ReLU6: return std::min(std::max(v, 0.0), 6.0);
    case Activation::HardSigmoid: return std::min(std::max(v / 6 + 0.5, 0.0), 1.0);
    case Activation::HardSiLU: return v * std::min(std::max(v / 6 + 0.5, 0.0), 1.0);
    case Activation::Exponential: return std::exp(v);
    case Activation::Mish: return v * std::tanh(std::log(1 + std::exp(v)));
    case Activation::LeakyReLU: return v > 0 ? v : 0.2 * v;
    case Activation::LogSigmoid: return -std::log(1 + std::exp(-v));
    case Activation::Softmax: break;
  }
  ADD_FAILURE() << "softmax is not element-wise";
  return 0;
}

std::vector<double> reference_forward(Activation act, const std::vector<double>& z, const std::vector<double>* bias,
                                      std::int64_t rows, std::int64_t cols) {
  std::vector<double> y(z.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<double> s(static_cast<std::size_t>(cols));
    for (std::int64_t j = 0; j < cols; ++j)
      s[static_cast<std::size_t>(j)] =
          z[static_cast<std::size_t>(r * cols + j)] + (bias ? (*bias)[static_cast<std::size_t>(j)] : 0.0);
    if (act == Activation::Softmax) {
      double m = -INFINITY, total = 0;
      for (double v : s) m = std::max(m, v);
      for (double v : s) total += std::exp(v - m);
      for (std::int64_t j = 0; j < cols; ++j)
        y[static_cast<std::size_t>(r * cols + j)] = std::exp(s[static_cast<std::size_t>(j)] - m) / total;
    } else {
      for (std::int64_t j = 0; j < cols; ++j)
        y[static_cast<std::size_t>(r * cols + j)] = scalar_act(act, s[static_cast<std::size_t>(j)]);
    }
  }
  return y;
}

struct ActCase {
  Activation act;
  DType dtype;
};

std::string act_case_name(const ::testing::TestParamInfo<ActCase>& info) {
  return std::string(name_of(info.param.act)) + "_" + name_of(info.param.dtype);
}

const std::vector<ActCase> kActCases = [] {
  std::vector<ActCase> v;
  for (auto a : all_activations())
    for (auto d : {DType::Float32, DType::Float64}) v.push_back({a, d});
  return v;
}();

class ActivationOpTest : public ::testing::TestWithParam<ActCase> {};

TEST_P(ActivationOpTest, ForwardMatchesScalarFormula) {
  const auto [act, dtype] = GetParam();
  const double tol = dtype == DType::Float32 ? 2e-6 : 1e-14;
  std::mt19937_64 rng(11);
  const std::int64_t rows = 5, cols = 7;
  Tensor z = random_tensor({rows, cols}, dtype, rng, -4, 4);
  Tensor bias = random_tensor({cols}, dtype, rng, -1, 1);
  const auto zv = values(z), bv = values(bias);
  for (bool with_bias : {false, true}) {
    Tensor y({rows, cols}, dtype);
    ops::bias_activation(z, with_bias ? bias : Tensor(), act, y);
    const auto expected = reference_forward(act, zv, with_bias ? &bv : nullptr, rows, cols);
    for (std::int64_t i = 0; i < y.numel(); ++i)
      ASSERT_NEAR(get(y, i), expected[static_cast<std::size_t>(i)],
                  tol * std::max(1.0, std::fabs(expected[static_cast<std::size_t>(i)])))
          << name_of(act) << " bias=" << with_bias << " at " << i;
  }
  // In place (y aliases z), as Dense runs it.
  Tensor zz = z.clone();
  ops::bias_activation(zz, bias, act, zz);
  const auto expected = reference_forward(act, zv, &bv, rows, cols);
  for (std::int64_t i = 0; i < zz.numel(); ++i)
    ASSERT_NEAR(get(zz, i), expected[static_cast<std::size_t>(i)],
                tol * std::max(1.0, std::fabs(expected[static_cast<std::size_t>(i)])));
}

TEST_P(ActivationOpTest, BackwardMatchesScalarFormula) {
  const auto [act, dtype] = GetParam();
  // The activations checked against a central difference (below) meet it to ~1e-10 in float64.
  const bool by_difference = needs_forward_input(act) && act != Activation::GELU;
  const double tol = dtype == DType::Float32 ? 5e-6 : (by_difference ? 1e-8 : 1e-13);
  std::mt19937_64 rng(12);
  const std::int64_t rows = 4, cols = 6;
  Tensor z = random_tensor({rows, cols}, dtype, rng, -3, 3);
  // Keep clear of the kinks (relu and leaky_relu at 0, relu6 at 0 and 6, the hard ones at -3 and 3).
  if (act == Activation::ReLU || act == Activation::LeakyReLU || act == Activation::ReLU6)
    for (std::int64_t i = 0; i < z.numel(); ++i) put(z, i, get(z, i) + (get(z, i) >= 0 ? 0.1 : -0.1));
  if (act == Activation::HardSigmoid || act == Activation::HardSiLU)
    for (std::int64_t i = 0; i < z.numel(); ++i)
      if (std::fabs(std::fabs(get(z, i)) - 3) < 0.1) put(z, i, get(z, i) * 0.9);
  Tensor y({rows, cols}, dtype);
  ops::bias_activation(z, Tensor(), act, y);
  Tensor dy = random_tensor({rows, cols}, dtype, rng);
  const auto zv = values(z), yv = values(y), dyv = values(dy);
  std::vector<double> expected(zv.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const std::size_t i = static_cast<std::size_t>(r * cols + j);
      const double x = zv[i], out = yv[i], g = dyv[i];
      switch (act) {
        case Activation::Linear: expected[i] = g; break;
        case Activation::ReLU: expected[i] = x > 0 ? g : 0.0; break;
        case Activation::Sigmoid: {
          const double s = 1.0 / (1.0 + std::exp(-x));
          expected[i] = g * s * (1 - s);
          break;
        }
        case Activation::Tanh: expected[i] = g / (std::cosh(x) * std::cosh(x)); break;
        case Activation::GELU:
          expected[i] = g * (0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
                             x * std::exp(-0.5 * x * x) / std::sqrt(2 * 3.14159265358979323846));
          break;
        case Activation::ELU:
        case Activation::SELU:
        case Activation::Softplus:
        case Activation::Softsign:
        case Activation::SiLU:
        case Activation::ReLU6:
        case Activation::HardSigmoid:
        case Activation::HardSiLU:
        case Activation::Exponential:
        case Activation::Mish:
        case Activation::LeakyReLU:
        case Activation::LogSigmoid: {
          // A central difference of the float64 formula (its error ~1e-10 at this step).
          const double h = 1e-5;
          expected[i] = g * (scalar_act(act, x + h) - scalar_act(act, x - h)) / (2 * h);
          break;
        }
        case Activation::Softmax: {
          // Row of the full Jacobian: dz_j = sum_k dy_k * y_k * (delta_jk - y_j).
          double sum = 0;
          for (std::int64_t k = 0; k < cols; ++k) {
            const std::size_t ik = static_cast<std::size_t>(r * cols + k);
            sum += dyv[ik] * yv[ik] * ((k == j ? 1.0 : 0.0) - out);
          }
          expected[i] = sum;
          break;
        }
      }
    }
  }
  Tensor dz({rows, cols}, dtype);
  ops::activation_backward(act, z, y, dy, dz);
  for (std::size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(get(dz, static_cast<std::int64_t>(i)), expected[i], tol * std::max(1.0, std::fabs(expected[i])))
        << name_of(act) << " at " << i;
  // dz may alias dy.
  Tensor inplace = dy.clone();
  ops::activation_backward(act, z, y, inplace, inplace);
  for (std::size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(get(inplace, static_cast<std::int64_t>(i)), expected[i], tol * std::max(1.0, std::fabs(expected[i])));
}

INSTANTIATE_TEST_SUITE_P(AllActivations, ActivationOpTest, ::testing::ValuesIn(kActCases), act_case_name);

TEST(ActivationOp, ExtremeInputsStayFinite) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor z({2, 4}, dtype);
    const double v[] = {-1000, -80, 80, 1000, 500, 500, 500, -500};
    for (int i = 0; i < 8; ++i) put(z, i, v[i]);
    Tensor y({2, 4}, dtype);
    ops::bias_activation(z, Tensor(), Activation::Sigmoid, y);
    EXPECT_EQ(get(y, 0), 0.0);
    EXPECT_EQ(get(y, 3), 1.0);
    EXPECT_TRUE(ops::all_finite(y));
    ops::bias_activation(z, Tensor(), Activation::Softmax, y);
    EXPECT_TRUE(ops::all_finite(y)) << name_of(dtype);
    EXPECT_NEAR(get(y, 3), 1.0, 1e-7);                                    // row 0: 1000 dominates
    for (int j = 4; j < 7; ++j) EXPECT_NEAR(get(y, j), 1.0 / 3.0, 1e-7);  // row 1: three equal maxima
    EXPECT_EQ(get(y, 7), 0.0);
  }
}

TEST(ActivationOp, ArgumentErrors) {
  Tensor z({2, 3}), y({2, 3}), bad_bias({4}), y64({2, 3}, DType::Float64), small({5});
  std::string msg = message_of([&] { ops::bias_activation(z, bad_bias, Activation::ReLU, y); });
  EXPECT_TRUE(starts_with(msg, "[bias_activation]")) << msg;
  EXPECT_THROW(ops::bias_activation(z, bad_bias, Activation::ReLU, y), std::invalid_argument);
  EXPECT_THROW(ops::bias_activation(z, Tensor(), Activation::ReLU, y64), std::invalid_argument);
  EXPECT_THROW(ops::bias_activation(z, Tensor(), Activation::ReLU, small), std::invalid_argument);
  msg = message_of([&] { ops::activation_backward(Activation::Tanh, z, y, small, y); });
  EXPECT_TRUE(starts_with(msg, "[activation_backward]")) << msg;
  EXPECT_THROW(ops::activation_backward(Activation::Tanh, z, y, small, y), std::invalid_argument);
  EXPECT_THROW(ops::activation_backward(Activation::Tanh, z, y, y64, y), std::invalid_argument);
  // GELU's gradient needs the forward input.
  msg = message_of([&] { ops::activation_backward(Activation::GELU, Tensor(), y, y, z); });
  EXPECT_TRUE(starts_with(msg, "[activation_backward]")) << msg;
}

// ---- sum_rows, multiply, dropout ---------------------------------------------------------------

TEST(SumRows, BetaZeroOneAndScaled) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const double tol = dtype == DType::Float32 ? 1e-5 : 1e-13;
    std::mt19937_64 rng(21);
    Tensor x = random_tensor({9, 5}, dtype, rng);
    const auto xv = values(x);
    std::vector<double> col(5, 0.0);
    for (int i = 0; i < 9; ++i)
      for (int j = 0; j < 5; ++j) col[static_cast<std::size_t>(j)] += xv[static_cast<std::size_t>(i * 5 + j)];
    for (double beta : {0.0, 1.0, 0.5, -2.0}) {
      Tensor out({5}, dtype);
      for (int j = 0; j < 5; ++j) put(out, j, beta == 0.0 ? std::nan("") : 1.0 + j);  // beta 0 ignores out
      ops::sum_rows(x, out, beta);
      for (int j = 0; j < 5; ++j) {
        const double prior = beta == 0.0 ? 0.0 : beta * (1.0 + j);
        EXPECT_NEAR(get(out, j), prior + col[static_cast<std::size_t>(j)], tol) << "beta=" << beta << " j=" << j;
      }
    }
    // A 3-D input sums over every axis but the last.
    Tensor x3 = x.reshape({3, 3, 5}), out3({5}, dtype);
    ops::sum_rows(x3, out3);
    for (int j = 0; j < 5; ++j) EXPECT_NEAR(get(out3, j), col[static_cast<std::size_t>(j)], tol);
  }
  Tensor x({4, 3}), wrong({4});
  const std::string msg = message_of([&] { ops::sum_rows(x, wrong); });
  EXPECT_TRUE(starts_with(msg, "[sum_rows]")) << msg;
  EXPECT_THROW(ops::sum_rows(x, wrong), std::invalid_argument);
  Tensor out64({3}, DType::Float64);
  EXPECT_THROW(ops::sum_rows(x, out64), std::invalid_argument);
}

TEST(Multiply, ElementWiseAndErrors) {
  std::mt19937_64 rng(22);
  Tensor a = random_tensor({3, 4}, DType::Float64, rng), b = random_tensor({3, 4}, DType::Float64, rng),
         y({3, 4}, DType::Float64);
  ops::multiply(a, b, y);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(get(y, i), get(a, i) * get(b, i));
  Tensor c({5}, DType::Float64);
  EXPECT_TRUE(starts_with(message_of([&] { ops::multiply(a, c, y); }), "[multiply]"));
  EXPECT_THROW(ops::multiply(a, c, y), std::invalid_argument);
}

TEST(DropoutOp, MaskIsAFunctionOfGlobalPosition) {
  const std::int64_t n = 4000;
  const double rate = 0.3;
  Tensor x = Tensor::zeros({n}, DType::Float64);
  x.fill(2.0);
  Tensor mask({n}, DType::Float64), y({n}, DType::Float64);
  ops::dropout(x, rate, 42, 7, 0, mask, y);
  std::int64_t dropped = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double m = get(mask, i);
    ASSERT_TRUE(m == 0.0 || m == 1.0 / (1.0 - rate)) << m;
    EXPECT_EQ(get(y, i), 2.0 * m);
    dropped += m == 0.0;
  }
  // Binomial(4000, 0.3): mean 1200, sd 29; 5 sd either side.
  EXPECT_NEAR(static_cast<double>(dropped), rate * n, 5 * std::sqrt(n * rate * (1 - rate)));
  // Any cut into pieces, each told where it starts, reproduces the whole.
  for (std::int64_t cut : {1, 3, 1001, 2999}) {
    Tensor m2({n}, DType::Float64), y2({n}, DType::Float64);
    Tensor m_lo = m2.rows(0, cut), y_lo = y2.rows(0, cut), m_hi = m2.rows(cut, n), y_hi = y2.rows(cut, n);
    ops::dropout(x.rows(0, cut), rate, 42, 7, 0, m_lo, y_lo);
    ops::dropout(x.rows(cut, n), rate, 42, 7, static_cast<std::uint64_t>(cut), m_hi, y_hi);
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(get(m2, i), get(mask, i)) << "cut " << cut << " at " << i;
  }
  // Float32 and float64 drop the same elements (the uniform is drawn in float either way).
  Tensor x32({n}, DType::Float32), m32({n}, DType::Float32), y32({n}, DType::Float32);
  x32.fill(2.0);
  ops::dropout(x32, rate, 42, 7, 0, m32, y32);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(get(m32, i) == 0.0, get(mask, i) == 0.0) << i;
  // Another stream (training step) or seed gives another mask.
  Tensor m3({n}, DType::Float64), y3({n}, DType::Float64);
  ops::dropout(x, rate, 42, 8, 0, m3, y3);
  std::int64_t same = 0;
  for (std::int64_t i = 0; i < n; ++i) same += get(m3, i) == get(mask, i);
  EXPECT_LT(same, n * 9 / 10);
}

TEST(DropoutOp, RateZeroKeepsEverythingAndBadRatesThrow) {
  Tensor x({10}, DType::Float32), mask({10}, DType::Float32), y({10}, DType::Float32);
  x.fill(3.0);
  ops::dropout(x, 0.0, 1, 0, 0, mask, y);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(get(y, i), 3.0);
  for (double bad : {1.0, -0.1, 1.5}) {
    const std::string msg = message_of([&] { ops::dropout(x, bad, 1, 0, 0, mask, y); });
    EXPECT_TRUE(starts_with(msg, "[dropout]")) << msg;
    EXPECT_THROW(ops::dropout(x, bad, 1, 0, 0, mask, y), std::invalid_argument);
  }
}

// ---- gather_rows ------------------------------------------------------------------------------

TEST(GatherRows, CopiesRowsOfAnyDtypeAndRank) {
  Tensor x({5, 2, 3}, DType::Float32);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i);
  const std::int64_t idx[] = {4, 0, 4, 2};
  Tensor out({4, 2, 3}, DType::Float32);
  ops::gather_rows(x, idx, 4, out);
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 6; ++k) EXPECT_EQ(out.data<float>()[i * 6 + k], static_cast<float>(idx[i] * 6 + k));

  Tensor labels({5}, DType::Int64);
  for (int i = 0; i < 5; ++i) labels.data<std::int64_t>()[i] = 10 + i;
  Tensor lout({4}, DType::Int64);
  ops::gather_rows(labels, idx, 4, lout);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(lout.data<std::int64_t>()[i], 10 + idx[i]);

  Tensor empty({0, 2, 3}, DType::Float32);
  EXPECT_NO_THROW(ops::gather_rows(x, idx, 0, empty));
}

TEST(GatherRows, ALargeBatchSplitOverThreadsCopiesEveryRowOnce) {
  // 1000 rows of 128 floats (512 KB): enough for the copy to be split over the intra-op team.
  const std::int64_t n = 1000, cols = 128;
  Tensor x({n, cols}, DType::Float32);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = (i * 617) % n;  // a permutation
  Tensor out({n, cols}, DType::Float32);
  out.fill(-1.0);
  ops::gather_rows(x, idx.data(), n, out);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < cols; ++k)
      ASSERT_EQ(out.data<float>()[i * cols + k], static_cast<float>(idx[static_cast<std::size_t>(i)] * cols + k))
          << "row " << i << " column " << k;
}

TEST(GatherRows, ABadIndexLeavesTheOutputUntouched) {
  Tensor x({3, 2}, DType::Float32);
  x.fill(1.0);
  const std::int64_t idx[] = {0, 1, 7};
  Tensor out({3, 2}, DType::Float32);
  out.fill(-1.0);
  EXPECT_THROW(ops::gather_rows(x, idx, 3, out), std::out_of_range);
  for (std::int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(out.data<float>()[i], -1.0f);  // all checked first
}

TEST(GatherRows, OutOfRangeIndexThrowsOutOfRange) {
  Tensor x({5, 3}), out({2, 3});
  for (std::int64_t bad : {-1, 5, 1000}) {
    const std::int64_t idx[] = {0, bad};
    const std::string msg = message_of([&] { ops::gather_rows(x, idx, 2, out); });
    EXPECT_TRUE(starts_with(msg, "[gather_rows]")) << msg;
    EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
    EXPECT_THROW(ops::gather_rows(x, idx, 2, out), std::out_of_range);
  }
}

TEST(GatherRows, MismatchedOutputThrowsInvalidArgument) {
  Tensor x({5, 3}), wrong_row({2, 4}), wrong_count({3, 3}), wrong_dtype({2, 3}, DType::Float64);
  const std::int64_t idx[] = {0, 1};
  EXPECT_TRUE(starts_with(message_of([&] { ops::gather_rows(x, idx, 2, wrong_row); }), "[gather_rows]"));
  EXPECT_THROW(ops::gather_rows(x, idx, 2, wrong_row), std::invalid_argument);
  EXPECT_THROW(ops::gather_rows(x, idx, 2, wrong_count), std::invalid_argument);
  EXPECT_THROW(ops::gather_rows(x, idx, 2, wrong_dtype), std::invalid_argument);
}

// ---- all_finite and threads ---------------------------------------------------------------------

TEST(AllFinite, DetectsNaNAndInfAnywhere) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const std::int64_t n = 37;
    Tensor x({n}, dtype);
    for (std::int64_t i = 0; i < n; ++i)
      put(x, i, (i % 2 ? -1.0 : 1.0) * 1e30 * (dtype == DType::Float32 ? 1e-22 : 1.0));
    EXPECT_TRUE(ops::all_finite(x));
    if (dtype == DType::Float64) {
      Tensor big = x.clone();
      put(big, 0, std::numeric_limits<double>::max());
      EXPECT_TRUE(ops::all_finite(big));
    } else {
      Tensor big = x.clone();
      big.data<float>()[0] = std::numeric_limits<float>::max();
      EXPECT_TRUE(ops::all_finite(big));
    }
    for (double bad : {std::nan(""), double(INFINITY), -double(INFINITY)}) {
      for (std::int64_t pos : {std::int64_t{0}, std::int64_t{18}, n - 1}) {
        Tensor y = x.clone();
        put(y, pos, bad);
        EXPECT_FALSE(ops::all_finite(y)) << name_of(dtype) << " " << bad << " at " << pos;
      }
    }
  }
  EXPECT_TRUE(ops::all_finite(Tensor({0}, DType::Float32)));
  Tensor ints({3}, DType::Int32);
  ints.fill(7);
  EXPECT_TRUE(ops::all_finite(ints));
}

TEST(CpuThreads, RejectsNonPositiveCounts) {
  const std::string msg = message_of([] { ops::set_cpu_threads(0); });
  EXPECT_TRUE(starts_with(msg, "[ops]")) << msg;
  EXPECT_THROW(ops::set_cpu_threads(0), std::invalid_argument);
  EXPECT_THROW(ops::set_cpu_threads(-3), std::invalid_argument);
  const int before = ops::cpu_thread_count();
  EXPECT_GE(before, 1);
  ops::set_cpu_threads(1);
  EXPECT_EQ(ops::cpu_thread_count(), 1);
  ops::set_cpu_threads(before);
}

}  // namespace
}  // namespace mdtrain
