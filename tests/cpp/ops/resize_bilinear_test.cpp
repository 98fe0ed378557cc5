// ops::resize_bilinear: TF's half-pixel bilinear upsampling against the weights written out here
// (y = Wh x Ww^T per image and channel), its adjoint against central differences of
// sum(G * resize(x)), and bad shapes refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "mdtrain/ops/resize_bilinear.h"
#include "nn/gradient_check.h"

namespace mdtrain {
namespace {

using testing::dot;
using testing::expect_close;
using testing::numeric_gradient;
using testing::random_tensor;

// W[o][i]: how much source index i weighs in output o (TF: in = (o + 0.5) n / out - 0.5, clamped
// to the edge, linear between the two neighbours).
std::vector<std::vector<double>> weights(std::int64_t n, std::int64_t out) {
  std::vector<std::vector<double>> w(out, std::vector<double>(n, 0.0));
  for (std::int64_t o = 0; o < out; ++o) {
    const double in = (o + 0.5) * static_cast<double>(n) / static_cast<double>(out) - 0.5;
    const double f = std::floor(in);
    const double a = in - f;
    const auto clamp = [&](double i) { return static_cast<std::int64_t>(std::min(std::max(i, 0.0), n - 1.0)); };
    w[o][clamp(f)] += 1 - a;
    w[o][clamp(f + 1)] += a;
  }
  return w;
}

TEST(ResizeBilinear, MatchesTheSeparableWeights) {
  std::mt19937_64 rng(3);
  for (auto [h, w, fh, fw] : std::vector<std::array<std::int64_t, 4>>{{2, 3, 2, 3}, {1, 4, 3, 1}, {3, 3, 1, 1}}) {
    const Tensor x = random_tensor({2, h, w, 2}, rng);
    Tensor y({2, h * fh, w * fw, 2}, DType::Float64);
    ops::resize_bilinear(x, y);
    const auto wh = weights(h, h * fh), ww = weights(w, w * fw);
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t oh = 0; oh < h * fh; ++oh)
        for (std::int64_t ow = 0; ow < w * fw; ++ow)
          for (std::int64_t c = 0; c < 2; ++c) {
            double want = 0;
            for (std::int64_t i = 0; i < h; ++i)
              for (std::int64_t j = 0; j < w; ++j)
                want += wh[oh][i] * ww[ow][j] * x.data<double>()[((b * h + i) * w + j) * 2 + c];
            EXPECT_NEAR(y.data<double>()[((b * h * fh + oh) * w * fw + ow) * 2 + c], want, 1e-12);
          }
  }
}

TEST(ResizeBilinear, AdjointMatchesFiniteDifferences) {
  std::mt19937_64 rng(4);
  for (auto [h, w, fh, fw] : std::vector<std::array<std::int64_t, 4>>{{3, 2, 2, 3}, {1, 1, 4, 2}, {4, 3, 3, 2}}) {
    Tensor x = random_tensor({2, h, w, 3}, rng);
    const Tensor G = random_tensor({2, h * fh, w * fw, 3}, rng);
    auto loss = [&] {
      Tensor y({2, h * fh, w * fw, 3}, DType::Float64);
      ops::resize_bilinear(x, y);
      return dot(G, y);
    };
    Tensor dx({2, h, w, 3}, DType::Float64);
    ops::resize_bilinear_backward(G, dx);
    expect_close(dx, numeric_gradient(x, loss), "resize_bilinear_backward");
  }
}

TEST(ResizeBilinear, RefusesShapesThatAreNotWholeUpsamplings) {
  Tensor x = Tensor::zeros({1, 2, 2, 1}, DType::Float32);
  Tensor odd = Tensor::zeros({1, 3, 4, 1}, DType::Float32), channels = Tensor::zeros({1, 4, 4, 2}, DType::Float32);
  Tensor f64 = Tensor::zeros({1, 4, 4, 1}, DType::Float64), flat = Tensor::zeros({1, 4}, DType::Float32);
  EXPECT_THROW(ops::resize_bilinear(x, odd), std::invalid_argument);
  EXPECT_THROW(ops::resize_bilinear(x, channels), std::invalid_argument);
  EXPECT_THROW(ops::resize_bilinear(x, f64), std::invalid_argument);
  EXPECT_THROW(ops::resize_bilinear(x, flat), std::invalid_argument);
  try {
    ops::resize_bilinear_backward(odd, x);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[ops] resize_bilinear_backward: expected images"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(to_string(odd.shape())), std::string::npos);
  }
}

}  // namespace
}  // namespace mdtrain
