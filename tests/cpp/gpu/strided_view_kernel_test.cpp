// ops::strided_view on a GPU against its CPU loop: the same elements read and the repeats summed
// in the same order (math::view_element), so the same bits.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "mdtrain/ops/strided_view.h"

namespace mdtrain {
namespace {

using namespace gpu_testing;

TEST(CudaKernels, StridedViewMatchesCpuBitwise) {
  MDTRAIN_REQUIRE_GPU();
  // A transpose, a stride-0 repeat with an offset into a larger dst, and the sum over UpSampling2D
  // repeats (batch 3, 5x4 image of 2 channels upsampled by (2, 3)).
  struct Case {
    Shape src, dst;
    ops::ViewPlan plan;
  };
  const Case cases[] = {
      {{3, 20, 7}, {3, 7, 20}, {{3, 7, 20}, {140, 1, 7}, {140, 20, 1}}},
      {{3, 7}, {3, 6, 9}, {{3, 4, 7}, {7, 0, 1}, {54, 9, 1}, 0, 11}},
      {{3, 10, 12, 2}, {3, 5, 4, 2}, {{3, 5, 4, 2}, {240, 48, 6, 1}, {40, 8, 2, 1}, 0, 0, {2, 3}, {24, 2}}},
  };
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (const auto& c : cases) {
      const Tensor x = random_tensor(c.src, dt, 900);
      Tensor want(c.dst, dt);
      want.fill(0.5);
      Tensor got = to_gpu(want);
      ops::strided_view(x, want, c.plan);
      ops::strided_view(to_gpu(x), got, c.plan);
      EXPECT_TRUE(same_bytes(got, want)) << name_of(dt) << " " << ops::describe(c.plan);
    }
  }
}

}  // namespace
}  // namespace mdtrain
