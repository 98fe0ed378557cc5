// The shared communicator suite on the "nccl" backend, one in-process group per size 1..GPUs and
// groups split from all of them, plus what only device memory can show. Skipped, with the reason, without NCCL or
// without a GPU.
#include "distribute/communicator_suite.cpp"  // the suite's TEST_Ps, instantiated here for NCCL

#include <cmath>
#include <limits>

#include "gpu_test_util.h"
#include "mdtrain/distribute/nccl/nccl_backend.h"
#include "mdtrain/distribute/optional_backends.h"
#include "mdtrain/distribute/registry.h"

namespace mdtrain::testing {
namespace {

std::string nccl_skip_reason() {
  if (!nccl_available()) return "mdtrain was built without NCCL";
  if (cuda::device_count() == 0) return "no CUDA device: " + cuda::unavailable_reason();
  return "";
}

std::vector<BackendCase> nccl_cases(int min_ranks) {
  std::vector<BackendCase> cases;
  const std::string skip = nccl_skip_reason();
  const int gpus = cuda::device_count();
  for (int n = min_ranks; n <= gpus; ++n)
    cases.push_back({"nccl_" + std::to_string(n), n, [n] { return create_communicators("nccl", n); },
                     /*rank_order_reduction=*/false, /*supports_timeout=*/true});
  if (cases.empty()) {
    BackendCase skipped{"nccl_unavailable", 2, [] { return Comms(); }, false, false};
    skipped.skip_reason = skip.empty() ? "one GPU: the peer tests need two" : skip;
    cases.push_back(skipped);
  }
  return cases;
}

auto case_name = [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; };

INSTANTIATE_TEST_SUITE_P(Nccl, CommunicatorSuite, ::testing::ValuesIn(nccl_cases(1)), case_name);
INSTANTIATE_TEST_SUITE_P(Nccl, CommunicatorPeerSuite, ::testing::ValuesIn(nccl_cases(2)), case_name);

// Groups split from every GPU's group (ncclCommSplit): the even ranks, and everyone reversed.
std::vector<BackendCase> nccl_split_cases() {
  const std::string skip = nccl_skip_reason();
  const int gpus = skip.empty() ? cuda::device_count() : 0;
  if (gpus < 2) {
    BackendCase skipped{"nccl_split_unavailable", 2, [] { return Comms(); }, false, false};
    skipped.skip_reason = skip.empty() ? "one GPU: a split needs two" : skip;
    return {skipped};
  }
  const auto all = [gpus] { return create_communicators("nccl", gpus); };
  return {
      {"nccl_split_even", (gpus + 1) / 2,
       [all] {
         return split_group(
             all(), [](int r) { return r % 2; }, [](int r) { return r; }, 0);
       },
       false, true},
      {"nccl_split_reversed", gpus,
       [all] {
         return split_group(
             all(), [](int) { return 0; }, [](int r) { return -r; }, 0);
       },
       false, true},
  };
}

INSTANTIATE_TEST_SUITE_P(NcclSplit, CommunicatorSuite, ::testing::ValuesIn(nccl_split_cases()), case_name);

#define MDTRAIN_REQUIRE_NCCL()                  \
  do {                                          \
    const std::string why = nccl_skip_reason(); \
    if (!why.empty()) GTEST_SKIP() << why;      \
  } while (0)

// Device buffers are used in place; Max/Min of floats go through the NaN-propagating fold.
TEST(NcclCommunicator, MaxAndMinOfDeviceBuffersPropagateNaN) {
  MDTRAIN_REQUIRE_NCCL();
  const int n = cuda::device_count();
  Comms comms = create_communicators("nccl", n);
  std::vector<std::vector<float>> got(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    const Device gpu{DeviceKind::CUDA, comm.rank()};
    for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
      Tensor host({3}, DType::Float32);
      host.data<float>()[0] = comm.rank() == n - 1 ? std::numeric_limits<float>::quiet_NaN() : 1.0f;
      host.data<float>()[1] = static_cast<float>(comm.rank());
      host.data<float>()[2] = -static_cast<float>(comm.rank());
      Tensor dev({3}, DType::Float32, gpu);
      dev.copy_from(host);
      comm.all_reduce(dev, op);
      host.copy_from(dev);
      got[local].insert(got[local].end(), host.data<float>(), host.data<float>() + 3);
    }
  });
  for (const auto& g : got) {
    ASSERT_EQ(g.size(), 6u);
    EXPECT_TRUE(std::isnan(g[0]) && std::isnan(g[3]));
    EXPECT_EQ(g[1], n - 1.0f);
    EXPECT_EQ(g[2], 0.0f);
    EXPECT_EQ(g[4], 0.0f);
    EXPECT_EQ(g[5], -(n - 1.0f));
  }
}

// Buckets enqueued back to back, then one wait: the overlap path of the gradient reducer.
TEST(NcclCommunicator, EnqueuedAllReducesFinishAtWait) {
  MDTRAIN_REQUIRE_NCCL();
  const int n = cuda::device_count();
  Comms comms = create_communicators("nccl", n);
  std::vector<std::vector<double>> got(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    const Device gpu{DeviceKind::CUDA, comm.rank()};
    std::vector<Tensor> buckets;
    for (int b = 0; b < 4; ++b) {
      Tensor t({1000 + b}, DType::Float64, gpu);
      t.fill(comm.rank() + b);
      buckets.push_back(t);
      EXPECT_TRUE(comm.enqueues_all_reduce(gpu));
      comm.enqueue_all_reduce(t.raw(), static_cast<std::size_t>(t.numel()), DType::Float64, ReduceOp::Sum);
    }
    comm.wait_enqueued();
    for (auto& t : buckets) got[local].push_back(gpu_testing::to_host(t).data<double>()[0]);
  });
  const double ranks_sum = n * (n - 1) / 2.0;
  for (const auto& g : got)
    for (int b = 0; b < 4; ++b) EXPECT_EQ(g[static_cast<std::size_t>(b)], ranks_sum + n * b);
}

}  // namespace
}  // namespace mdtrain::testing
