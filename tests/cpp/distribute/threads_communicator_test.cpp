// The shared suite on the threads backend for every group size 1..8 (more ranks than the 2
// cores of CI, so the spin-then-yield waiting is exercised), plus what only in-process groups
// can check cheaply: 64 MB buffers (for 2 and 3 ranks only, to keep the suite short).
#include "communicator_suite.h"

#include "mdtrain/distribute/threads/threads_communicator.h"

namespace mdtrain::testing {
namespace {

std::vector<BackendCase> threads_cases() {
  std::vector<BackendCase> cases;
  for (int n = 1; n <= 8; ++n) {
    cases.push_back(
        {"threads_" + std::to_string(n), n, [n] { return ThreadsCommunicator::create_group(n); }, true, true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Threads, CommunicatorSuite, ::testing::ValuesIn(threads_cases()),
                         [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; });

std::vector<BackendCase> threads_peer_cases() {
  auto cases = threads_cases();
  cases.erase(cases.begin());  // a single rank has no peer to miss
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Threads, CommunicatorPeerSuite, ::testing::ValuesIn(threads_peer_cases()),
                         [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; });

TEST(ThreadsCommunicator, CreateGroupNeedsAtLeastOneRank) {
  EXPECT_THROW(ThreadsCommunicator::create_group(0), std::invalid_argument);
  auto comms = ThreadsCommunicator::create_group(3);
  ASSERT_EQ(comms.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(comms[r]->rank(), r);
    EXPECT_EQ(comms[r]->backend(), "threads");
  }
}

// 64 MB per rank: chunks of many cache lines per rank, uneven last chunk (3 ranks).
class ThreadsLarge : public ::testing::TestWithParam<int> {};

TEST_P(ThreadsLarge, AllReduceOf64MBIsBitwiseTheSerialReference) {
  const int n = GetParam();
  constexpr std::size_t kCount = (64u << 20) / sizeof(float) + 3;
  auto comms = ThreadsCommunicator::create_group(n);
  std::vector<std::vector<float>> data(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    data[local] = make_input<float>(77, comm.rank(), kCount);
    comm.all_reduce(data[local].data(), kCount, DType::Float32, ReduceOp::Sum);
  });
  const auto want = reference_reduce<float>(77, n, 0, kCount, ReduceOp::Sum);
  for (std::size_t local = 0; local < comms.size(); ++local) {
    EXPECT_EQ(compare(data[local], want, true, n), "") << "rank " << local;
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, ThreadsLarge, ::testing::Values(2, 3));

}  // namespace
}  // namespace mdtrain::testing

namespace mdtrain::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Threads, PointToPointSuite, ::testing::ValuesIn(threads_cases()),
                         [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Threads, PointToPointPeerSuite, ::testing::ValuesIn(threads_peer_cases()),
                         [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; });

}  // namespace
}  // namespace mdtrain::testing
