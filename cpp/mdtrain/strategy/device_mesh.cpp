#include "mdtrain/strategy/device_mesh.h"

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <utility>

#include "mdtrain/core/errors.h"

namespace mdtrain {

namespace {

std::string join(const std::vector<int>& values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

std::string join(const std::vector<std::string>& names) {
  std::string s = "[";
  for (std::size_t i = 0; i < names.size(); ++i) s += (i ? ", '" : "'") + names[i] + "'";
  return s + "]";
}

}  // namespace

DeviceMesh::DeviceMesh(std::vector<int> shape, std::vector<std::string> axis_names, std::vector<Device> devices)
    : DeviceMesh(std::move(shape), std::move(axis_names), std::move(devices), 1) {
  for (std::size_t i = 0; i < devices_.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      MDTRAIN_CHECK(devices_[i] != devices_[j], std::invalid_argument,
                    "[mesh] devices must be distinct: ", devices_[i].to_string(), " is both devices[", j,
                    "] and devices[", i, "]");
}

DeviceMesh::DeviceMesh(std::vector<int> shape, std::vector<std::string> axis_names, std::vector<Device> devices,
                       int num_workers)
    : shape_(std::move(shape)),
      axis_names_(std::move(axis_names)),
      devices_(std::move(devices)),
      num_workers_(num_workers) {
  MDTRAIN_CHECK(!shape_.empty(), std::invalid_argument, "[mesh] shape must have at least one axis, got []");
  for (int n : shape_)
    MDTRAIN_CHECK(n >= 1, std::invalid_argument, "[mesh] every entry of shape must be >= 1, got shape ", join(shape_));
  MDTRAIN_CHECK(axis_names_.size() == shape_.size(), std::invalid_argument, "[mesh] axis_names ", join(axis_names_),
                " must name each of the ", shape_.size(), " axes of shape ", join(shape_));
  for (std::size_t i = 0; i < axis_names_.size(); ++i) {
    MDTRAIN_CHECK(!axis_names_[i].empty(), std::invalid_argument, "[mesh] axis_names ", join(axis_names_),
                  " has an empty name at position ", i);
    for (std::size_t j = 0; j < i; ++j)
      MDTRAIN_CHECK(axis_names_[i] != axis_names_[j], std::invalid_argument, "[mesh] axis_names ", join(axis_names_),
                    " repeats '", axis_names_[i], "'");
  }
  // Capped product (each factor < 2^31, so no overflow): a huge shape reports a mismatch.
  const long long cap = 1LL << 31;
  long long positions = 1;
  for (int n : shape_) positions = std::min(positions * n, cap);
  MDTRAIN_CHECK(positions == static_cast<long long>(devices_.size()), std::invalid_argument, "[mesh] shape ",
                join(shape_), " has ", positions == cap ? "over 2^31" : std::to_string(positions),
                " positions but devices has ", devices_.size(), " devices");
}

DeviceMesh DeviceMesh::for_workers(std::vector<int> shape, std::vector<std::string> axis_names, int num_workers,
                                   const std::vector<Device>& local_devices) {
  MDTRAIN_CHECK(num_workers >= 1, std::invalid_argument, "[mesh] num_workers must be >= 1, got ", num_workers);
  MDTRAIN_CHECK(!local_devices.empty(), std::invalid_argument, "[mesh] local_devices must not be empty");
  for (std::size_t i = 0; i < local_devices.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      MDTRAIN_CHECK(local_devices[i] != local_devices[j], std::invalid_argument,
                    "[mesh] local_devices must be distinct: ", local_devices[i].to_string(), " is both local_devices[",
                    j, "] and local_devices[", i, "]");
  std::vector<Device> global;
  global.reserve(local_devices.size() * static_cast<std::size_t>(num_workers));
  for (int w = 0; w < num_workers; ++w) global.insert(global.end(), local_devices.begin(), local_devices.end());
  const std::vector<int> shape_copy = shape;
  DeviceMesh mesh(std::move(shape), std::move(axis_names), std::move(global), num_workers);
  // A 1-D mesh (data parallel over every worker, as MultiWorkerMirrored) cannot keep its only axis
  // inside a host; with more axes the outer ones are the ones to cross hosts.
  const int last = shape_copy.back();
  MDTRAIN_CHECK(shape_copy.size() == 1 || static_cast<int>(local_devices.size()) % last == 0, std::invalid_argument,
                "[mesh] the last axis of shape ", join(shape_copy), " (size ", last,
                ") must divide the number of local devices (", local_devices.size(),
                ") so that each of its groups stays inside one worker");
  return mesh;
}

const Device& DeviceMesh::device(int device_index) const {
  check_device_index(device_index);
  return devices_[static_cast<std::size_t>(device_index)];
}

int DeviceMesh::axis_index(const std::string& name) const {
  for (std::size_t i = 0; i < axis_names_.size(); ++i)
    if (axis_names_[i] == name) return static_cast<int>(i);
  fail<std::invalid_argument>("[mesh] no axis named '", name, "'; the mesh's axes are ", join(axis_names_));
}

bool DeviceMesh::has_axis(const std::string& name) const {
  for (const auto& n : axis_names_)
    if (n == name) return true;
  return false;
}

void DeviceMesh::check_device_index(int device_index) const {
  MDTRAIN_CHECK(device_index >= 0 && device_index < num_devices(), std::out_of_range, "[mesh] device_index ",
                device_index, " is outside a mesh of ", num_devices(), " devices (shape ", join(shape_), ")");
}

std::vector<int> DeviceMesh::coordinates(int device_index) const {
  check_device_index(device_index);
  std::vector<int> coords(shape_.size());
  int rest = device_index;
  for (std::size_t a = shape_.size(); a-- > 0;) {
    coords[a] = rest % shape_[a];
    rest /= shape_[a];
  }
  return coords;
}

int DeviceMesh::device_index(const std::vector<int>& coordinates) const {
  MDTRAIN_CHECK(coordinates.size() == shape_.size(), std::invalid_argument, "[mesh] coordinates ", join(coordinates),
                " must have one entry per axis of shape ", join(shape_));
  int index = 0;
  for (std::size_t a = 0; a < shape_.size(); ++a) {
    MDTRAIN_CHECK(coordinates[a] >= 0 && coordinates[a] < shape_[a], std::out_of_range, "[mesh] coordinates ",
                  join(coordinates), " are outside shape ", join(shape_));
    index = index * shape_[a] + coordinates[a];
  }
  return index;
}

std::vector<bool> DeviceMesh::axis_mask(const std::vector<std::string>& names) const {
  std::vector<bool> mask(shape_.size(), false);
  for (const auto& name : names) {
    const int a = axis_index(name);
    MDTRAIN_CHECK(!mask[static_cast<std::size_t>(a)], std::invalid_argument, "[mesh] axis '", name,
                  "' is listed twice in ", join(names));
    mask[static_cast<std::size_t>(a)] = true;
  }
  return mask;
}

MeshSplit DeviceMesh::axis_split(const std::string& name, int device_index) const {
  return axes_split({name}, device_index);
}

MeshSplit DeviceMesh::axes_split(const std::vector<std::string>& names, int device_index) const {
  const std::vector<bool> in_group = axis_mask(names);
  const std::vector<int> coords = coordinates(device_index);
  // Ravel the coordinates twice, row-major: those outside the group give the color, those inside
  // give the key.
  MeshSplit split;
  for (std::size_t a = 0; a < shape_.size(); ++a) {
    int& part = in_group[a] ? split.key : split.color;
    part = part * shape_[a] + coords[a];
  }
  return split;
}

std::vector<int> DeviceMesh::axis_group(const std::string& name, int device_index) const {
  return axes_group({name}, device_index);
}

std::vector<int> DeviceMesh::axes_group(const std::vector<std::string>& names, int device_index) const {
  const std::vector<bool> in_group = axis_mask(names);
  std::vector<int> coords = coordinates(device_index);
  // Walk the group's axes row-major (an odometer over them), the others held at this device's
  // coordinates: that is key order.
  for (std::size_t a = 0; a < shape_.size(); ++a)
    if (in_group[a]) coords[a] = 0;
  std::vector<int> group;
  while (true) {
    group.push_back(this->device_index(coords));
    std::size_t a = shape_.size();
    while (a-- > 0) {
      if (!in_group[a]) continue;
      if (++coords[a] < shape_[a]) break;
      coords[a] = 0;
    }
    if (a == static_cast<std::size_t>(-1)) break;  // every group axis wrapped around: done
  }
  return group;
}

int DeviceMesh::worker_of(int device_index) const {
  check_device_index(device_index);
  return device_index / local_device_count();
}

int DeviceMesh::local_index_of(int device_index) const {
  check_device_index(device_index);
  return device_index % local_device_count();
}

std::string DeviceMesh::to_string() const {
  return "DeviceMesh(shape=" + join(shape_) + ", axis_names=" + join(axis_names_) + ")";
}

}  // namespace mdtrain
