// The kernels of the activation layers with arguments and of UnitNormalization
// (ops/parametric_activation.h, ops/over_axes.h) on a GPU against the CPU loops: the same math per
// element or row; the GPU's exp and contracted multiply-adds allow a tolerance.
#include <gtest/gtest.h>

#include <vector>

#include "gpu_test_util.h"
#include "mdtrain/ops/over_axes.h"
#include "mdtrain/ops/parametric_activation.h"

namespace mdtrain {
namespace {

using namespace gpu_testing;
using Kind = ops::ParametricActivation::Kind;

TEST(CudaKernels, ParametricActivationMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  std::vector<ops::ParametricActivation> cases(4);
  cases[1].negative_slope = 0.3;                                                       // LeakyReLU
  cases[2].negative_slope = 0.1, cases[2].max_value = 1.5, cases[2].threshold = 0.25;  // ReLU's arguments
  cases[3].kind = Kind::ELU, cases[3].alpha = 0.7;
  for (DType dt : {DType::Float32, DType::Float64})
    for (const auto& a : cases) {
      const Tensor x = random_tensor({7, 33}, dt, 920, -3, 3), dy = random_tensor({7, 33}, dt, 921);
      Tensor y({7, 33}, dt), dx({7, 33}, dt), gy({7, 33}, dt, kGpu), gdx({7, 33}, dt, kGpu);
      ops::parametric_activation(x, a, y);
      ops::parametric_activation_backward(a, x, dy, dx);
      const Tensor gx = to_gpu(x);
      ops::parametric_activation(gx, a, gy);
      ops::parametric_activation_backward(a, gx, to_gpu(dy), gdx);
      EXPECT_EQ(compare(gy, y, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
      EXPECT_EQ(compare(gdx, dx, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
    }
}

TEST(CudaKernels, PreluMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : {DType::Float32, DType::Float64})
    for (const Shape& alpha_shape : {Shape{3, 4, 5}, Shape{1, 1, 5}, Shape{3, 1, 1}}) {
      const Tensor x = random_tensor({6, 3, 4, 5}, dt, 930), dy = random_tensor({6, 3, 4, 5}, dt, 931);
      const Tensor alpha = random_tensor(alpha_shape, dt, 932);
      Tensor y(x.shape(), dt), dx(x.shape(), dt), dalpha(alpha_shape, dt);
      ops::prelu(x, alpha, y);
      ops::prelu_backward(x, alpha, dy, &dx, dalpha);
      Tensor gy(x.shape(), dt, kGpu), gdx(x.shape(), dt, kGpu), gdalpha(alpha_shape, dt, kGpu);
      const Tensor gx = to_gpu(x), galpha = to_gpu(alpha);
      ops::prelu(gx, galpha, gy);
      ops::prelu_backward(gx, galpha, to_gpu(dy), &gdx, gdalpha);
      EXPECT_EQ(compare(gy, y, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
      EXPECT_EQ(compare(gdx, dx, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
      EXPECT_EQ(compare(gdalpha, dalpha, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
    }
}

TEST(CudaKernels, SoftmaxOverAxesMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : {DType::Float32, DType::Float64})
    for (const std::vector<int>& axes : {std::vector<int>{3}, {1}, {1, 3}, {2, 3}}) {
      const Tensor x = random_tensor({5, 3, 4, 6}, dt, 940, -4, 4), dy = random_tensor({5, 3, 4, 6}, dt, 941);
      Tensor y(x.shape(), dt), dx(x.shape(), dt), gy(x.shape(), dt, kGpu), gdx(x.shape(), dt, kGpu);
      ops::softmax_over_axes(x, axes, y);
      ops::softmax_over_axes_backward(y, dy, axes, dx);
      ops::softmax_over_axes(to_gpu(x), axes, gy);
      ops::softmax_over_axes_backward(to_gpu(y), to_gpu(dy), axes, gdx);
      EXPECT_EQ(compare(gy, y, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
      EXPECT_EQ(compare(gdx, dx, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
    }
}

TEST(CudaKernels, UnitNormalizeMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : {DType::Float32, DType::Float64})
    for (const std::vector<int>& axes : {std::vector<int>{3}, {1}, {1, 3}, {2, 3}}) {
      const Tensor x = random_tensor({5, 3, 4, 6}, dt, 950), dy = random_tensor({5, 3, 4, 6}, dt, 951);
      Tensor y(x.shape(), dt), dx(x.shape(), dt), gy(x.shape(), dt, kGpu), gdx(x.shape(), dt, kGpu);
      ops::unit_normalize(x, axes, y);
      ops::unit_normalize_backward(x, dy, axes, dx);
      const Tensor gx = to_gpu(x);
      ops::unit_normalize(gx, axes, gy);
      ops::unit_normalize_backward(gx, to_gpu(dy), axes, gdx);
      EXPECT_EQ(compare(gy, y, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
      EXPECT_EQ(compare(gdx, dx, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
    }
}

}  // namespace
}  // namespace mdtrain
