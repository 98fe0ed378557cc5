// The convolution and pooling ops (ops/conv_ops.h): window geometry against TF's padding formulas,
// im2col against the patch definition written out here, col2im as its exact adjoint, pooling
// against naive loops and hand-computed values, and the argument checks.
#include "mdtrain/ops/conv_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace mdtrain {
namespace {

double get(const Tensor& t, std::int64_t i) {
  return t.dtype() == DType::Float32 ? static_cast<double>(t.data<float>()[i]) : t.data<double>()[i];
}
void put(Tensor& t, std::int64_t i, double v) {
  if (t.dtype() == DType::Float32) t.data<float>()[i] = static_cast<float>(v);
  else t.data<double>()[i] = v;
}

Tensor random_tensor(Shape shape, DType dtype, std::mt19937_64& rng) {
  Tensor t(std::move(shape), dtype);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  for (std::int64_t i = 0; i < t.numel(); ++i) put(t, i, d(rng));
  return t;
}

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<wrong exception type> ") + e.what();
  }
  return "<no exception>";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// x[b, h, w, c] of an NHWC tensor, 0 outside the image (the padding).
double pixel(const Tensor& x, const Window2D& g, std::int64_t b, std::int64_t h, std::int64_t w, std::int64_t c) {
  if (h < 0 || h >= g.in_h || w < 0 || w >= g.in_w) return 0.0;
  return get(x, ((b * g.in_h + h) * g.in_w + w) * g.channels + c);
}

// ---- geometry ---------------------------------------------------------------------------------

struct GeometryCase {
  std::int64_t in, k, s, d;
  bool same;
  std::int64_t out, pad_before;
};

TEST(Window2D, SizesAndPaddingFollowTensorFlow) {
  // Worked out by hand from TF's formulas (see conv_math.h); the odd element of "same" padding
  // goes after (pad_before = floor(total / 2)).
  const GeometryCase cases[] = {
      {28, 3, 1, 1, false, 26, 0}, {28, 3, 1, 1, true, 28, 1},
      {28, 5, 2, 1, false, 12, 0}, {28, 3, 2, 1, true, 14, 0},  // total = 13*2 + 3 - 28 = 1 → 0 before, 1 after
      {5, 3, 2, 1, true, 3, 1},                                 // total = 2*2 + 3 - 5 = 2
      {6, 3, 2, 1, true, 3, 0},                                 // total = 1
      {5, 4, 1, 1, true, 5, 1},                                 // total = 3 → 1 before, 2 after
      {4, 2, 2, 1, true, 2, 0},                                 // total = 0
      {7, 3, 1, 2, false, 3, 0},                                // dilated extent 5
      {7, 3, 1, 2, true, 7, 2},                                 // total = 6 + 5 - 7 = 4
      {6, 2, 1, 3, true, 6, 1},                                 // extent 4, total 3
      {3, 5, 1, 1, false, 0, 0},                                // does not fit
      {4, 4, 3, 1, false, 1, 0},   {13, 3, 2, 1, false, 6, 0},
      {13, 2, 2, 1, true, 7, 0},   {1, 3, 1, 1, true, 1, 1},  // total = 0 + 3 - 1 = 2
  };
  for (const auto& c : cases) {
    const Window2D g = ops::make_window2d(c.in, c.in + 1, 2, c.k, 1, c.s, 1, c.d, 1, c.same);
    EXPECT_EQ(g.out_h, c.out) << "in " << c.in << " k " << c.k << " s " << c.s << " d " << c.d << " same " << c.same;
    EXPECT_EQ(g.pad_top, c.pad_before) << "in " << c.in << " k " << c.k << " s " << c.s << " d " << c.d;
    EXPECT_EQ(g.out_w, c.in + 1);  // a 1-wide kernel with stride 1 keeps the width
    EXPECT_EQ(g.pad_left, 0);
  }
}

TEST(Window2D, RejectsNonPositiveArguments) {
  EXPECT_TRUE(contains(message_of([] { ops::make_window2d(5, 5, 1, 0, 3, 1, 1, 1, 1, false); }), "[window2d]"));
  EXPECT_TRUE(contains(message_of([] { ops::make_window2d(5, 5, 1, 3, 3, 1, -1, 1, 1, false); }), "strides"));
  EXPECT_TRUE(contains(message_of([] { ops::make_window2d(5, 5, 0, 3, 3, 1, 1, 1, 1, false); }), "input 5x5x0"));
}

// ---- im2col / col2im --------------------------------------------------------------------------

struct ColumnCase {
  std::int64_t h, w, c, kh, kw, sh, sw, dh, dw;
  bool same;
};

class Im2col : public ::testing::TestWithParam<ColumnCase> {};

TEST_P(Im2col, EachRowIsTheZeroPaddedPatch) {
  const auto p = GetParam();
  std::mt19937_64 rng(11);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Window2D g = ops::make_window2d(p.h, p.w, p.c, p.kh, p.kw, p.sh, p.sw, p.dh, p.dw, p.same);
    const std::int64_t images = 3, depth = p.kh * p.kw * p.c;
    Tensor x = random_tensor({images, p.h, p.w, p.c}, dtype, rng);
    Tensor col({images * g.out_h * g.out_w, depth}, dtype);
    col.fill(12345.0);  // every element must be written
    ops::im2col(x, g, col);
    for (std::int64_t b = 0; b < images; ++b)
      for (std::int64_t oh = 0; oh < g.out_h; ++oh)
        for (std::int64_t ow = 0; ow < g.out_w; ++ow)
          for (std::int64_t i = 0; i < p.kh; ++i)
            for (std::int64_t j = 0; j < p.kw; ++j)
              for (std::int64_t c = 0; c < p.c; ++c) {
                const std::int64_t row = (b * g.out_h + oh) * g.out_w + ow, k = (i * p.kw + j) * p.c + c;
                const double want =
                    pixel(x, g, b, oh * p.sh - g.pad_top + i * p.dh, ow * p.sw - g.pad_left + j * p.dw, c);
                ASSERT_EQ(get(col, row * depth + k), want) << "row " << row << " tap " << k;
              }
  }
}

TEST_P(Im2col, Col2imIsItsAdjoint) {
  // <im2col(x), C> == <x, col2im(C)> for all x, C: col2im scatters exactly what im2col gathered.
  const auto p = GetParam();
  std::mt19937_64 rng(12);
  const Window2D g = ops::make_window2d(p.h, p.w, p.c, p.kh, p.kw, p.sh, p.sw, p.dh, p.dw, p.same);
  const std::int64_t images = 2, depth = p.kh * p.kw * p.c;
  Tensor x = random_tensor({images, p.h, p.w, p.c}, DType::Float64, rng);
  Tensor cols = random_tensor({images * g.out_h * g.out_w, depth}, DType::Float64, rng);
  Tensor col_of_x({images * g.out_h * g.out_w, depth}, DType::Float64);
  ops::im2col(x, g, col_of_x);
  Tensor dx({images, p.h, p.w, p.c}, DType::Float64);
  dx.fill(777.0);  // overwritten, not accumulated into
  ops::col2im(cols, g, dx);
  double lhs = 0, rhs = 0, scale = 0;
  for (std::int64_t i = 0; i < cols.numel(); ++i) {
    lhs += get(col_of_x, i) * get(cols, i);
    scale += std::fabs(get(col_of_x, i) * get(cols, i));
  }
  for (std::int64_t i = 0; i < x.numel(); ++i) rhs += get(x, i) * get(dx, i);
  EXPECT_NEAR(lhs, rhs, 1e-12 * (scale + 1));
  // And directly: every input element receives the sum of the column entries that read it.
  std::vector<double> want(static_cast<std::size_t>(x.numel()), 0.0);
  for (std::int64_t b = 0; b < images; ++b)
    for (std::int64_t oh = 0; oh < g.out_h; ++oh)
      for (std::int64_t ow = 0; ow < g.out_w; ++ow)
        for (std::int64_t i = 0; i < p.kh; ++i)
          for (std::int64_t j = 0; j < p.kw; ++j) {
            const std::int64_t ih = oh * p.sh - g.pad_top + i * p.dh, iw = ow * p.sw - g.pad_left + j * p.dw;
            if (ih < 0 || ih >= p.h || iw < 0 || iw >= p.w) continue;
            for (std::int64_t c = 0; c < p.c; ++c)
              want[static_cast<std::size_t>(((b * p.h + ih) * p.w + iw) * p.c + c)] +=
                  get(cols, ((b * g.out_h + oh) * g.out_w + ow) * depth + (i * p.kw + j) * p.c + c);
          }
  for (std::int64_t i = 0; i < dx.numel(); ++i) ASSERT_NEAR(get(dx, i), want[static_cast<std::size_t>(i)], 1e-12) << i;
}

TEST_P(Im2col, RowRangesAreSlicesOfTheWholeBatch) {
  // The columns of output rows [r0, r1) (rows numbered across the batch) are rows
  // [r0 * out_w, r1 * out_w) of the whole batch's; accumulating every range's col2im gives col2im.
  const auto p = GetParam();
  std::mt19937_64 rng(13);
  const Window2D g = ops::make_window2d(p.h, p.w, p.c, p.kh, p.kw, p.sh, p.sw, p.dh, p.dw, p.same);
  const std::int64_t images = 3, depth = p.kh * p.kw * p.c, out_rows = images * g.out_h;
  Tensor x = random_tensor({images, p.h, p.w, p.c}, DType::Float64, rng);
  Tensor whole({out_rows * g.out_w, depth}, DType::Float64);
  ops::im2col(x, g, whole);
  Tensor dx_whole({images, p.h, p.w, p.c}, DType::Float64), dx_ranges({images, p.h, p.w, p.c}, DType::Float64);
  ops::col2im(whole, g, dx_whole);
  dx_ranges.fill(0.0);
  for (std::int64_t step : {1, 2, 5}) {
    dx_ranges.fill(0.0);
    for (std::int64_t r0 = 0; r0 < out_rows; r0 += step) {
      const std::int64_t r1 = std::min(out_rows, r0 + step);
      Tensor part({(r1 - r0) * g.out_w, depth}, DType::Float64);
      ops::im2col(x, g, r0, part);
      for (std::int64_t i = 0; i < part.numel(); ++i)
        ASSERT_EQ(get(part, i), get(whole, r0 * g.out_w * depth + i)) << "rows from " << r0;
      ops::col2im_accumulate(part, g, r0, dx_ranges);
    }
    for (std::int64_t i = 0; i < dx_whole.numel(); ++i) ASSERT_NEAR(get(dx_ranges, i), get(dx_whole, i), 1e-14);
  }
  Tensor too_far({2 * g.out_w, depth}, DType::Float64), ragged({g.out_w + 1, depth}, DType::Float64);
  EXPECT_TRUE(contains(message_of([&] { ops::im2col(x, g, out_rows - 1, too_far); }), "are outside the"));
  EXPECT_TRUE(contains(message_of([&] { ops::im2col(x, g, 0, ragged); }), "whole output rows"));
  EXPECT_TRUE(
      contains(message_of([&] { ops::col2im_accumulate(too_far, g, -1, dx_ranges); }), "[col2im] output rows [-1"));
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, Im2col,
    ::testing::Values(ColumnCase{5, 5, 1, 3, 3, 1, 1, 1, 1, false}, ColumnCase{5, 5, 1, 3, 3, 1, 1, 1, 1, true},
                      ColumnCase{6, 7, 3, 3, 3, 2, 2, 1, 1, true}, ColumnCase{6, 7, 3, 3, 3, 2, 2, 1, 1, false},
                      ColumnCase{7, 6, 2, 2, 3, 1, 2, 1, 1, true}, ColumnCase{8, 8, 2, 3, 3, 1, 1, 2, 2, true},
                      ColumnCase{8, 7, 2, 3, 2, 1, 1, 2, 3, false}, ColumnCase{4, 4, 5, 1, 1, 1, 1, 1, 1, false},
                      ColumnCase{4, 5, 3, 1, 1, 2, 2, 1, 1, true}, ColumnCase{3, 3, 2, 5, 5, 1, 1, 1, 1, true},
                      ColumnCase{9, 9, 1, 4, 4, 3, 3, 1, 1, true}, ColumnCase{2, 9, 4, 2, 3, 2, 1, 1, 1, false}));

TEST(Im2col, ChecksShapesAndDtypes) {
  const Window2D g = ops::make_window2d(5, 5, 2, 3, 3, 1, 1, 1, 1, false);
  Tensor x({2, 5, 5, 2}), col({2 * 9, 18});
  Tensor wrong_x({2, 5, 4, 2});
  EXPECT_TRUE(contains(message_of([&] { ops::im2col(wrong_x, g, col); }), "[im2col] x has shape (2, 5, 4, 2)"));
  Tensor wrong_col({2 * 9, 17});
  EXPECT_TRUE(contains(message_of([&] { ops::im2col(x, g, wrong_col); }), "expected (18, 18)"));
  Tensor col64({2 * 9, 18}, DType::Float64);
  EXPECT_TRUE(contains(message_of([&] { ops::im2col(x, g, col64); }), "dtype mismatch"));
  Tensor dx({3, 5, 5, 2});
  EXPECT_TRUE(contains(message_of([&] { ops::col2im(col, g, dx); }), "for 3 images"));
  Window2D empty = ops::make_window2d(2, 2, 2, 3, 3, 1, 1, 1, 1, false);
  Tensor small({1, 2, 2, 2}), none({0, 18});
  EXPECT_TRUE(contains(message_of([&] { ops::im2col(small, empty, none); }), "invalid window"));
}

// ---- pooling ----------------------------------------------------------------------------------

struct PoolCase {
  std::int64_t h, w, c, ph, pw, sh, sw;
  bool same;
};

class Pooling : public ::testing::TestWithParam<PoolCase> {};

TEST_P(Pooling, MatchesNaiveLoops) {
  const auto p = GetParam();
  std::mt19937_64 rng(21);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Window2D g = ops::make_window2d(p.h, p.w, p.c, p.ph, p.pw, p.sh, p.sw, 1, 1, p.same);
    const std::int64_t images = 2;
    Tensor x = random_tensor({images, p.h, p.w, p.c}, dtype, rng);
    Tensor ymax({images, g.out_h, g.out_w, p.c}, dtype), yavg({images, g.out_h, g.out_w, p.c}, dtype);
    Tensor argmax({images, g.out_h, g.out_w, p.c}, DType::Int32);
    ops::max_pool2d(x, g, ymax, argmax);
    ops::avg_pool2d(x, g, yavg);
    for (std::int64_t b = 0; b < images; ++b)
      for (std::int64_t oh = 0; oh < g.out_h; ++oh)
        for (std::int64_t ow = 0; ow < g.out_w; ++ow)
          for (std::int64_t c = 0; c < p.c; ++c) {
            double best = -INFINITY, sum = 0;
            std::int64_t at = -1, count = 0;
            for (std::int64_t i = 0; i < p.ph; ++i)
              for (std::int64_t j = 0; j < p.pw; ++j) {
                const std::int64_t ih = oh * p.sh - g.pad_top + i, iw = ow * p.sw - g.pad_left + j;
                if (ih < 0 || ih >= p.h || iw < 0 || iw >= p.w) continue;
                const double v = pixel(x, g, b, ih, iw, c);
                sum += v;
                ++count;
                if (v > best) {
                  best = v;
                  at = ih * p.w + iw;
                }
              }
            const std::int64_t o = ((b * g.out_h + oh) * g.out_w + ow) * p.c + c;
            ASSERT_EQ(get(ymax, o), best);
            ASSERT_EQ(argmax.data<std::int32_t>()[o], at);
            const double tol = dtype == DType::Float32 ? 1e-6 : 1e-14;
            ASSERT_NEAR(get(yavg, o), sum / static_cast<double>(count), tol);
          }
  }
}

TEST_P(Pooling, BackwardIsTheAdjointOfForward) {
  // Both pools are linear in x for a fixed argmax: <pool(x), G> == <x, pool_backward(G)>.
  const auto p = GetParam();
  std::mt19937_64 rng(22);
  const Window2D g = ops::make_window2d(p.h, p.w, p.c, p.ph, p.pw, p.sh, p.sw, 1, 1, p.same);
  const std::int64_t images = 2;
  Tensor x = random_tensor({images, p.h, p.w, p.c}, DType::Float64, rng);
  Tensor G = random_tensor({images, g.out_h, g.out_w, p.c}, DType::Float64, rng);
  Tensor y({images, g.out_h, g.out_w, p.c}, DType::Float64), argmax(y.shape(), DType::Int32);
  Tensor dx({images, p.h, p.w, p.c}, DType::Float64);
  auto dot = [](const Tensor& a, const Tensor& b) {
    double s = 0;
    for (std::int64_t i = 0; i < a.numel(); ++i) s += get(a, i) * get(b, i);
    return s;
  };
  ops::max_pool2d(x, g, y, argmax);
  dx.fill(5.0);
  ops::max_pool2d_backward(G, argmax, g, dx);
  EXPECT_NEAR(dot(y, G), dot(x, dx), 1e-12);
  ops::avg_pool2d(x, g, y);
  dx.fill(5.0);
  ops::avg_pool2d_backward(G, g, dx);
  EXPECT_NEAR(dot(y, G), dot(x, dx), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Geometries, Pooling,
                         ::testing::Values(PoolCase{4, 4, 1, 2, 2, 2, 2, false}, PoolCase{5, 5, 3, 2, 2, 2, 2, false},
                                           PoolCase{5, 5, 3, 2, 2, 2, 2, true}, PoolCase{7, 6, 2, 3, 3, 2, 2, true},
                                           PoolCase{7, 6, 2, 3, 3, 2, 2, false}, PoolCase{6, 6, 2, 2, 2, 1, 1, true},
                                           PoolCase{6, 7, 2, 2, 3, 3, 2, true}, PoolCase{8, 5, 4, 3, 2, 1, 3, false},
                                           PoolCase{3, 3, 1, 3, 3, 1, 1, true}, PoolCase{1, 1, 2, 2, 2, 2, 2, true}));

TEST(Pooling, SamePaddingAveragesInBoundsElementsOnly) {
  // A 3x3 image 1..9, pool 2x2, strides 2, "same": out 2x2 with the padding after; TF gives
  // mean(1,2,4,5), mean(3,6), mean(7,8), 9.
  const Window2D g = ops::make_window2d(3, 3, 1, 2, 2, 2, 2, 1, 1, true);
  ASSERT_EQ(g.out_h, 2);
  ASSERT_EQ(g.pad_top, 0);
  Tensor x({1, 3, 3, 1}, DType::Float64);
  for (int i = 0; i < 9; ++i) put(x, i, i + 1);
  Tensor y({1, 2, 2, 1}, DType::Float64);
  ops::avg_pool2d(x, g, y);
  EXPECT_EQ(get(y, 0), 3.0);
  EXPECT_EQ(get(y, 1), 4.5);
  EXPECT_EQ(get(y, 2), 7.5);
  EXPECT_EQ(get(y, 3), 9.0);
  Tensor argmax({1, 2, 2, 1}, DType::Int32);
  ops::max_pool2d(x, g, y, argmax);
  EXPECT_EQ(get(y, 0), 5.0);
  EXPECT_EQ(get(y, 1), 6.0);
  EXPECT_EQ(get(y, 2), 8.0);
  EXPECT_EQ(get(y, 3), 9.0);
  // Backward of the average: each in-bounds element gets dy / count.
  Tensor dy({1, 2, 2, 1}, DType::Float64);
  dy.fill(1.0);
  Tensor dx({1, 3, 3, 1}, DType::Float64);
  ops::avg_pool2d_backward(dy, g, dx);
  const double want[9] = {0.25, 0.25, 0.5, 0.25, 0.25, 0.5, 0.5, 0.5, 1.0};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(get(dx, i), want[i]) << i;
}

TEST(Pooling, MaxPoolTiesGoToTheFirstElementAndNaNPropagates) {
  const Window2D g = ops::make_window2d(2, 2, 1, 2, 2, 2, 2, 1, 1, false);
  Tensor x({1, 2, 2, 1}, DType::Float32), y({1, 1, 1, 1}, DType::Float32), argmax({1, 1, 1, 1}, DType::Int32);
  const float tie[4] = {1.f, 3.f, 3.f, 2.f};
  std::copy(tie, tie + 4, x.data<float>());
  ops::max_pool2d(x, g, y, argmax);
  EXPECT_EQ(y.data<float>()[0], 3.f);
  EXPECT_EQ(argmax.data<std::int32_t>()[0], 1);
  const float with_nan[4] = {1.f, std::numeric_limits<float>::quiet_NaN(), 5.f, 2.f};
  std::copy(with_nan, with_nan + 4, x.data<float>());
  ops::max_pool2d(x, g, y, argmax);
  EXPECT_TRUE(std::isnan(y.data<float>()[0]));
}

TEST(Pooling, ChecksArguments) {
  const Window2D g = ops::make_window2d(4, 4, 2, 2, 2, 2, 2, 1, 1, false);
  Tensor x({1, 4, 4, 2}), y({1, 2, 2, 2}), argmax({1, 2, 2, 2}, DType::Int32);
  Tensor bad_y({1, 2, 3, 2}), bad_argmax({1, 2, 2, 2}, DType::Int64);
  EXPECT_TRUE(contains(message_of([&] { ops::max_pool2d(x, g, bad_y, argmax); }),
                       "[max_pool2d] y has shape (1, 2, 3, 2), expected (1, 2, 2, 2)"));
  EXPECT_TRUE(contains(message_of([&] { ops::max_pool2d(x, g, y, bad_argmax); }), "argmax must be an int32"));
  EXPECT_TRUE(contains(message_of([&] { ops::avg_pool2d(x, g, bad_y); }), "[avg_pool2d] y has shape"));
  Tensor dx({1, 4, 4, 2}, DType::Float64);
  EXPECT_TRUE(contains(message_of([&] { ops::avg_pool2d_backward(y, g, dx); }), "dtype mismatch"));
}

TEST(GlobalAvgPool, MeansEachChannelOverTheImage) {
  std::mt19937_64 rng(31);
  Tensor x = random_tensor({3, 4, 5, 2}, DType::Float64, rng);
  Tensor y({3, 2}, DType::Float64);
  ops::global_avg_pool2d(x, y);
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t c = 0; c < 2; ++c) {
      double s = 0;
      for (std::int64_t p = 0; p < 20; ++p) s += get(x, (b * 20 + p) * 2 + c);
      EXPECT_NEAR(get(y, b * 2 + c), s / 20, 1e-15);
    }
  Tensor dy = random_tensor({3, 1, 1, 2}, DType::Float64, rng), dx({3, 4, 5, 2}, DType::Float64);
  ops::global_avg_pool2d_backward(dy, dx);
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t p = 0; p < 20; ++p)
      for (std::int64_t c = 0; c < 2; ++c) EXPECT_EQ(get(dx, (b * 20 + p) * 2 + c), get(dy, b * 2 + c) / 20);
  Tensor wrong({3, 3}, DType::Float64), flat({3, 40}, DType::Float64);
  EXPECT_TRUE(contains(message_of([&] { ops::global_avg_pool2d(x, wrong); }), "does not hold 3 x 2 means"));
  EXPECT_TRUE(contains(message_of([&] { ops::global_avg_pool2d(flat, y); }), "(images, height, width, channels)"));
}

TEST(GlobalMaxPool, TakesEachChannelsMaximumAndRoutesTheGradientToIt) {
  std::mt19937_64 rng(32);
  Tensor x = random_tensor({3, 4, 5, 2}, DType::Float64, rng);
  Tensor y({3, 2}, DType::Float64), argmax({3, 2}, DType::Int32);
  ops::global_max_pool2d(x, y, argmax);
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t c = 0; c < 2; ++c) {
      std::int64_t best = 0;
      for (std::int64_t p = 1; p < 20; ++p)
        if (get(x, (b * 20 + p) * 2 + c) > get(x, (b * 20 + best) * 2 + c)) best = p;
      EXPECT_EQ(argmax.data<std::int32_t>()[b * 2 + c], best);
      EXPECT_EQ(get(y, b * 2 + c), get(x, (b * 20 + best) * 2 + c));
    }
  Tensor dy = random_tensor({3, 2}, DType::Float64, rng), dx({3, 4, 5, 2}, DType::Float64);
  ops::global_max_pool2d_backward(dy, argmax, dx);
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t p = 0; p < 20; ++p)
      for (std::int64_t c = 0; c < 2; ++c)
        EXPECT_EQ(get(dx, (b * 20 + p) * 2 + c),
                  p == argmax.data<std::int32_t>()[b * 2 + c] ? get(dy, b * 2 + c) : 0.0);
  Tensor wrong({3, 3}, DType::Float64), flat({3, 40}, DType::Float64), bad_argmax({3, 2}, DType::Int64);
  EXPECT_TRUE(contains(message_of([&] { ops::global_max_pool2d(x, wrong, argmax); }),
                       "[global_max_pool2d] y (3, 3) does not hold 3 x 2 maxima"));
  EXPECT_TRUE(
      contains(message_of([&] { ops::global_max_pool2d(flat, y, argmax); }), "(images, height, width, channels)"));
  EXPECT_TRUE(contains(message_of([&] { ops::global_max_pool2d(x, y, bad_argmax); }),
                       "[global_max_pool2d] argmax must be an int32 tensor of shape (3, 2)"));
  EXPECT_TRUE(contains(message_of([&] { ops::global_max_pool2d_backward(wrong, argmax, dx); }),
                       "[global_max_pool2d_backward] dy (3, 3) does not hold 3 x 2 gradients"));
}

}  // namespace
}  // namespace mdtrain
