#pragma once
// What the GPU training tests share (training_test, conv_training_test,
// normalization_training_test): strategies on one or two GPUs (CPU devices in place of them when
// MDTRAIN_GPU_TESTS_ON_CPU=1), the tolerance of GPU weights against the CPU's, and reading logs.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "mdtrain/model/logs.h"
#include "mdtrain/strategy/mirrored_strategy.h"
#include "mdtrain/strategy/one_device_strategy.h"

namespace mdtrain::gpu_testing {

// A few epochs of float32 steps whose sums are associated differently on the GPU (cuBLAS vs
// OpenBLAS, chunked channel sums, NCCL's all-reduce order), amplified over the steps: the weights
// agree with the CPU's well inside this.
constexpr double kTrainingRtol = 1e-3, kTrainingAtol = 1e-4;

inline void expect_weights_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const std::string diff = compare(got[i], want[i], kTrainingRtol, kTrainingAtol);
    EXPECT_TRUE(diff.empty()) << what << ", weight " << i << ": " << diff;
  }
}

inline double log_of(const Logs& logs, const std::string& name) {
  for (const auto& [k, v] : logs)
    if (k == name) return v;
  ADD_FAILURE() << "no " << name << " in the logs";
  return 0;
}

inline std::shared_ptr<Strategy> one_gpu() { return std::make_shared<OneDeviceStrategy>(kGpu); }
inline std::shared_ptr<Strategy> cpu() { return std::make_shared<OneDeviceStrategy>(Device{}); }

inline std::shared_ptr<Strategy> two_gpus() {
  if (harness_on_cpu())
    return std::make_shared<MirroredStrategy>(std::vector<Device>{{DeviceKind::CPU, 0}, {DeviceKind::CPU, 1}});
  return std::make_shared<MirroredStrategy>(
      std::vector<Device>{{DeviceKind::CUDA, 0}, {DeviceKind::CUDA, 1}});  // "auto": NCCL
}

}  // namespace mdtrain::gpu_testing
