#pragma once
#include <string>
#include <vector>

#include "mdtrain/core/device.h"

namespace mdtrain {

// How Communicator::split(color, key) places one device: devices with the same color form one
// sub-group, ranked by key (0, 1, ... within the group).
struct MeshSplit {
  int color = 0;
  int key = 0;

  bool operator==(const MeshSplit& other) const { return color == other.color && key == other.key; }
  bool operator!=(const MeshSplit& other) const { return !(*this == other); }
};

// Devices arranged in an n-dimensional grid with named axes: the one concept of "several devices"
// that every strategy builds on (DESIGN.md §8). Semantics follow Keras 3's
// keras.distribution.DeviceMesh(shape, axis_names, devices): the devices fill the grid in row-major
// order, so devices[i] sits at coordinates unravel(i, shape) and the last axis varies fastest.
// Axis names by convention: "batch" (data parallel), "model" (tensor parallel), "pipe" (pipeline).
//
// Across processes the mesh covers the global devices: worker w's local device l has the global
// device index w * local_device_count() + l (the same numbering as a strategy's global replicas).
// Row-major order then keeps each run of the last axis inside one worker when the last axis size
// divides the local device count (checked by for_workers), so the fastest-varying axis, which
// carries the most traffic (e.g. "model"), talks within a host.
//
// For communicators, each axis (or set of axes) cuts the mesh into groups of devices that differ
// only along it; axis_split gives each device its (color, key) for Communicator::split.
class DeviceMesh {
 public:
  // One process's mesh. Throws std::invalid_argument ("[mesh] ...") when shape is empty or has an
  // entry < 1, axis_names does not have one unique non-empty name per axis, or the product of shape
  // is not devices.size().
  DeviceMesh(std::vector<int> shape, std::vector<std::string> axis_names, std::vector<Device> devices);

  // A mesh over num_workers processes with the same local devices each (a multi-worker strategy).
  // devices() then holds local_devices once per worker, worker-major. Besides the constructor's
  // checks, throws std::invalid_argument when num_workers < 1, local_devices is empty or repeats a
  // device, or the mesh has several axes and the last axis size does not divide
  // local_devices.size() (a last-axis group would span two hosts). A 1-D mesh is accepted: its
  // only axis necessarily spans the workers (MultiWorkerMirrored's "batch" mesh).
  static DeviceMesh for_workers(std::vector<int> shape, std::vector<std::string> axis_names, int num_workers,
                                const std::vector<Device>& local_devices);

  const std::vector<int>& shape() const { return shape_; }
  const std::vector<std::string>& axis_names() const { return axis_names_; }
  // Row-major: devices()[i] is at coordinates(i).
  const std::vector<Device>& devices() const { return devices_; }
  int num_axes() const { return static_cast<int>(shape_.size()); }
  int num_devices() const { return static_cast<int>(devices_.size()); }
  const Device& device(int device_index) const;

  // The position of an axis in shape(); throws std::invalid_argument naming the known axes.
  int axis_index(const std::string& name) const;
  bool has_axis(const std::string& name) const;
  int axis_size(const std::string& name) const { return shape_[axis_index(name)]; }

  // Row-major unravel / ravel. Throws std::out_of_range for an index or coordinate outside the
  // mesh and std::invalid_argument when coordinates has the wrong length.
  std::vector<int> coordinates(int device_index) const;
  int device_index(const std::vector<int>& coordinates) const;

  // Communicator groups along one axis: devices that differ only in their coordinate along `name`
  // share a color, and the key is that coordinate. Colors number the groups 0, 1, ... in row-major
  // order of the remaining coordinates.
  MeshSplit axis_split(const std::string& name, int device_index) const;
  // The same for a set of axes (e.g. {"batch", "pipe"}): devices that differ only along those axes
  // share a color; the key ranks them row-major over those axes taken in mesh order (whatever order
  // `names` lists them in). No names: every device alone. Throws on an unknown or repeated name.
  MeshSplit axes_split(const std::vector<std::string>& names, int device_index) const;
  // The device indices in device_index's group along `name` (resp. `names`), in key order.
  std::vector<int> axis_group(const std::string& name, int device_index) const;
  std::vector<int> axes_group(const std::vector<std::string>& names, int device_index) const;

  // Processes the mesh spans (1 unless made by for_workers) and devices per process.
  int num_workers() const { return num_workers_; }
  int local_device_count() const { return num_devices() / num_workers_; }
  // The worker that drives a global device, and its local index there.
  int worker_of(int device_index) const;
  int local_index_of(int device_index) const;

  // "DeviceMesh(shape=[2, 4], axis_names=[batch, model])", for messages.
  std::string to_string() const;

 private:
  DeviceMesh(std::vector<int> shape, std::vector<std::string> axis_names, std::vector<Device> devices, int num_workers);
  void check_device_index(int device_index) const;
  // One flag per axis: is it in `names`? Checks the names.
  std::vector<bool> axis_mask(const std::vector<std::string>& names) const;

  std::vector<int> shape_;
  std::vector<std::string> axis_names_;
  std::vector<Device> devices_;
  int num_workers_ = 1;
};

}  // namespace mdtrain
