// ops::copy_runs: runs of elements at strides between tensors (tensor parallelism's pieces), and
// the runs that would leave a tensor refused before anything is written.
#include <gtest/gtest.h>

#include <stdexcept>

#include "mdtrain/ops/strided_copy.h"

namespace mdtrain {
namespace {

TEST(CopyRuns, CopiesRunsAtStridesBothWays) {
  Tensor whole({3, 4}, DType::Float32), piece({3, 2}, DType::Float32);
  for (int i = 0; i < 12; ++i) whole.data<float>()[i] = static_cast<float>(i);
  // Columns 2..3 of every row: 3 runs of 2, stride 4 in the whole, 2 in the piece.
  ops::copy_runs(whole, 2, 4, piece, 0, 2, 3, 2);
  const float want[] = {2, 3, 6, 7, 10, 11};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(piece.data<float>()[i], want[i]) << i;
  Tensor back = Tensor::zeros({3, 4}, DType::Float32);
  ops::copy_runs(piece, 0, 2, back, 2, 4, 3, 2);
  const float put[] = {0, 0, 2, 3, 0, 0, 6, 7, 0, 0, 10, 11};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(back.data<float>()[i], put[i]) << i;
}

TEST(CopyRuns, RefusesRunsOutsideATensorAndMixedDtypes) {
  Tensor a = Tensor::zeros({3, 4}, DType::Float32), b = Tensor::zeros({3, 2}, DType::Float32);
  EXPECT_THROW(ops::copy_runs(a, 3, 4, b, 0, 2, 3, 2), std::invalid_argument);  // last run ends at 13 > 12
  EXPECT_THROW(ops::copy_runs(a, 0, 4, b, 0, 2, 4, 2), std::invalid_argument);  // a 4th run past b
  Tensor d = Tensor::zeros({3, 2}, DType::Float64);
  EXPECT_THROW(ops::copy_runs(a, 0, 4, d, 0, 2, 3, 2), std::invalid_argument);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(b.data<float>()[i], 0.0f);
}

}  // namespace
}  // namespace mdtrain
