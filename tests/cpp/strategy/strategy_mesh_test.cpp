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

}  // namespace
}  // namespace mdtrain
