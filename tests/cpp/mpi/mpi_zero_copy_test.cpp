// The Tensor forms of all_reduce and broadcast work on the tensors' memory directly (their owners
// are known), the raw-pointer forms through mdtrain's staging copies: both must give the same
// bits. Pipelined in small uneven pieces (nothing fused), with values whose float sums depend on
// the order of the fold, so a different order or a misplaced slice shows.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "mdtrain/core/tensor.h"
#include "mdtrain/distribute/mpi/mpi_communicator.h"

namespace mdtrain::testing {
namespace {

// 100,003 floats of mixed magnitudes, different on every rank.
std::vector<float> rank_values(int rank) {
  std::mt19937 gen(1234u + static_cast<unsigned>(rank));
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<float> v(100003);
  for (float& x : v) x = std::ldexp(mantissa(gen), exponent(gen));
  return v;
}

MpiOptions pipelined() { return MpiOptions{4096 + 12, 3, 0}; }  // uneven pieces, 3 in flight

TEST(MpiZeroCopy, AllReduceOfATensorHasTheBitsOfTheStagedForm) {
  MpiCommunicator comm(pipelined());
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max}) {
    std::vector<float> staged = rank_values(comm.rank());
    comm.all_reduce(staged.data(), staged.size(), DType::Float32, op);
    Tensor direct({static_cast<std::int64_t>(staged.size())}, DType::Float32);
    const std::vector<float> mine = rank_values(comm.rank());
    std::memcpy(direct.raw(), mine.data(), mine.size() * sizeof(float));
    comm.all_reduce(direct, op);
    EXPECT_EQ(std::memcmp(direct.raw(), staged.data(), staged.size() * sizeof(float)), 0) << name_of(op);
  }
}

TEST(MpiZeroCopy, BroadcastOfATensorHasTheBitsOfTheRoot) {
  MpiCommunicator comm(pipelined());
  const int root = comm.size() - 1;
  Tensor t({100003}, DType::Float32);
  const std::vector<float> mine = rank_values(comm.rank());
  std::memcpy(t.raw(), mine.data(), mine.size() * sizeof(float));
  comm.broadcast(t, root);
  const std::vector<float> want = rank_values(root);
  EXPECT_EQ(std::memcmp(t.raw(), want.data(), want.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace mdtrain::testing
