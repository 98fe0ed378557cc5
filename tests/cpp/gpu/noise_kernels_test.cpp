// The noise and activity-penalty ops (ops/noise.h) on a GPU against the CPU loops: the same
// per-element math (ops/noise_math.h). The dropout masks are integer comparisons of the same
// Philox bits: bitwise. The normals go through log/cos, which may differ in the last bit between
// libm and CUDA: a tolerance. Every draw is keyed on a global offset, as a replica's slice is.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "mdtrain/ops/noise.h"

namespace mdtrain {
namespace {

using namespace gpu_testing;

constexpr DType kFloats[] = {DType::Float32, DType::Float64};

TEST(CudaNoiseKernels, GaussianNoiseMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : kFloats) {
    const Tensor x = random_tensor({37, 11}, dt, 700);
    Tensor y(x.shape(), dt), gy(x.shape(), dt, kGpu);
    ops::gaussian_noise(x, 0.3, 99, 5, 100001, y);
    ops::gaussian_noise(to_gpu(x), 0.3, 99, 5, 100001, gy);
    EXPECT_EQ(compare(gy, y, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
  }
}

TEST(CudaNoiseKernels, GaussianDropoutMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : kFloats) {
    const Tensor x = random_tensor({29, 7}, dt, 701);
    Tensor m(x.shape(), dt), y(x.shape(), dt), gm(x.shape(), dt, kGpu), gy(x.shape(), dt, kGpu);
    ops::gaussian_dropout(x, 0.5, 98, 3, 77, m, y);
    ops::gaussian_dropout(to_gpu(x), 0.5, 98, 3, 77, gm, gy);
    EXPECT_EQ(compare(gm, m, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
    EXPECT_EQ(compare(gy, y, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
  }
}

TEST(CudaNoiseKernels, DropoutMaskAndChannelScaleMatchCpuBitwise) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : kFloats) {
    for (double rate : {0.0, 0.25, 0.8}) {
      Tensor mask({9, 6}, dt), gmask({9, 6}, dt, kGpu);
      ops::dropout_mask(rate, 1234, 7, 1003, mask);
      ops::dropout_mask(rate, 1234, 7, 1003, gmask);
      EXPECT_TRUE(same_bytes(gmask, mask)) << name_of(dt) << " rate " << rate;
      const Tensor x = random_tensor({9, 4, 5, 6}, dt, 702);
      Tensor y(x.shape(), dt), gy(x.shape(), dt, kGpu);
      ops::scale_channels(x, mask, y);
      ops::scale_channels(to_gpu(x), to_gpu(mask), gy);
      EXPECT_TRUE(same_bytes(gy, y)) << name_of(dt) << " rate " << rate;  // one product per element
    }
  }
}

TEST(CudaNoiseKernels, ActivityPenaltyMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : kFloats) {
    Tensor x = random_tensor({300, 17}, dt, 703);
    const Tensor dy = random_tensor({300, 17}, dt, 704);
    // Zeros: sign(0) = 0 on both.
    for (std::int64_t i = 0; i < x.numel(); i += 13) {
      if (dt == DType::Float32) x.data<float>()[i] = 0.0f;
      else x.data<double>()[i] = 0.0;
    }
    const double cpu = ops::activity_penalty(x, 0.01, 0.2);
    const double gpu = ops::activity_penalty(to_gpu(x), 0.01, 0.2);
    EXPECT_NEAR(gpu, cpu, 1e-12 * std::fabs(cpu)) << name_of(dt);  // double partials, another order
    Tensor dx(x.shape(), dt), gdx(x.shape(), dt, kGpu);
    ops::activity_penalty_backward(x, dy, 0.01, 0.2, 1.0 / 300, dx);
    ops::activity_penalty_backward(to_gpu(x), to_gpu(dy), 0.01, 0.2, 1.0 / 300, gdx);
    EXPECT_EQ(compare(gdx, dx, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
  }
}

}  // namespace
}  // namespace mdtrain
