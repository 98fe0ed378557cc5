// PipelineStrategy (keras.distribution.PipelineParallel's C++ strategy) and its per-stage reports.
#include "bindings.h"
#include "worker_coordination.h"
#include "mdtrain/strategy/multi_worker_mirrored_strategy.h"
#include "mdtrain/strategy/pipeline_executor.h"
#include "mdtrain/strategy/pipeline_strategy.h"

namespace mdtrain::bindings {

namespace {
PipelineExecutor& compiled_executor(const PipelineStrategy& s) {
  MDTRAIN_CHECK(s.executor() != nullptr, std::logic_error,
                "[pipeline] no model is compiled and trained under this strategy yet: the per-stage reports exist "
                "once a model has run a step under it");
  return *s.executor();
}
}  // namespace

void init_pipeline(py::module_& m) {
  auto pipeline =
      py::class_<PipelineStrategy, Strategy, std::shared_ptr<PipelineStrategy>>(m, "PipelineStrategy")
          .def(py::init([](const DeviceMesh& mesh, int num_microbatches, const std::string& schedule,
                           const std::vector<int>& stage_starts, const std::string& pipe_dim_name,
                           const std::optional<std::string>& batch_dim_name, bool balance_by_time, bool recompute) {
                 // A mesh across workers (DeviceMesh.for_workers): join the MPI job over this worker's
                 // devices (listed first in the mesh), as ModelParallelStrategy's binding does.
                 std::shared_ptr<Strategy> workers;
                 if (mesh.num_workers() > 1) {
                   const auto& all = mesh.devices();
                   std::vector<Device> local(all.begin(), all.begin() + mesh.local_device_count());
                   py::gil_scoped_release release;  // joining the MPI job waits for the other workers
                   workers = std::make_shared<MultiWorkerMirroredStrategy>(local, "threads", true);
                 }
                 return std::make_shared<PipelineStrategy>(mesh, num_microbatches, pipeline_schedule_kind(schedule),
                                                           stage_starts, pipe_dim_name, batch_dim_name, balance_by_time,
                                                           workers, recompute);
               }),
               py::arg("mesh"), py::arg("num_microbatches"), py::arg("schedule") = "1f1b",
               py::arg("stage_starts") = std::vector<int>{}, py::arg("pipe_dim_name") = "pipe",
               py::arg("batch_dim_name") = py::none(), py::arg("balance_by_time") = false, py::arg("recompute") = false)
          .def_property_readonly("num_stages", &PipelineStrategy::num_stages)
          .def_property_readonly("num_microbatches", &PipelineStrategy::num_microbatches)
          .def_property_readonly("mesh", &PipelineStrategy::mesh)
          // Per device in mesh order, for the model compiled last: its first layer, seconds busy
          // (forward + backward), of which forward, and idle since the profile was reset, and the
          // peak bytes of stashed micro-batch inputs in the last step.
          .def("stage_starts", [](const PipelineStrategy& s) { return compiled_executor(s).stage_starts(); })
          .def("busy_seconds", [](const PipelineStrategy& s) { return compiled_executor(s).busy_seconds(); })
          .def("forward_seconds", [](const PipelineStrategy& s) { return compiled_executor(s).forward_seconds(); })
          .def("idle_seconds", [](const PipelineStrategy& s) { return compiled_executor(s).idle_seconds(); })
          .def("peak_stash_bytes", [](const PipelineStrategy& s) { return compiled_executor(s).peak_stash_bytes(); })
          .def("peak_activation_bytes",
               [](const PipelineStrategy& s) { return compiled_executor(s).peak_activation_bytes(); })
          .def_property_readonly("recompute", &PipelineStrategy::recompute)
          // Pipe axis across workers: collective, every worker at the same point (docs/pipeline.md).
          .def("gather_stages",
               [](PipelineStrategy& s) {
                 py::gil_scoped_release release;  // waits for the other workers
                 s.gather_stages();
               })
          .def_property_readonly("pipe_across_workers", &PipelineStrategy::pipe_across_workers)
          // True when the other workers' stages are gathered (no step since the last gather_stages),
          // or nothing trained yet; and how many gathers ran.
          .def("stages_whole", [](const PipelineStrategy& s) { return !s.executor() || s.executor()->stages_whole(); })
          .def("gathers", [](const PipelineStrategy& s) { return s.executor() ? s.executor()->gathers() : 0; });
  def_worker_coordination(pipeline, workers_strategy<PipelineStrategy>);
  m.def(
      "pipeline_bubble_fraction",
      [](const std::string& schedule, int stages, int microbatches, double forward, double backward) {
        PipelineCosts costs;
        costs.forward = forward;
        costs.backward = backward;
        return simulate(make_pipeline_schedule(pipeline_schedule_kind(schedule), stages, microbatches), costs)
            .bubble_fraction();
      },
      py::arg("schedule"), py::arg("stages"), py::arg("microbatches"), py::arg("forward") = 1.0,
      py::arg("backward") = 2.0);
}

}  // namespace mdtrain::bindings
