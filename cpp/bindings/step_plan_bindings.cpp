// StepPlan (strategy/step_plan.h) for Python: the plan a strategy's executor runs, readable by
// the planner (python/mdtrain/plan prices it) and by tests that compare it with the executor's
// collective counts.
#include "bindings.h"
#include "mdtrain/model/model.h"
#include "mdtrain/strategy/pipeline_step_plan.h"
#include "mdtrain/strategy/step_plan.h"
#include "mdtrain/strategy/parameter_server/parameter_server_worker_strategy.h"
#include "mdtrain/strategy/strategy.h"
#include "mdtrain/strategy/tensor_parallel_step_plan.h"

namespace mdtrain::bindings {

namespace {

py::dict op_dict(const PlanOp& op) {
  py::dict d;
  d["kind"] = name_of(op.kind);
  if (op.kind == OpKind::Forward || op.kind == OpKind::Backward) {
    d["segment"] = op.segment;
    d["microbatch"] = op.microbatch;
    d["rows"] = op.rows;
    d["steps"] = op.steps;
  } else if (op.kind == OpKind::Send || op.kind == OpKind::Recv) {
    d["segment"] = op.segment;
    d["microbatch"] = op.microbatch;
    d["rows"] = op.rows;
    d["steps"] = op.steps;
    d["gradient"] = op.gradient;
    d["peer"] = op.peer;
    d["bytes"] = op.bytes;
  } else if (op.kind == OpKind::Collective) {
    d["collective"] = name_of(op.collective);
    d["axis"] = op.axis;
    d["group"] = op.group;
    d["bytes"] = op.bytes;
    d["bucket"] = op.bucket;
    d["during_backward"] = op.during_backward;
    d["first_value"] = op.first_value;
    d["values"] = op.values;
  } else if (op.kind == OpKind::Pull || op.kind == OpKind::Push) {
    d["peer"] = op.peer;
    d["bytes"] = op.bytes;
  } else {
    d["first_value"] = op.first_value;
    d["values"] = op.values;
  }
  return d;
}

}  // namespace

py::dict collective_counts_dict(const CollectiveCounts& counts) {
  py::dict out;
  for (int k = 0; k < kCountedCollectives; ++k) {
    const CollectiveCount& c = counts.of[k];
    if (c.calls == 0) continue;
    py::dict d;
    d["calls"] = c.calls;
    d["bytes"] = c.bytes;
    out[name_of(static_cast<CountedCollective>(k))] = d;
  }
  return out;
}

void init_step_plan(py::module_& m) {
  py::class_<StepPlan>(m, "StepPlan",
                       "What one training step of a strategy does, as data: segments, weight layouts, gradient "
                       "syncs and each device's ordered ops (the plan the executor runs and the planner prices).")
      .def_readonly("strategy", &StepPlan::strategy)
      .def_readonly("mesh_shape", &StepPlan::mesh_shape)
      .def_readonly("mesh_axes", &StepPlan::mesh_axes)
      .def_property_readonly("segments",
                             [](const StepPlan& p) {
                               py::list out;
                               for (const Segment& s : p.segments) {
                                 py::dict d;
                                 d["name"] = s.name;
                                 d["first_layer"] = s.first_layer;
                                 d["end_layer"] = s.end_layer;
                                 d["devices"] = s.devices;
                                 out.append(d);
                               }
                               return out;
                             })
      .def_property_readonly("layouts",
                             [](const StepPlan& p) {
                               py::list out;
                               for (const WeightPlacement& l : p.layouts) {
                                 py::dict d;
                                 d["weight"] = l.weight;
                                 d["values"] = l.values;
                                 d["axis"] = l.axis.empty() ? py::object(py::none()) : py::object(py::str(l.axis));
                                 d["dim"] = l.dim;
                                 d["segment"] = l.segment;
                                 out.append(d);
                               }
                               return out;
                             })
      .def_property_readonly("syncs",
                             [](const StepPlan& p) {
                               py::list out;
                               for (const GradientSync& s : p.syncs) {
                                 py::dict d;
                                 d["kind"] = name_of(s.kind);
                                 d["axis"] = s.axis;
                                 d["group"] = s.group;
                                 d["first_value"] = s.first_value;
                                 d["values"] = s.values;
                                 d["bucket_bytes"] = s.bucket_bytes;
                                 out.append(d);
                               }
                               return out;
                             })
      .def_property_readonly("devices", [](const StepPlan& p) { return static_cast<int>(p.devices.size()); })
      .def(
          "ops",
          [](const StepPlan& p, int device) {
            py::list out;
            for (const DevicePlan& d : p.devices)
              if (d.device == device)
                for (const PlanOp& op : d.ops) out.append(op_dict(op));
            return out;
          },
          py::arg("device"), "Device `device`'s ops in order, one dict each.")
      .def(
          "collective_counts",
          [](const StepPlan& p, int device) { return collective_counts_dict(p.collective_counts(device)); },
          py::arg("device"),
          "Per collective kind of `device`'s ops: {'calls', 'bytes'}, as the executor's profile()['collectives'] "
          "counts one step.");

  m.def(
      "make_step_plan",
      [](Strategy& strategy, Model& model, std::int64_t global_batch) {
        MDTRAIN_CHECK(global_batch >= 0, std::invalid_argument,
                      "[plan] make_step_plan: global_batch must be >= 0, got ", global_batch);
        PlanOptions options;
        if (model.compiled()) {
          options = plan_options_of(model.optimizer());
          options.counts_labels = model.loss().counts_labels();
        }
        options.global_batch = global_batch;
        return strategy.make_plan(model.network(), strategy.mesh(), options);
      },
      py::arg("strategy"), py::arg("model"), py::arg("global_batch") = 0,
      "The strategy's StepPlan for a built model (compiled: with its optimizer's clipping) on global batches of "
      "`global_batch` rows (0: activation bytes and rows left 0).");
  m.def(
      "replicated_step_plan",
      [](const std::vector<std::pair<std::string, std::int64_t>>& weights, std::size_t layers,
         const std::string& strategy, int local_replicas, int workers, bool host_replicas, bool parameter_device,
         bool reduce_to_one, std::size_t bucket_bytes, bool clips_by_norm) {
        PlanWeights w;
        w.layers = layers;
        for (const auto& [name, values] : weights) w.weights.push_back(WeightPlacement{name, values, "", -1, -1});
        ReplicatedPlanInputs in;
        in.strategy = strategy;
        in.local_replicas = local_replicas;
        in.workers = workers;
        in.host_replicas = host_replicas;
        in.parameter_device = parameter_device;
        in.reduction = reduce_to_one ? GradientReducer::Algorithm::ReduceToOne : GradientReducer::Algorithm::AllReduce;
        in.bucket_bytes = bucket_bytes;
        in.clips_by_norm = clips_by_norm;
        return replicated_step_plan(w, in);
      },
      py::arg("weights"), py::arg("layers"), py::arg("strategy"), py::arg("local_replicas"), py::arg("workers") = 1,
      py::arg("host_replicas") = true, py::arg("parameter_device") = false, py::arg("reduce_to_one") = false,
      py::arg("bucket_bytes") = GradientReducer::kDefaultBucketBytes, py::arg("clips_by_norm") = false,
      "The data-parallel StepPlan of float32 `weights` ([(name, values)] in packed order) over `layers` layers "
      "on devices the planner prices (host_replicas: CPU devices of one process, replica 0 the host network), "
      "from the same function the strategies' make_plan calls.");
  m.def(
      "tensor_parallel_forms",
      [](const std::vector<std::tuple<std::string, std::int64_t, std::int64_t>>& layers, int t) {
        std::vector<ProfiledLayer> in;
        for (const auto& [kind, params, output_values] : layers)
          in.push_back(ProfiledLayer{kind, params, output_values});
        std::vector<std::string> out;
        for (ShardedForm f : megatron_forms(in, t)) out.push_back(name_of(f));
        return out;
      },
      py::arg("layers"), py::arg("t"),
      "The forms ('replicated', 'column', 'row', 'column_gather') of the Megatron layout the planner writes for "
      "profiled `layers` ([(class name, trainable values, output values per row)]) over a model axis of t.");
  m.def(
      "tensor_parallel_step_plan",
      [](const py::list& layers, const std::vector<int>& mesh_shape, const std::vector<std::string>& mesh_axes,
         const std::string& model_axis, const std::string& batch_axis, int workers, bool cpu_devices,
         std::size_t bucket_bytes, std::int64_t global_batch, const std::string& strategy) {
        std::vector<TensorParallelLayer> in;
        for (const py::handle& h : layers) {
          const py::dict d = py::reinterpret_borrow<py::dict>(h);
          TensorParallelLayer l;
          l.name = d["name"].cast<std::string>();
          l.form = sharded_form_of(d["form"].cast<std::string>());
          l.input_values = d["input_values"].cast<std::int64_t>();
          l.output_values = d["output_values"].cast<std::int64_t>();
          l.input_grad = d["input_grad"].cast<bool>();
          if (d.contains("timesteps")) l.timesteps = d["timesteps"].cast<std::int64_t>();
          for (const auto& [w, values, dim] :
               d["weights"].cast<std::vector<std::tuple<std::string, std::int64_t, int>>>())
            l.weights.push_back(WeightPlacement{w, values, "", dim, -1});
          in.push_back(std::move(l));
        }
        TensorParallelPlanInputs inputs;
        inputs.strategy = strategy;
        inputs.mesh_shape = mesh_shape;
        inputs.mesh_axes = mesh_axes;
        inputs.model_axis = model_axis;
        inputs.batch_axis = batch_axis;
        inputs.workers = workers;
        inputs.cpu_devices = cpu_devices;
        inputs.bucket_bytes = bucket_bytes;
        inputs.global_batch = global_batch;
        return tensor_parallel_step_plan(in, inputs);
      },
      py::arg("layers"), py::arg("mesh_shape"), py::arg("mesh_axes"), py::arg("model_axis") = "model",
      py::arg("batch_axis") = "", py::arg("workers") = 1, py::arg("cpu_devices") = true,
      py::arg("bucket_bytes") = GradientReducer::kDefaultBucketBytes, py::arg("global_batch") = 0,
      py::arg("strategy") = "ModelParallel",
      "The float32 tensor-parallel StepPlan of `layers` ([{'name', 'form', 'input_values', 'output_values', "
      "'input_grad', 'weights': [(name, values, split dim or -1)], optional 'timesteps'}]) on a mesh: the function "
      "ModelParallel's make_plan calls (cpu_devices with one worker: ZeRO-1 over the batch axis).");
  m.def(
      "parameter_server_step_plan",
      [](const ShardLayout& layout, std::size_t layers, const std::string& strategy) {
        PlanWeights w;
        w.layers = layers;
        if (!layout.variables.empty()) w.dtype = layout.variables.front().dtype;
        for (const PsVariableSpec& v : layout.variables)
          w.weights.push_back(WeightPlacement{v.name, numel(v.shape), "", -1, -1});
        return parameter_server_step_plan(w, layout, strategy);
      },
      py::arg("layout"), py::arg("layers"), py::arg("strategy") = "ParameterServerStrategy",
      "A parameter-server worker's StepPlan for the variables of `layout` (a PsShardLayout) over `layers` layers: "
      "the function ParameterServerWorkerStrategy.make_plan calls (a pull and a push per server of its rows' bytes).");
  m.def(
      "pipeline_step_plan",
      [](const std::vector<std::pair<std::string, std::int64_t>>& weights,
         const std::vector<std::int64_t>& output_values, const std::vector<int>& stage_starts,
         const std::string& schedule, int microbatches, int pipelines, std::int64_t global_batch,
         std::size_t bucket_bytes) {
        MDTRAIN_CHECK(weights.size() == output_values.size(), std::invalid_argument,
                      "[plan] pipeline_step_plan: ", weights.size(), " layers' weights and ", output_values.size(),
                      " layers' output values");
        MDTRAIN_CHECK(pipelines >= 1 && global_batch >= 0, std::invalid_argument,
                      "[plan] pipeline_step_plan: pipelines must be >= 1 and global_batch >= 0");
        std::vector<PlanLayer> layers;
        for (std::size_t i = 0; i < weights.size(); ++i) {
          PlanLayer l;
          if (weights[i].second > 0)
            l.weights.push_back(WeightPlacement{weights[i].first, weights[i].second, "", -1, -1});
          l.output_values = output_values[i];
          layers.push_back(std::move(l));
        }
        PipelinePlanInputs in;
        in.schedule = pipeline_schedule_kind(schedule);
        in.microbatches = microbatches;
        in.stage_starts = stage_starts;
        const int p = static_cast<int>(stage_starts.size()) + 1;
        in.mesh_shape = {p, pipelines};
        in.mesh_axes = {"pipe", "batch"};
        in.batch_axis = "batch";
        in.bucket_bytes = bucket_bytes;
        return pipeline_step_plan(layers, in, global_batch);
      },
      py::arg("weights"), py::arg("output_values"), py::arg("stage_starts"), py::arg("schedule"),
      py::arg("microbatches"), py::arg("pipelines") = 1, py::arg("global_batch") = 0,
      py::arg("bucket_bytes") = GradientReducer::kDefaultBucketBytes,
      "The PipelineParallel StepPlan the planner prices: per layer its float32 trainable values ([(name, values)]) "
      "and the values of one row of its output, stages starting at `stage_starts`, `schedule` with `microbatches` "
      "micro-batches on a (pipe, batch) mesh of `pipelines` pipelines, global batches of `global_batch` rows; from "
      "the same function PipelineStrategy.make_plan calls.");
  m.def(
      "wavefront_step_plan",
      [](Model& model, int stages, std::int64_t time_chunk, std::int64_t global_batch) {
        Network& network = model.network();
        MDTRAIN_CHECK(network.built(), std::invalid_argument, "[wavefront] the model must be built first");
        WavefrontPlanInputs in;
        in.stage_ranges = wavefront_stage_ranges(network, stages);
        in.time_chunk = time_chunk;
        in.timesteps = network.input_shape().empty() ? 1 : network.input_shape()[0];
        in.dtype = network.dtype();
        return wavefront_step_plan(plan_layers_of(network), in, global_batch);
      },
      py::arg("model"), py::arg("stages"), py::arg("time_chunk"), py::arg("global_batch") = 0,
      "The WavefrontPipeline StepPlan of a built Sequential model over `stages` devices with time chunks of "
      "`time_chunk` steps on global batches of `global_batch` rows (what WavefrontStrategy.make_plan makes), for "
      "the planner.");
  m.def(
      "plan_weights",
      [](Model& model) {
        py::list out;
        for (const WeightPlacement& w : plan_weights_of(model.network()).weights)
          out.append(py::make_tuple(w.weight, w.values));
        return out;
      },
      py::arg("model"), "A built model's trainable weights as a plan reads them: [(name, values)] in packed order.");
}

}  // namespace mdtrain::bindings
