// The device mesh (strategy/device_mesh.h) for mdtrain.keras.distribution.DeviceMesh. Devices
// cross as names ("/device:CPU:0", "cpu:0", ...); splits as (color, key) tuples.
#include "bindings.h"
#include "mdtrain/strategy/device_mesh.h"

namespace mdtrain::bindings {

namespace {
std::vector<Device> parse_device_names(const std::vector<std::string>& names) {
  std::vector<Device> out;
  out.reserve(names.size());
  for (const auto& n : names) out.push_back(Device::parse(n));
  return out;
}

py::tuple split_tuple(const MeshSplit& s) { return py::make_tuple(s.color, s.key); }
}  // namespace

void init_mesh(py::module_& m) {
  py::class_<DeviceMesh>(m, "DeviceMesh")
      .def(py::init([](std::vector<int> shape, std::vector<std::string> axis_names,
                       const std::vector<std::string>& devices) {
             return DeviceMesh(std::move(shape), std::move(axis_names), parse_device_names(devices));
           }),
           py::arg("shape"), py::arg("axis_names"), py::arg("devices"))
      .def_static(
          "for_workers",
          [](std::vector<int> shape, std::vector<std::string> axis_names, int num_workers,
             const std::vector<std::string>& local_devices) {
            return DeviceMesh::for_workers(std::move(shape), std::move(axis_names), num_workers,
                                           parse_device_names(local_devices));
          },
          py::arg("shape"), py::arg("axis_names"), py::arg("num_workers"), py::arg("local_devices"))
      .def_property_readonly("shape", &DeviceMesh::shape)
      .def_property_readonly("axis_names", &DeviceMesh::axis_names)
      .def_property_readonly("devices",
                             [](const DeviceMesh& mesh) {
                               std::vector<std::string> out;
                               for (const auto& d : mesh.devices()) out.push_back(d.to_string());
                               return out;
                             })
      .def_property_readonly("num_devices", &DeviceMesh::num_devices)
      .def_property_readonly("num_workers", &DeviceMesh::num_workers)
      .def_property_readonly("local_device_count", &DeviceMesh::local_device_count)
      .def("axis_index", &DeviceMesh::axis_index, py::arg("name"))
      .def("axis_size", &DeviceMesh::axis_size, py::arg("name"))
      .def("coordinates", &DeviceMesh::coordinates, py::arg("device_index"))
      .def("device_index", &DeviceMesh::device_index, py::arg("coordinates"))
      .def(
          "axis_split",
          [](const DeviceMesh& mesh, const std::string& name, int device_index) {
            return split_tuple(mesh.axis_split(name, device_index));
          },
          py::arg("name"), py::arg("device_index"))
      .def(
          "axes_split",
          [](const DeviceMesh& mesh, const std::vector<std::string>& names, int device_index) {
            return split_tuple(mesh.axes_split(names, device_index));
          },
          py::arg("names"), py::arg("device_index"))
      .def("axis_group", &DeviceMesh::axis_group, py::arg("name"), py::arg("device_index"))
      .def("axes_group", &DeviceMesh::axes_group, py::arg("names"), py::arg("device_index"))
      .def("worker_of", &DeviceMesh::worker_of, py::arg("device_index"))
      .def("local_index_of", &DeviceMesh::local_index_of, py::arg("device_index"))
      .def("__repr__", &DeviceMesh::to_string);
}

}  // namespace mdtrain::bindings
