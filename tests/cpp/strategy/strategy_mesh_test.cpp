// Every strategy describes its devices as a mesh: the data-parallel ones are the 1-D ("batch",)
// mesh whose device order is the communicators' rank order.
#include <gtest/gtest.h>

#include "mdtrain/strategy/mirrored_strategy.h"
#include "mdtrain/strategy/multi_worker_mirrored_strategy.h"
#include "mdtrain/strategy/one_device_strategy.h"

namespace mdtrain {
namespace {

TEST(StrategyMesh, DataParallelStrategiesAreOneBatchAxis) {
  std::vector<Device> devices;
  for (int i = 0; i < 4; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  MirroredStrategy mirrored(devices);
  const DeviceMesh mesh = mirrored.mesh();
  EXPECT_EQ(mesh.shape(), std::vector<int>{4});
  EXPECT_EQ(mesh.axis_names(), std::vector<std::string>{"batch"});
  EXPECT_EQ(mesh.devices(), devices);
  EXPECT_EQ(mesh.num_workers(), 1);
  for (int d = 0; d < 4; ++d) EXPECT_EQ(mesh.axis_split("batch", d).key, d);  // rank order

  OneDeviceStrategy one;
  EXPECT_EQ(one.mesh().shape(), std::vector<int>{1});

  // A worker of one (no MPI launcher): the same mesh as Mirrored over its devices.
  MultiWorkerMirroredStrategy alone({Device{DeviceKind::CPU, 0}, Device{DeviceKind::CPU, 1}}, "threads", false);
  EXPECT_EQ(alone.mesh().shape(), std::vector<int>{2});
  EXPECT_EQ(alone.mesh().num_workers(), 1);
}

TEST(StrategyMesh, AxisCommunicatorsSumAlongTheirAxisOnly) {
  // 4 logical devices as a 2x2 ("batch", "model") mesh: device d = (d / 2, d % 2).
  std::vector<Device> devices;
  for (int i = 0; i < 4; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  MirroredStrategy strategy(devices);
  const DeviceMesh mesh({2, 2}, {"batch", "model"}, devices);
  for (const std::string axis : {"batch", "model"}) {
    auto comms = strategy.make_axis_communicators(mesh, {axis});
    ASSERT_EQ(comms.size(), 4u);
    std::vector<double> value(4);
    strategy.run_replicas([&](int d) {
      value[static_cast<std::size_t>(d)] = 1 << d;  // 1, 2, 4, 8: every sum says who took part
      comms[static_cast<std::size_t>(d)]->all_reduce(&value[static_cast<std::size_t>(d)], 1, DType::Float64);
    });
    for (int d = 0; d < 4; ++d) {
      double expected = 0;
      for (int g : mesh.axis_group(axis, d)) expected += 1 << g;
      EXPECT_EQ(value[static_cast<std::size_t>(d)], expected) << axis << " device " << d;
      EXPECT_EQ(comms[static_cast<std::size_t>(d)]->size(), 2);
      EXPECT_EQ(comms[static_cast<std::size_t>(d)]->rank(), mesh.axis_split(axis, d).key);
    }
  }
  // Both axes: one group of all four.
  auto all = strategy.make_axis_communicators(mesh, {"batch", "model"});
  EXPECT_EQ(all.front()->size(), 4);
  // A mesh of another size is refused, naming both.
  const DeviceMesh small({2}, {"batch"}, {devices[0], devices[1]});
  EXPECT_THROW(strategy.make_axis_communicators(small, {"batch"}), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain
