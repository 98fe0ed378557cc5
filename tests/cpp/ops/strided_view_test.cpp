// ops::strided_view: transposes, stride-0 reads, offsets into a larger tensor and sums over
// repeats against plain loops; each plan's adjoint (the layers' backward plans) against central
// differences of sum(G * view(x)); bad plans refused before anything is written.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>

#include "mdtrain/ops/strided_view.h"
#include "nn/gradient_check.h"

namespace mdtrain {
namespace {

using testing::dot;
using testing::expect_close;
using testing::numeric_gradient;
using testing::random_tensor;

Tensor iota(const Shape& shape) {
  Tensor t(shape, DType::Float64);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = static_cast<double>(i);
  return t;
}

TEST(StridedView, TransposesWithPermutedSourceStrides) {
  const Tensor x = iota({2, 3, 4});  // (b, i, j) -> y (b, j, i)
  Tensor y({2, 4, 3}, DType::Float64);
  ops::ViewPlan plan;
  plan.extent = {2, 4, 3};
  plan.src_stride = {12, 1, 4};
  plan.dst_stride = {12, 3, 1};
  ops::strided_view(x, y, plan);
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 3; ++i) EXPECT_EQ(y.data<double>()[b * 12 + j * 3 + i], b * 12 + i * 4 + j);
}

TEST(StridedView, RepeatsWithZeroStridesAndSumsTheRepeatsInItsAdjoint) {
  const Tensor x = iota({2, 3});  // each row repeated 4 times: (2, 4, 3)
  Tensor y({2, 4, 3}, DType::Float64);
  ops::ViewPlan plan;
  plan.extent = {2, 4, 3};
  plan.src_stride = {3, 0, 1};
  plan.dst_stride = {12, 3, 1};
  ops::strided_view(x, y, plan);
  for (int b = 0; b < 2; ++b)
    for (int r = 0; r < 4; ++r)
      for (int f = 0; f < 3; ++f) EXPECT_EQ(y.data<double>()[b * 12 + r * 3 + f], b * 3 + f);
  ops::ViewPlan sum;
  sum.extent = {2, 3};
  sum.src_stride = {12, 1};
  sum.dst_stride = {3, 1};
  sum.reduce_extent = {4};
  sum.reduce_src_stride = {3};
  Tensor dx({2, 3}, DType::Float64);
  ops::strided_view(y, dx, sum);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(dx.data<double>()[i], 4.0 * i);
}

TEST(StridedView, WritesAWindowAtAnOffsetAndLeavesTheRestOfDst) {
  const Tensor x = iota({1, 2, 2});
  Tensor y({1, 4, 3}, DType::Float64);
  y.fill(-1.0);
  ops::ViewPlan plan;  // into rows 1..2, columns 1..2 of a 4x3
  plan.extent = {1, 2, 2};
  plan.src_stride = {4, 2, 1};
  plan.dst_stride = {12, 3, 1};
  plan.dst_offset = 4;
  ops::strided_view(x, y, plan);
  const double want[] = {-1, -1, -1, -1, 0, 1, -1, 2, 3, -1, -1, -1};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(y.data<double>()[i], want[i]) << i;
}

// The adjoint plan's output is the gradient of L(x) = sum(G * view(x)).
void expect_adjoint(const Shape& x_shape, const Shape& y_shape, const ops::ViewPlan& forward,
                    const ops::ViewPlan& adjoint) {
  std::mt19937_64 rng(41);
  Tensor x = random_tensor(x_shape, rng);
  const Tensor G = random_tensor(y_shape, rng);
  auto loss = [&] {
    Tensor y(y_shape, DType::Float64);
    y.fill(0.0);
    ops::strided_view(x, y, forward);
    return dot(G, y);
  };
  Tensor dx(x_shape, DType::Float64);
  dx.fill(0.0);  // a plan that writes part of dx (cropping's adjoint) leaves the rest zero
  ops::strided_view(G, dx, adjoint);
  expect_close(dx, numeric_gradient(x, loss), "adjoint " + ops::describe(adjoint));
}

TEST(StridedView, AdjointsMatchFiniteDifferences) {
  {  // transpose (2, 3, 4) -> (2, 4, 3) and back
    ops::ViewPlan f{{2, 4, 3}, {12, 1, 4}, {12, 3, 1}}, b{{2, 3, 4}, {12, 1, 3}, {12, 4, 1}};
    expect_adjoint({2, 3, 4}, {2, 4, 3}, f, b);
  }
  {  // nearest upsampling of (2, 2, 3, 1) by (2, 3): (b, h, sh, w, sw, c) reads and its sum
    ops::ViewPlan f{{2, 2, 2, 3, 3, 1}, {6, 3, 0, 1, 0, 1}, {36, 18, 9, 3, 1, 1}};
    ops::ViewPlan b{{2, 2, 3, 1}, {36, 18, 3, 1}, {6, 3, 1, 1}, 0, 0, {2, 3}, {9, 1}};
    expect_adjoint({2, 2, 3, 1}, {2, 4, 9, 1}, f, b);
  }
  {  // padding (2, 3, 2) by (1, 2) rows: a window of (2, 6, 2), and cropping it back
    ops::ViewPlan f{{2, 3, 2}, {6, 2, 1}, {12, 2, 1}, 0, 2}, b{{2, 3, 2}, {12, 2, 1}, {6, 2, 1}, 2, 0};
    expect_adjoint({2, 3, 2}, {2, 6, 2}, f, b);
    expect_adjoint({2, 6, 2}, {2, 3, 2}, b, f);
  }
}

TEST(StridedView, CpuLoopIsBitwiseTheSumInRepeatOrder) {
  // Float32 sums of repeats in row-major order of reduce_extent, as the CUDA kernel adds them.
  std::mt19937_64 rng(7);
  const Tensor y = random_tensor({1, 3, 5}, rng, -1, 1, DType::Float32);
  ops::ViewPlan sum{{1, 5}, {15, 1}, {5, 1}, 0, 0, {3}, {5}};
  Tensor dx({1, 5}, DType::Float32);
  ops::strided_view(y, dx, sum);
  for (int f = 0; f < 5; ++f) {
    float want = y.data<float>()[f];
    for (int r = 1; r < 3; ++r) want = want + y.data<float>()[r * 5 + f];
    EXPECT_EQ(dx.data<float>()[f], want) << f;
  }
}

void expect_refused(const Tensor& src, Tensor& dst, const ops::ViewPlan& plan, const std::string& why) {
  try {
    ops::strided_view(src, dst, plan);
    ADD_FAILURE() << "accepted a plan that " << why;
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("[ops] strided_view: ", 0), 0u) << m;
    EXPECT_NE(m.find(why), std::string::npos) << m;
    EXPECT_NE(m.find(to_string(src.shape())), std::string::npos) << m;
  }
}

TEST(StridedView, RefusesBadPlansBeforeWriting) {
  const Tensor x = iota({2, 3});
  Tensor y = Tensor::zeros({2, 3}, DType::Float64);
  expect_refused(x, y, {{2, 3}, {3, 1}, {3, 1}, 1, 0}, "reads past the end of src");
  expect_refused(x, y, {{2, 3}, {3, 1}, {3, 1}, 0, 1}, "writes past the end of dst");
  expect_refused(x, y, {{2, 3}, {3, 1}, {0, 1}}, "writes some element more than once");
  expect_refused(x, y, {{2, 3}, {3, 1}, {3}}, "one entry per extent");
  expect_refused(x, y, {{2, 3}, {3, -1}, {3, 1}}, ">= 0");
  expect_refused(x, y, {{6}, {1}, {1}, 0, 0, {0}, {1}}, "empty reduction");
  expect_refused(x, y, {{1, 1, 1, 1, 1, 1, 1, 1, 1}, {0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0, 0}},
                 "1 to 8 dimensions");
  Tensor f32 = Tensor::zeros({2, 3}, DType::Float32);
  expect_refused(x, f32, {{2, 3}, {3, 1}, {3, 1}}, "one floating dtype");
  Tensor same = iota({2, 3});
  expect_refused(same, same, {{2, 3}, {3, 1}, {3, 1}}, "must not be one storage");
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y.data<double>()[i], 0.0);
}

}  // namespace
}  // namespace mdtrain
