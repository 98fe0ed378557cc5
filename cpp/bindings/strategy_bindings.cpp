#include <algorithm>
#include <vector>

#include "bindings.h"
#include "worker_coordination.h"
#include "mdtrain/strategy/central_storage_strategy.h"
#include "mdtrain/strategy/mirrored_strategy.h"
#include "mdtrain/strategy/model_parallel_executor.h"
#include "mdtrain/strategy/model_parallel_strategy.h"
#include "mdtrain/strategy/multi_worker_mirrored_strategy.h"
#include "mdtrain/strategy/one_device_strategy.h"
#include "mdtrain/distribute/optional_backends.h"

namespace mdtrain::bindings {

namespace {
std::vector<Device> parse_devices(const std::vector<std::string>& names) {
  std::vector<Device> out;
  for (const auto& n : names) out.push_back(Device::parse(n));
  return out;
}

// The executor of the model compiled last under `s`, for its per-device reports.
ModelParallelExecutor& compiled_executor(const ModelParallelStrategy& s) {
  MDTRAIN_CHECK(s.executor() != nullptr, std::logic_error,
                "[model_parallel] no model is compiled and trained under this strategy yet: the per-device reports "
                "exist once a model has run a step under it");
  return *s.executor();
}
}  // namespace

void init_strategy(py::module_& m) {
  py::class_<Strategy, std::shared_ptr<Strategy>>(m, "Strategy")
      .def_property_readonly("name", &Strategy::name)
      .def_property_readonly("num_replicas_in_sync", &Strategy::num_replicas_in_sync)
      .def_property_readonly("num_workers", &Strategy::num_workers)
      .def_property_readonly("worker_index", &Strategy::worker_index)
      .def_property("gradient_bucket_bytes", &Strategy::gradient_bucket_bytes, &Strategy::set_gradient_bucket_bytes)
      .def_property_readonly("devices", [](const Strategy& s) {
        std::vector<std::string> out;
        for (const auto& d : s.devices()) out.push_back(d.to_string());
        return out;
      });
  py::class_<OneDeviceStrategy, Strategy, std::shared_ptr<OneDeviceStrategy>>(m, "OneDeviceStrategy")
      .def(py::init(
               [](const std::string& device) { return std::make_shared<OneDeviceStrategy>(Device::parse(device)); }),
           py::arg("device"));
  py::class_<MirroredStrategy, Strategy, std::shared_ptr<MirroredStrategy>>(m, "MirroredStrategy")
      .def(py::init([](const std::vector<std::string>& devices, const std::string& communication,
                       const std::string& reduction) {
             if (reduction != "all_reduce" && reduction != "reduce_to_one")
               throw std::invalid_argument("[mirrored] reduction must be 'all_reduce' or 'reduce_to_one', got '" +
                                           reduction + "'");
             return std::make_shared<MirroredStrategy>(parse_devices(devices), communication,
                                                       reduction == "all_reduce"
                                                           ? GradientReducer::Algorithm::AllReduce
                                                           : GradientReducer::Algorithm::ReduceToOne);
           }),
           py::arg("devices"), py::arg("communication") = "auto", py::arg("reduction") = "all_reduce");
  py::class_<CentralStorageStrategy, Strategy, std::shared_ptr<CentralStorageStrategy>>(m, "CentralStorageStrategy")
      .def(py::init([](const std::vector<std::string>& compute_devices, const std::string& parameter_device) {
             return std::make_shared<CentralStorageStrategy>(parse_devices(compute_devices),
                                                             Device::parse(parameter_device));
           }),
           py::arg("compute_devices"), py::arg("parameter_device"))
      .def_property_readonly("parameter_device",
                             [](const CentralStorageStrategy& s) { return s.parameter_device().to_string(); });
  auto multi_worker =
      py::class_<MultiWorkerMirroredStrategy, Strategy, std::shared_ptr<MultiWorkerMirroredStrategy>>(
          m, "MultiWorkerMirroredStrategy")
          .def(py::init(
                   [](const std::vector<std::string>& devices, const std::string& local_communication, bool use_mpi) {
                     py::gil_scoped_release release;  // joining the MPI job waits for the other workers
                     return std::make_shared<MultiWorkerMirroredStrategy>(parse_devices(devices), local_communication,
                                                                          use_mpi);
                   }),
               py::arg("devices"), py::arg("local_communication") = "threads", py::arg("use_mpi") = true)
          .def("set_timeout", &MultiWorkerMirroredStrategy::set_timeout, py::arg("seconds"))
          .def_property_readonly("timeout", &MultiWorkerMirroredStrategy::timeout);
  def_worker_coordination(multi_worker, [](MultiWorkerMirroredStrategy& s) { return &s; });
  auto model_parallel =
      py::class_<ModelParallelStrategy, Strategy, std::shared_ptr<ModelParallelStrategy>>(m, "ModelParallelStrategy")
          .def(py::init([](const DeviceMesh& mesh, const std::map<std::string, WeightLayout>& layouts,
                           const std::optional<std::string>& batch_dim_name) {
                 // A mesh across workers (DeviceMesh.for_workers): join the MPI job over this worker's
                 // devices (listed first in the mesh), as MultiWorkerMirroredStrategy does.
                 std::shared_ptr<Strategy> workers;
                 if (mesh.num_workers() > 1) {
                   const auto& all = mesh.devices();
                   std::vector<Device> local(all.begin(), all.begin() + mesh.local_device_count());
                   py::gil_scoped_release release;  // joining the MPI job waits for the other workers
                   workers = std::make_shared<MultiWorkerMirroredStrategy>(local, "threads", true);
                 }
                 return std::make_shared<ModelParallelStrategy>(mesh, WeightLayouts(layouts.begin(), layouts.end()),
                                                                batch_dim_name, workers);
               }),
               py::arg("mesh"), py::arg("layouts"), py::arg("batch_dim_name") = py::none())
          .def_property_readonly("model_axis", &ModelParallelStrategy::model_axis)
          .def_property_readonly("batch_axis", &ModelParallelStrategy::batch_axis)
          .def_property_readonly("mesh", &ModelParallelStrategy::mesh)
          .def_property_readonly("layouts", &ModelParallelStrategy::layouts)
          // Per device, in mesh order: bytes of the weights it holds, of its optimizer's slots, and
          // moved over the model axis in the last training step (of the model compiled last).
          .def("parameter_bytes_per_device",
               [](const ModelParallelStrategy& s) { return compiled_executor(s).parameter_bytes(); })
          .def("optimizer_state_bytes_per_device",
               [](const ModelParallelStrategy& s) { return compiled_executor(s).optimizer_state_bytes(); })
          .def("model_axis_bytes_per_step",
               [](const ModelParallelStrategy& s) { return compiled_executor(s).model_axis_bytes(); });
  def_worker_coordination(model_parallel, workers_strategy<ModelParallelStrategy>);
  m.def("mpi_available", &mpi_available);
}

}  // namespace mdtrain::bindings
