// PipelineStrategy on GPUs: two stages on two GPUs (NCCL send / recv between them) train like one
// device to float32 rounding (with BatchNormalization: like the pipeline on CPU devices), Adam; skips, saying
// why, without 2 GPUs (MDTRAIN_GPU_TESTS_ON_CPU=1 runs it on two logical CPU devices in place of
// them: a check of the test, not of CUDA). Runs everywhere: a mesh mixing CPU devices and GPUs, GPUs
// this process does not see, and GPUs out of mesh order are refused before any training.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "gpu/training_util.h"
#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/model/model.h"
#include "mdtrain/nn/batch_normalization.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/pipeline_executor.h"
#include "mdtrain/strategy/pipeline_strategy.h"

namespace mdtrain {
namespace {

using gpu_testing::expect_weights_close;
using gpu_testing::harness_on_cpu;

constexpr std::int64_t kRows = 96, kFeatures = 12, kClasses = 5, kBatch = 32;

const Device kCpu0{DeviceKind::CPU, 0}, kGpu0{DeviceKind::CUDA, 0}, kGpu1{DeviceKind::CUDA, 1};

// Dense, Dropout (masks keyed by global row), [BatchNormalization] | Dense, Dense: two stages.
std::unique_ptr<Model> mlp(std::shared_ptr<Strategy> strategy, bool batch_norm) {
  auto m = std::make_unique<Model>("pipe_mlp", 17);
  Dense::Options hidden;
  hidden.units = 32;
  hidden.activation = "relu";
  m->add(std::make_shared<Dense>("hidden0", hidden));
  m->add(std::make_shared<Dropout>("dropout", 0.1, 5));
  if (batch_norm) m->add(std::make_shared<BatchNormalization>("norm", BatchNormalization::Options{}));
  m->add(std::make_shared<Dense>("hidden1", hidden));
  Dense::Options out;
  out.units = kClasses;
  m->add(std::make_shared<Dense>("out", out));
  m->build({kFeatures});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")),
             std::shared_ptr<Optimizer>(make_optimizer("adam")), {}, std::move(strategy));
  return m;
}

std::shared_ptr<PipelineStrategy> two_stages(DeviceKind kind, PipelineScheduleKind schedule, bool batch_norm) {
  return std::make_shared<PipelineStrategy>(DeviceMesh({2}, {"pipe"}, {Device{kind, 0}, Device{kind, 1}}), 4, schedule,
                                            std::vector<int>{batch_norm ? 3 : 2});
}

void train(Model& m) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> noise;
  Tensor x({kRows, kFeatures}, DType::Float32), y({kRows}, DType::Int32);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = noise(rng);
  for (std::int64_t i = 0; i < kRows; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i * 7 % kClasses);
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  for (int epoch = 0; epoch < 2; ++epoch) m.train_epoch(x, y, order.data(), kRows, kBatch, kRows / kBatch, nullptr);
}

// Without BatchNormalization the stages train like one CPU device; with it (each micro-batch
// normalized by its own statistics, the moving statistics deferred to the global batch) like the
// same pipeline on two logical CPU devices.
TEST(PipelineGpu, TwoStagesOnTwoGpusTrainLikeOneDevice) {
  if (!harness_on_cpu() && cuda::device_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs, this process sees " << cuda::device_count()
                 << (cuda::device_count() == 0 ? ": " + cuda::unavailable_reason() : std::string());
  const DeviceKind kind = harness_on_cpu() ? DeviceKind::CPU : DeviceKind::CUDA;
  for (auto schedule : {PipelineScheduleKind::GPipe, PipelineScheduleKind::OneFOneB})
    for (bool batch_norm : {false, true}) {
      SCOPED_TRACE(std::string(name_of(schedule)) + (batch_norm ? ", BatchNormalization" : ""));
      auto pp = two_stages(kind, schedule, batch_norm);
      auto staged = mlp(pp, batch_norm);
      auto reference =
          batch_norm ? mlp(two_stages(DeviceKind::CPU, schedule, true), true) : mlp(gpu_testing::cpu(), false);
      train(*staged);
      train(*reference);
      // The weights (BatchNormalization's moving statistics included), copied back from the stages.
      expect_weights_close(staged->get_weights(), reference->get_weights(), "2 stages vs the reference");
      if (!harness_on_cpu()) {  // each stage lives on its GPU
        EXPECT_TRUE(pp->executor()->replica_network(0).device() == kGpu0);
        EXPECT_TRUE(pp->executor()->replica_network(1).device() == kGpu1);
      }
    }
}

std::string refusal(const std::vector<Device>& devices) {
  try {
    PipelineStrategy(DeviceMesh({static_cast<int>(devices.size())}, {"pipe"}, devices), 2,
                     PipelineScheduleKind::OneFOneB);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineGpu, MixingCpuDevicesAndGpusIsRefused) {
  for (const auto& devices : {std::vector<Device>{kCpu0, kGpu0}, std::vector<Device>{kGpu0, kCpu0}}) {
    const std::string what = refusal(devices);
    EXPECT_EQ(what.rfind("[pipeline] ", 0), 0u) << what;
    EXPECT_NE(what.find("stages must all be on CPU devices or all on GPUs, got " + devices[0].to_string() + " and " +
                        devices[1].to_string()),
              std::string::npos)
        << what;
  }
}

TEST(PipelineGpu, GpusThisProcessDoesNotSeeAreRefusedWithTheReason) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "this process sees a GPU";
  const std::string what = refusal({kGpu0, kGpu1});
  EXPECT_EQ(what, "[pipeline] /device:GPU:0 is not a visible GPU (this process sees 0): " + cuda::unavailable_reason());
}

TEST(PipelineGpu, GpuStagesMustBeTheProcessGpusInMeshOrder) {
  // Checked as on a machine with 2 GPUs (the NCCL communicator of rank r drives GPU r).
  EXPECT_NO_THROW(check_pipeline_devices({kGpu0, kGpu1}, 2));
  EXPECT_NO_THROW(check_pipeline_devices({kCpu0, Device{DeviceKind::CPU, 1}}, 0));
  try {
    check_pipeline_devices({kGpu1, kGpu0}, 2);
    ADD_FAILURE() << "GPUs out of mesh order were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[pipeline] /device:GPU:1 is this process's device 0 of the mesh"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(check_pipeline_devices({kGpu0, Device{DeviceKind::CUDA, 2}}, 2), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain
