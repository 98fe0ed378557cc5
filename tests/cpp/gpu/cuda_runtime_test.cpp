// What the CUDA backend does on a machine without a GPU (and in a CPU-only build): these run
// everywhere and check the promises made to users there. The device tests at the bottom need a GPU.
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "mdtrain/core/cuda/stream.h"
#include "mdtrain/core/cuda/device_memory.h"
#include "mdtrain/distribute/nccl/nccl_backend.h"
#include "mdtrain/distribute/optional_backends.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {
namespace {

using namespace gpu_testing;

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

// No driver or no device is not an error: zero devices and a reason.
TEST(CudaRuntime, DeviceCountIsZeroWithAReasonWhenThereIsNoGpu) {
  if (cuda::device_count() > 0) {
    EXPECT_EQ(cuda::unavailable_reason(), "");
    EXPECT_TRUE(cuda::built_with_cuda());
    EXPECT_FALSE(cuda::device_name(0).empty());
    return;
  }
  const std::string why = cuda::unavailable_reason();
  EXPECT_FALSE(why.empty());
  if (cuda::built_with_cuda()) {
    // The runtime's own words (e.g. "CUDA driver version is insufficient for CUDA runtime
    // version" without a driver).
    EXPECT_NE(why.find("cudaGetDeviceCount"), std::string::npos) << why;
  } else {
    EXPECT_NE(why.find("-DMDTRAIN_CUDA=ON"), std::string::npos) << why;
  }
  std::cout << "[ info     ] no GPU here: " << why << "\n";
}

TEST(CudaRuntime, GpuTensorsWithoutAGpuAreAClearError) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is present";
  // A CUDA device, not kGpu: what is checked is the no-GPU behaviour, also when
  // MDTRAIN_GPU_TESTS_ON_CPU=1 maps kGpu to the host.
  const Device gpu0{DeviceKind::CUDA, 0};
  const std::string msg = message_of([&] { Tensor t({2, 3}, DType::Float32, gpu0); });
  EXPECT_NE(msg.find("/device:GPU:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find(cuda::unavailable_reason()), std::string::npos) << msg;
  EXPECT_THROW(cuda::require_device(0), std::invalid_argument);
  EXPECT_THROW(cuda::compute_stream(0), std::invalid_argument);
  EXPECT_THROW(cuda::Event(0), std::invalid_argument);
  // Ops on (foreign) memory labelled as a GPU's refuse before touching it.
  std::vector<float> host(6, 1.0f);
  Tensor a = Tensor::wrap(host.data(), {2, 3}, DType::Float32, nullptr, gpu0);
  const std::string op_msg = message_of([&] { ops::multiply(a, a, a); });
  EXPECT_EQ(op_msg.rfind("[multiply] tensor is on /device:GPU:0: ", 0), 0u) << op_msg;
}

TEST(CudaRuntime, FailedCallsNameTheCallTheErrorAndThePlace) {
  const std::string msg = message_of([] {
    cuda::throw_call_error("cuda", "cudaMemcpyAsync(dst, src, n, kind, s)", cuda::error_string(1), "/x/y/runtime.cpp",
                           88);
  });
  if (cuda::built_with_cuda()) {
    EXPECT_EQ(msg, "[cuda] cudaMemcpyAsync failed: invalid argument (at runtime.cpp:88)");
    const std::string launch = message_of([] {
      cuda::throw_call_error("cuda", "dropout_kernel<<<>>>", "too many resources requested for launch", "k.cu", 3);
    });
    EXPECT_EQ(launch, "[cuda] launch of dropout_kernel failed: too many resources requested for launch (at k.cu:3)");
  } else {
    EXPECT_NE(msg.find("[cuda] cudaMemcpyAsync"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CUDA error 1"), std::string::npos) << msg;
  }
}

TEST(CudaRuntime, NcclWithoutAGpuOrWithoutNcclIsAClearError) {
  if (cuda::device_count() > 0 && nccl_available()) GTEST_SKIP() << "NCCL and a GPU are present";
  const std::string msg = message_of([] { make_nccl_communicators(2); });
  EXPECT_EQ(msg.rfind("[nccl] ", 0), 0u) << msg;
  if (nccl_available()) {
    EXPECT_NE(msg.find("needs one GPU per rank"), std::string::npos) << msg;
    EXPECT_GE(nccl_version(), 20000);  // NCCL 2.x linked
    EXPECT_THROW(make_nccl_rank_communicator("short", 0, 1, 0), std::invalid_argument);
  } else {
    EXPECT_NE(msg.find("-DMDTRAIN_NCCL=ON"), std::string::npos) << msg;
    EXPECT_EQ(nccl_version(), 0);
    EXPECT_THROW(nccl_unique_id(), std::runtime_error);
  }
}

// ---- with a GPU ---------------------------------------------------------------------------------

TEST(CudaRuntime, DeviceAllocatorReusesFreedBlocks) {
  MDTRAIN_REQUIRE_REAL_GPU();
  cuda::release_cached_memory();
  const cuda::MemoryStats before = cuda::memory_stats(0);
  { Tensor t({1000, 1000}, DType::Float32, kGpu); }
  { Tensor t({1000, 1000}, DType::Float32, kGpu); }  // the same size class: from the cache
  const cuda::MemoryStats after = cuda::memory_stats(0);
  EXPECT_EQ(after.device_allocations - before.device_allocations, 1u);
  EXPECT_GE(after.cache_hits - before.cache_hits, 1u);
  EXPECT_GE(after.cached_bytes, 4000000u);
  cuda::release_cached_memory();
  EXPECT_EQ(cuda::memory_stats(0).cached_bytes, 0u);
}

TEST(CudaRuntime, StreamsAndEventsOrderWork) {
  MDTRAIN_REQUIRE_REAL_GPU();
  cuda::Stream& compute = cuda::compute_stream(0);
  cuda::Stream& comm = cuda::communication_stream(0);
  EXPECT_NE(compute.handle(), comm.handle());
  EXPECT_EQ(&compute, &cuda::compute_stream(0));  // one per device
  cuda::Event e(0);
  EXPECT_TRUE(e.query());  // never recorded
  Tensor t({1 << 20}, DType::Float32, kGpu);
  t.fill(3);  // on the compute stream
  e.record(compute);
  comm.wait(e);
  comm.synchronize();
  e.synchronize();
  EXPECT_TRUE(e.query());
  EXPECT_EQ(to_host(t).data<float>()[(1 << 20) - 1], 3.0f);
  EXPECT_THROW(cuda::require_device(cuda::device_count()), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain
