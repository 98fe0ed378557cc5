// DeviceMesh: row-major coordinates, communicator groups per axis and per set of axes (checked
// against hand-written tables), the multi-worker numbering, and the errors for bad input.
#include "mdtrain/strategy/device_mesh.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace mdtrain {
namespace {

std::vector<Device> cpus(int n) {
  std::vector<Device> out;
  for (int i = 0; i < n; ++i) out.push_back(Device{DeviceKind::CPU, i});
  return out;
}

using Groups = std::vector<std::vector<int>>;

// Every device's group along `names`, deduplicated, in order of first appearance.
Groups groups_of(const DeviceMesh& mesh, const std::vector<std::string>& names) {
  Groups out;
  for (int d = 0; d < mesh.num_devices(); ++d) {
    auto g = mesh.axes_group(names, d);
    if (std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
  }
  return out;
}

// Runs fn, expects Exception, and checks the message starts with "[mesh]" and contains each part.
template <class Exception, class Fn>
void expect_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception";
  } catch (const Exception& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("[mesh]", 0), 0u) << what;
    for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
  }
}

TEST(DeviceMesh, OneDimensional) {
  DeviceMesh mesh({4}, {"batch"}, cpus(4));
  EXPECT_EQ(mesh.num_devices(), 4);
  EXPECT_EQ(mesh.num_axes(), 1);
  EXPECT_EQ(mesh.axis_index("batch"), 0);
  EXPECT_EQ(mesh.axis_size("batch"), 4);
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(mesh.coordinates(d), std::vector<int>{d});
    EXPECT_EQ(mesh.device_index({d}), d);
    EXPECT_EQ(mesh.device(d), (Device{DeviceKind::CPU, d}));
    EXPECT_EQ(mesh.axis_split("batch", d), (MeshSplit{0, d}));
    EXPECT_EQ(mesh.axis_group("batch", d), (std::vector<int>{0, 1, 2, 3}));
    // No axes: every device is its own group.
    EXPECT_EQ(mesh.axes_split({}, d), (MeshSplit{d, 0}));
    EXPECT_EQ(mesh.axes_group({}, d), std::vector<int>{d});
  }
}

TEST(DeviceMesh, TwoByTwo) {
  DeviceMesh mesh({2, 2}, {"batch", "model"}, cpus(4));
  const std::vector<std::vector<int>> coords = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
  const std::vector<MeshSplit> model_split = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
  const std::vector<MeshSplit> batch_split = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(mesh.coordinates(d), coords[d]) << d;
    EXPECT_EQ(mesh.device_index(coords[d]), d);
    EXPECT_EQ(mesh.axis_split("model", d), model_split[d]) << d;
    EXPECT_EQ(mesh.axis_split("batch", d), batch_split[d]) << d;
    EXPECT_EQ(mesh.axes_split({"batch", "model"}, d), (MeshSplit{0, d}));
  }
  EXPECT_EQ(groups_of(mesh, {"model"}), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(groups_of(mesh, {"batch"}), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(groups_of(mesh, {"batch", "model"}), (Groups{{0, 1, 2, 3}}));
}

TEST(DeviceMesh, TwoByFour) {
  DeviceMesh mesh({2, 4}, {"batch", "model"}, cpus(8));
  EXPECT_EQ(mesh.axis_size("batch"), 2);
  EXPECT_EQ(mesh.axis_size("model"), 4);
  EXPECT_EQ(mesh.coordinates(0), (std::vector<int>{0, 0}));
  EXPECT_EQ(mesh.coordinates(3), (std::vector<int>{0, 3}));
  EXPECT_EQ(mesh.coordinates(5), (std::vector<int>{1, 1}));
  EXPECT_EQ(mesh.coordinates(7), (std::vector<int>{1, 3}));
  EXPECT_EQ(mesh.device_index({1, 2}), 6);
  EXPECT_EQ(groups_of(mesh, {"model"}), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(groups_of(mesh, {"batch"}), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(mesh.axis_split("model", 6), (MeshSplit{1, 2}));
  EXPECT_EQ(mesh.axis_split("batch", 6), (MeshSplit{2, 1}));
  EXPECT_EQ(mesh.axis_split("batch", 3), (MeshSplit{3, 0}));
  EXPECT_EQ(mesh.axis_group("batch", 6), (std::vector<int>{2, 6}));
  EXPECT_EQ(mesh.axis_group("model", 6), (std::vector<int>{4, 5, 6, 7}));
}

TEST(DeviceMesh, TwoByTwoByTwo) {
  DeviceMesh mesh({2, 2, 2}, {"batch", "pipe", "model"}, cpus(8));
  const std::vector<std::vector<int>> coords = {{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1},
                                                {1, 0, 0}, {1, 0, 1}, {1, 1, 0}, {1, 1, 1}};
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(mesh.coordinates(d), coords[d]) << d;
    EXPECT_EQ(mesh.device_index(coords[d]), d);
  }
  EXPECT_EQ(groups_of(mesh, {"model"}), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(groups_of(mesh, {"pipe"}), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(groups_of(mesh, {"batch"}), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(groups_of(mesh, {"batch", "pipe"}), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(groups_of(mesh, {"batch", "model"}), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(groups_of(mesh, {"pipe", "model"}), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // Device 5 = (1, 0, 1).
  EXPECT_EQ(mesh.axis_split("model", 5), (MeshSplit{2, 1}));
  EXPECT_EQ(mesh.axis_split("pipe", 5), (MeshSplit{3, 0}));
  EXPECT_EQ(mesh.axis_split("batch", 5), (MeshSplit{1, 1}));
  EXPECT_EQ(mesh.axes_split({"batch", "pipe"}, 5), (MeshSplit{1, 2}));
  // The key follows mesh order whatever order the names come in.
  EXPECT_EQ(mesh.axes_split({"pipe", "batch"}, 5), (MeshSplit{1, 2}));
  EXPECT_EQ(mesh.axes_group({"pipe", "batch"}, 5), (std::vector<int>{1, 3, 5, 7}));
  // Device 6 = (1, 1, 0).
  EXPECT_EQ(mesh.axes_split({"batch", "model"}, 6), (MeshSplit{1, 2}));
  EXPECT_EQ(mesh.axis_split("pipe", 7), (MeshSplit{3, 1}));
}

// For every mesh and every set of axes: a device sits at position `key` of its group, the group
// members share its color, and distinct groups have distinct colors numbered 0, 1, ...
TEST(DeviceMesh, SplitsAgreeWithGroups) {
  const std::vector<DeviceMesh> meshes = {DeviceMesh({4}, {"batch"}, cpus(4)),
                                          DeviceMesh({2, 4}, {"batch", "model"}, cpus(8)),
                                          DeviceMesh({3, 2}, {"batch", "model"}, cpus(6)),
                                          DeviceMesh({2, 3, 2}, {"batch", "pipe", "model"}, cpus(12))};
  for (const auto& mesh : meshes) {
    const auto& names = mesh.axis_names();
    for (unsigned subset = 0; subset < (1u << names.size()); ++subset) {
      std::vector<std::string> chosen;
      int group_size = 1;
      for (std::size_t a = 0; a < names.size(); ++a)
        if (subset & (1u << a)) {
          chosen.push_back(names[a]);
          group_size *= mesh.shape()[a];
        }
      std::map<int, std::vector<int>> by_color;
      for (int d = 0; d < mesh.num_devices(); ++d) {
        const MeshSplit s = mesh.axes_split(chosen, d);
        const std::vector<int> group = mesh.axes_group(chosen, d);
        ASSERT_EQ(static_cast<int>(group.size()), group_size);
        ASSERT_EQ(group[static_cast<std::size_t>(s.key)], d) << mesh.to_string();
        for (int member : group) EXPECT_EQ(mesh.axes_split(chosen, member).color, s.color);
        by_color[s.color] = group;
      }
      const int num_groups = mesh.num_devices() / group_size;
      ASSERT_EQ(static_cast<int>(by_color.size()), num_groups);
      EXPECT_EQ(by_color.begin()->first, 0);
      EXPECT_EQ(by_color.rbegin()->first, num_groups - 1);
    }
  }
}

TEST(DeviceMesh, ForWorkersNumbersDevicesWorkerMajor) {
  const std::vector<Device> local = cpus(4);
  DeviceMesh mesh = DeviceMesh::for_workers({4, 2}, {"batch", "model"}, 2, local);
  EXPECT_EQ(mesh.num_workers(), 2);
  EXPECT_EQ(mesh.local_device_count(), 4);
  EXPECT_EQ(mesh.num_devices(), 8);
  for (int w = 0; w < 2; ++w)
    for (int l = 0; l < 4; ++l) {
      const int g = w * 4 + l;
      EXPECT_EQ(mesh.worker_of(g), w);
      EXPECT_EQ(mesh.local_index_of(g), l);
      EXPECT_EQ(mesh.device(g), local[static_cast<std::size_t>(l)]);
    }
  // Every "model" group stays inside one worker.
  for (int d = 0; d < 8; ++d)
    for (int member : mesh.axis_group("model", d)) EXPECT_EQ(mesh.worker_of(member), mesh.worker_of(d));
  EXPECT_EQ(groups_of(mesh, {"batch"}), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));

  // A 1-D data-parallel mesh spans the workers along its only axis.
  DeviceMesh flat = DeviceMesh::for_workers({6}, {"batch"}, 3, cpus(2));
  EXPECT_EQ(flat.axis_group("batch", 0), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(flat.worker_of(5), 2);
  // A single-process mesh is one worker.
  EXPECT_EQ(DeviceMesh({2}, {"batch"}, cpus(2)).num_workers(), 1);
}

TEST(DeviceMesh, ForWorkersRejectsLastAxisAcrossHosts) {
  expect_error<std::invalid_argument>(
      [] {
        DeviceMesh::for_workers({2, 4}, {"batch", "model"}, 4, cpus(2));
      },
      {"last axis", "[2, 4]", "size 4", "local devices (2)"});
  // 2 divides 4 local devices: each "model" pair stays on one worker.
  EXPECT_NO_THROW(DeviceMesh::for_workers({4, 2}, {"batch", "model"}, 2, cpus(4)));
}

TEST(DeviceMesh, ForWorkersBadArguments) {
  expect_error<std::invalid_argument>([] { DeviceMesh::for_workers({2}, {"batch"}, 0, cpus(2)); },
                                      {"num_workers", "0"});
  expect_error<std::invalid_argument>([] { DeviceMesh::for_workers({2}, {"batch"}, 2, {}); }, {"local_devices"});
  expect_error<std::invalid_argument>(
      [] {
        DeviceMesh::for_workers({4}, {"batch"}, 2, {Device{DeviceKind::CPU, 1}, Device{DeviceKind::CPU, 1}});
      },
      {"local_devices", "distinct", "/device:CPU:1"});
  expect_error<std::invalid_argument>(
      [] {
        DeviceMesh::for_workers({2, 2}, {"batch", "model"}, 2, cpus(4));
      },
      {"shape [2, 2]", "4 positions", "8 devices"});
}

TEST(DeviceMesh, BadConstructorArguments) {
  expect_error<std::invalid_argument>([] { DeviceMesh({}, {}, {}); }, {"shape", "at least one axis"});
  expect_error<std::invalid_argument>([] { DeviceMesh({2, 0}, {"a", "b"}, {}); }, {"shape [2, 0]", ">= 1"});
  expect_error<std::invalid_argument>(
      [] {
        DeviceMesh({2, 2}, {"batch"}, cpus(4));
      },
      {"axis_names ['batch']", "2 axes", "shape [2, 2]"});
  expect_error<std::invalid_argument>(
      [] {
        DeviceMesh({2, 2}, {"batch", "batch"}, cpus(4));
      },
      {"axis_names ['batch', 'batch']", "repeats 'batch'"});
  expect_error<std::invalid_argument>(
      [] {
        DeviceMesh({2, 2}, {"batch", ""}, cpus(4));
      },
      {"axis_names", "empty name", "position 1"});
  expect_error<std::invalid_argument>(
      [] {
        DeviceMesh({2, 2}, {"batch", "model"}, cpus(3));
      },
      {"shape [2, 2]", "4 positions", "devices has 3 devices"});
  expect_error<std::invalid_argument>([] { DeviceMesh({65536, 65536}, {"a", "b"}, cpus(1)); }, {"over 2^31 positions"});
  expect_error<std::invalid_argument>(
      [] {
        DeviceMesh({2}, {"batch"}, {Device{DeviceKind::CPU, 0}, Device{DeviceKind::CPU, 0}});
      },
      {"devices must be distinct", "/device:CPU:0", "devices[0]", "devices[1]"});
}

TEST(DeviceMesh, BadQueries) {
  DeviceMesh mesh({2, 4}, {"batch", "model"}, cpus(8));
  expect_error<std::invalid_argument>([&] { mesh.axis_index("pipe"); }, {"'pipe'", "['batch', 'model']"});
  expect_error<std::invalid_argument>([&] { mesh.axis_size("pipe"); }, {"'pipe'", "['batch', 'model']"});
  expect_error<std::invalid_argument>([&] { mesh.axis_split("pipe", 0); }, {"'pipe'"});
  expect_error<std::invalid_argument>([&] { mesh.axes_split({"batch", "batch"}, 0); }, {"'batch'", "listed twice"});
  expect_error<std::out_of_range>([&] { mesh.coordinates(8); }, {"device_index 8", "8 devices", "[2, 4]"});
  expect_error<std::out_of_range>([&] { mesh.coordinates(-1); }, {"device_index -1"});
  expect_error<std::out_of_range>([&] { mesh.axis_group("batch", 9); }, {"device_index 9"});
  expect_error<std::out_of_range>([&] { mesh.device_index({2, 0}); }, {"coordinates [2, 0]", "shape [2, 4]"});
  expect_error<std::invalid_argument>([&] { mesh.device_index({1}); }, {"coordinates [1]", "shape [2, 4]"});
  EXPECT_TRUE(mesh.has_axis("model"));
  EXPECT_FALSE(mesh.has_axis("pipe"));
  EXPECT_EQ(mesh.to_string(), "DeviceMesh(shape=[2, 4], axis_names=['batch', 'model'])");
}

}  // namespace
}  // namespace mdtrain
