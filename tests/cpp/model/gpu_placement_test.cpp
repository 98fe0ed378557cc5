// Host-side placement decisions for GPU training, checked without a GPU: which communicator
// MirroredStrategy picks for which devices, which devices it refuses, the clear error for layers
// without CUDA kernels (raised before any GPU memory or communicator exists), and that CPU
// replicas keep working exactly as before (LayerStack::clone_to a CPU device).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/model/model.h"
#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/conv2d.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/global_average_pooling2d.h"
#include "mdtrain/nn/layer_stack.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/pooling2d.h"
#include "mdtrain/nn/reshape.h"
#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/mirrored_strategy.h"
#include "mdtrain/strategy/one_device_strategy.h"

namespace mdtrain {
namespace {

const Device kCpu0{DeviceKind::CPU, 0}, kCpu1{DeviceKind::CPU, 1};
const Device kGpu0{DeviceKind::CUDA, 0}, kGpu1{DeviceKind::CUDA, 1}, kGpu2{DeviceKind::CUDA, 2};

template <class F>
std::string invalid_argument_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

TEST(GpuPlacement, AutoCommunicationIsNcclOnGpusAndThreadsOnCpuDevices) {
  EXPECT_EQ(MirroredStrategy::resolve_communication({kCpu0, kCpu1}, "auto", 0), "threads");
  EXPECT_EQ(MirroredStrategy::resolve_communication({kCpu0, kCpu1}, "auto", 4), "threads");
  EXPECT_EQ(MirroredStrategy::resolve_communication({kGpu0, kGpu1}, "auto", 2), "nccl");
  EXPECT_EQ(MirroredStrategy::resolve_communication({kGpu0}, "auto", 1), "nccl");
  // An explicit backend is kept.
  EXPECT_EQ(MirroredStrategy::resolve_communication({kCpu0, kCpu1}, "threads", 0), "threads");
  EXPECT_EQ(MirroredStrategy::resolve_communication({kGpu0, kGpu1}, "nccl", 2), "nccl");
}

TEST(GpuPlacement, GpusThatAreNotVisibleAreRefusedByName) {
  const std::string msg = invalid_argument_of([] {
    MirroredStrategy::resolve_communication({kGpu0, kGpu2}, "auto", 2);
  });
  EXPECT_EQ(msg.rfind("[mirrored] /device:GPU:2 is not a visible GPU (this process sees 2)", 0), 0u) << msg;
  const std::string none = invalid_argument_of([] { MirroredStrategy::resolve_communication({kGpu0}, "auto", 0); });
  EXPECT_NE(none.find("/device:GPU:0 is not a visible GPU (this process sees 0): "), std::string::npos) << none;
}

TEST(GpuPlacement, MixedDevicesAndThreadsOnGpusAreRefused) {
  const std::string mixed = invalid_argument_of([] {
    MirroredStrategy::resolve_communication({kCpu0, kGpu0}, "auto", 1);
  });
  EXPECT_NE(mixed.find("must all be on CPU devices or all on GPUs"), std::string::npos) << mixed;
  const std::string threads =
      invalid_argument_of([] { MirroredStrategy::resolve_communication({kGpu0}, "threads", 1); });
  EXPECT_NE(threads.find("need \"nccl\""), std::string::npos) << threads;
}

TEST(GpuPlacement, MirroredStrategyOnGpusWithoutGpusSaysWhy) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "this process sees a GPU";
  const std::string msg = invalid_argument_of([] { MirroredStrategy s({kGpu0, kGpu1}); });
  EXPECT_NE(msg.find("/device:GPU:0 is not a visible GPU"), std::string::npos) << msg;
  EXPECT_NE(msg.find(cuda::unavailable_reason()), std::string::npos) << msg;
  // CPU devices still get the threads communicator by default.
  MirroredStrategy cpus({kCpu0, kCpu1});
  EXPECT_EQ(cpus.communication(), "threads");
}

std::unique_ptr<Model> compiled(std::vector<std::shared_ptr<Layer>> layers, const Shape& input,
                                std::shared_ptr<Strategy> strategy) {
  auto m = std::make_unique<Model>("placement", 1);
  for (auto& l : layers) m->add(std::move(l));
  m->build(input);
  m->compile(std::shared_ptr<Loss>(make_loss("mse")), std::shared_ptr<Optimizer>(make_optimizer("sgd")), {},
             std::move(strategy));
  return m;
}

std::shared_ptr<Layer> dense(const char* name, std::int64_t units) {
  Dense::Options o;
  o.units = units;
  return std::make_shared<Dense>(name, o);
}

std::shared_ptr<Layer> conv(const char* name) {
  Conv2D::Options o;
  o.filters = 2;
  o.kernel_size = {3, 3};
  return std::make_shared<Conv2D>(name, o);
}

// A layer without CUDA kernels (every layer of mdtrain has them): what the placement check names.
class HostOnlyLayer : public Flatten {
 public:
  using Flatten::Flatten;
  std::string class_name() const override { return "HostOnlyLayer"; }
  bool has_cuda_kernels() const override { return false; }
  std::unique_ptr<Layer> clone() const override {
    auto copy = std::make_unique<HostOnlyLayer>(name());
    copy->copy_build_state(*this);
    return copy;
  }
};

TEST(GpuPlacement, LayersWithoutCudaKernelsAreNamedForAGpuDevice) {
  LayerStack stack;
  stack.add(conv("conv"));
  stack.add(std::make_shared<HostOnlyLayer>("host_only"));
  stack.add(dense("dense", 3));
  stack.build({6, 6, 1}, 0);
  EXPECT_NO_THROW(stack.check_device_support(kCpu0));
  EXPECT_NO_THROW(stack.check_device_support(kCpu1));
  const std::string msg = invalid_argument_of([&] { stack.check_device_support(kGpu0); });
  EXPECT_EQ(msg.rfind("[layers] HostOnlyLayer (layer \"host_only\") has no CUDA kernels yet; train it on CPU devices",
                      0),
            0u)
      << msg;
  // clone_to refuses before allocating anything on the device.
  const std::string clone = invalid_argument_of([&] { stack.clone_to(kGpu1); });
  EXPECT_EQ(clone.rfind("[layers] HostOnlyLayer", 0), 0u) << clone;
}

TEST(GpuPlacement, TheSeedModelsLayersAllHaveCudaKernels) {
  LayerStack stack;
  stack.add(std::make_shared<Reshape>("reshape", Shape{8}));
  stack.add(std::make_shared<Flatten>("flatten"));
  stack.add(dense("dense", 16));
  stack.add(std::make_shared<ActivationLayer>("act", "relu"));
  stack.add(std::make_shared<Dropout>("dropout", 0.5, 1));
  stack.add(dense("dense_1", 4));
  stack.build({2, 4}, 0);
  EXPECT_NO_THROW(stack.check_device_support(kGpu0));
  for (const auto& l : stack.layers()) EXPECT_TRUE(l->has_cuda_kernels()) << l->class_name();
}

TEST(GpuPlacement, ConvolutionAndPoolingLayersHaveCudaKernels) {
  LayerStack stack;
  stack.add(conv("conv"));
  Pooling2D::Options pool;
  stack.add(std::make_shared<MaxPooling2D>("max_pooling2d", pool));
  stack.add(std::make_shared<AveragePooling2D>("average_pooling2d", pool));
  stack.add(std::make_shared<GlobalAveragePooling2D>("global_average_pooling2d"));
  stack.build({12, 12, 1}, 0);
  EXPECT_NO_THROW(stack.check_device_support(kGpu0));
  for (const auto& l : stack.layers()) EXPECT_TRUE(l->has_cuda_kernels()) << l->class_name();
}

TEST(GpuPlacement, TrainingAHostOnlyLayerOnAGpuIsAClearErrorBeforeAnythingRuns) {
  auto m = compiled({conv("conv"), std::make_shared<HostOnlyLayer>("host_only"), dense("dense", 2)}, {5, 5, 1},
                    std::make_shared<OneDeviceStrategy>(kGpu0));
  Tensor x = Tensor::zeros({4, 5, 5, 1}), y = Tensor::zeros({4, 2});
  const std::string msg = invalid_argument_of([&] { m->train_on_batch(x, y); });
  EXPECT_EQ(msg.rfind("[layers] HostOnlyLayer (layer \"host_only\") has no CUDA kernels yet; train it on CPU devices",
                      0),
            0u)
      << msg;
}

TEST(GpuPlacement, ADenseModelOnAMissingGpuFailsNamingTheDevice) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "this process sees a GPU";
  auto m = compiled({dense("dense", 2)}, {3}, std::make_shared<OneDeviceStrategy>(kGpu0));
  Tensor x = Tensor::zeros({4, 3}), y = Tensor::zeros({4, 2});
  try {
    m->train_on_batch(x, y);
    ADD_FAILURE() << "no exception";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("GPU:0"), std::string::npos) << e.what();
  }
  // The host model is untouched and still trains on the CPU.
  auto host = compiled({dense("dense", 2)}, {3}, std::make_shared<OneDeviceStrategy>(kCpu0));
  EXPECT_NO_THROW(host->train_on_batch(x, y));
}

TEST(GpuPlacement, CloneToACpuDeviceIsAnIndependentHostCopy) {
  LayerStack stack;
  stack.add(dense("dense", 3));
  stack.build({2}, 5);
  auto copy = stack.clone_to(kCpu0);
  EXPECT_TRUE(copy->device().is_cpu());
  ASSERT_EQ(copy->packed_values().numel(), stack.packed_values().numel());
  EXPECT_EQ(std::memcmp(copy->packed_values().raw(), stack.packed_values().raw(), stack.packed_values().nbytes()), 0);
  EXPECT_FALSE(copy->packed_values().same_storage(stack.packed_values()));
  // The copy's parameters are views into its own packed buffer.
  EXPECT_TRUE(copy->trainable_parameters().front()->value.same_storage(copy->packed_values()));
}

}  // namespace
}  // namespace mdtrain
