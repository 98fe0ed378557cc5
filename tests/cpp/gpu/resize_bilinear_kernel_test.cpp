// ops::resize_bilinear and its backward on a GPU against the CPU loops (the same math per element;
// the GPU may contract multiply-adds, hence a tolerance).
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "mdtrain/ops/resize_bilinear.h"

namespace mdtrain {
namespace {

using namespace gpu_testing;

TEST(CudaKernels, ResizeBilinearMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : {DType::Float32, DType::Float64}) {
    const Tensor x = random_tensor({3, 5, 4, 2}, dt, 910), dy = random_tensor({3, 10, 12, 2}, dt, 911);
    Tensor y({3, 10, 12, 2}, dt), dx({3, 5, 4, 2}, dt);
    ops::resize_bilinear(x, y);
    ops::resize_bilinear_backward(dy, dx);
    Tensor gy({3, 10, 12, 2}, dt, kGpu), gdx({3, 5, 4, 2}, dt, kGpu);
    ops::resize_bilinear(to_gpu(x), gy);
    ops::resize_bilinear_backward(to_gpu(dy), gdx);
    EXPECT_EQ(compare(gy, y, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
    EXPECT_EQ(compare(gdx, dx, rtol_of(dt), rtol_of(dt)), "") << name_of(dt);
  }
}

}  // namespace
}  // namespace mdtrain
