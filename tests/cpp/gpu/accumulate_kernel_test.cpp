// ops::add_into on a GPU against its CPU loop: one addition per element, so the same bits.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "mdtrain/ops/accumulate.h"

namespace mdtrain {
namespace {

using namespace gpu_testing;

TEST(CudaKernels, AddIntoMatchesCpuBitwise) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor acc = random_tensor({1000, 3}, dt, 700);
    const Tensor x = random_tensor({1000, 3}, dt, 701);
    Tensor gacc = to_gpu(acc);
    ops::add_into(acc, x);
    ops::add_into(gacc, to_gpu(x));
    EXPECT_TRUE(same_bytes(gacc, acc)) << name_of(dt);
  }
}

}  // namespace
}  // namespace mdtrain
