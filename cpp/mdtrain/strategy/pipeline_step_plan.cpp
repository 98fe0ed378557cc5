#include "mdtrain/strategy/pipeline_step_plan.h"

#include <algorithm>

#include "mdtrain/core/errors.h"
#include "mdtrain/nn/batch_normalization.h"
#include "mdtrain/nn/graph_segment.h"
#include "mdtrain/nn/layer_stack.h"
#include "mdtrain/nn/recurrent_layer.h"
#include "mdtrain/strategy/batch_split.h"
#include "mdtrain/strategy/pipeline_strategy.h"
#include "mdtrain/strategy/stage_balance.h"

namespace mdtrain {

namespace {

PlanOp transfer_op(OpKind kind, bool gradient, int segment, int microbatch, std::int64_t rows, int peer,
                   std::int64_t bytes, std::int64_t steps = 0) {
  PlanOp op = compute_op(kind, segment, microbatch, rows, steps);
  op.gradient = gradient;
  op.peer = peer;
  op.bytes = bytes;
  return op;
}

int axis_of(const std::vector<std::string>& axes, const std::string& name) {
  const auto it = std::find(axes.begin(), axes.end(), name);
  MDTRAIN_CHECK(it != axes.end(), std::invalid_argument, "[plan] the mesh has no axis '", name, "'");
  return static_cast<int>(it - axes.begin());
}

// Row-major device index of `coordinates` in a mesh of `shape` (DeviceMesh's order).
int device_at(const std::vector<int>& shape, const std::vector<int>& coordinates) {
  int index = 0;
  for (std::size_t i = 0; i < shape.size(); ++i) index = index * shape[i] + coordinates[i];
  return index;
}

std::vector<int> coordinates_of(const std::vector<int>& shape, int index) {
  std::vector<int> out(shape.size());
  for (std::size_t i = shape.size(); i-- > 0;) {
    out[i] = index % shape[i];
    index /= shape[i];
  }
  return out;
}

}  // namespace

std::vector<PlanLayer> plan_layers_of(Network& network) {
  std::vector<PlanLayer> out;
  for (const auto& layer : network.layers()) {
    PlanLayer l;
    for (Parameter* p : layer->parameters())
      if (p->trainable) l.weights.push_back(WeightPlacement{p->name, p->value.numel(), "", -1, -1});
    l.output_values = numel(layer->output_shape());
    if (dynamic_cast<const BatchNormalization*>(layer.get()) != nullptr && !layer->output_shape().empty())
      l.statistics_channels = layer->output_shape().back();
    out.push_back(std::move(l));
  }
  return out;
}

std::vector<int> pipeline_stage_starts(Network& network, const PipelineStrategy& strategy) {
  MDTRAIN_CHECK(network.built(), std::logic_error, "[pipeline] the model must be built before training");
  const auto& layers = network.layers();
  const int n = static_cast<int>(layers.size());
  const int p = strategy.num_stages();
  // Stages start at cut points only (Network::cut_points: every layer of a stack; in a layer graph
  // not inside a residual block). The balancing cuts the stretches between them (units: a stack's
  // layers, a graph's layers and blocks), each unit's cost its layers'.
  std::vector<int> unit_starts{0};
  for (int c : network.cut_points()) unit_starts.push_back(c);
  std::vector<int> starts;
  auto balanced = [&](const std::vector<std::int64_t>& unit_costs) {
    for (int u : balance_stages(unit_costs, p)) starts.push_back(unit_starts[static_cast<std::size_t>(u)]);
  };
  // (A stack too short for its stages is refused by balance_stages.)
  MDTRAIN_CHECK(!strategy.stage_starts().empty() || static_cast<int>(unit_starts.size()) >= p ||
                    static_cast<int>(unit_starts.size()) == n,
                std::invalid_argument, "[pipeline] the model's graph can be cut in ", unit_starts.size() - 1,
                " places only (between its residual blocks), too few for ", p, " stages");
  if (strategy.stage_starts().empty() && strategy.balance_by_time()) {
    // Timed on a stack of the units (copies of the model's layers and blocks, weights included).
    LayerStack units;
    for (auto& unit : segment_layers(network, 0, n, true)) units.add(std::move(unit));
    units.build(network.input_shape(), 0, network.dtype());
    copy_parameter_values(network.parameters(), units.parameters());
    balanced(measure_layer_times(units));
  } else if (strategy.stage_starts().empty()) {
    std::vector<std::int64_t> counts(unit_starts.size(), 0);
    for (std::size_t u = 0; u < unit_starts.size(); ++u) {
      const int end = u + 1 < unit_starts.size() ? unit_starts[u + 1] : n;
      for (int i = unit_starts[u]; i < end; ++i)
        for (Parameter* w : layers[static_cast<std::size_t>(i)]->parameters()) counts[u] += w->value.numel();
    }
    balanced(counts);
  } else {
    starts = strategy.stage_starts();
  }
  MDTRAIN_CHECK(starts.empty() || starts.back() < n, std::invalid_argument, "[pipeline] stage ", p - 1,
                " would start at layer ", starts.empty() ? 0 : starts.back(), " but the model has ", n, " layers");
  for (std::size_t s = 0; s < starts.size(); ++s)
    MDTRAIN_CHECK(is_cut_point(network, starts[s]), std::invalid_argument, "[pipeline] stage ", s + 1,
                  " cannot start at layer ", starts[s], ": ", cut_error(network, starts[s]));
  return starts;
}

StepPlan pipeline_step_plan(const std::vector<PlanLayer>& layers, const PipelinePlanInputs& in,
                            std::int64_t global_batch) {
  const int p = static_cast<int>(in.stage_starts.size()) + 1;
  const int m = in.microbatches;
  const PipelineSchedule schedule = make_pipeline_schedule(in.schedule, p, m);
  const int pipe = axis_of(in.mesh_axes, in.pipe_axis);
  MDTRAIN_CHECK(in.mesh_shape.size() == in.mesh_axes.size() && in.mesh_shape[static_cast<std::size_t>(pipe)] == p,
                std::invalid_argument, "[plan] the pipe axis '", in.pipe_axis, "' must have the ", p, " stages");
  const int batch = in.batch_axis.empty() ? -1 : axis_of(in.mesh_axes, in.batch_axis);
  const int pipelines = batch < 0 ? 1 : in.mesh_shape[static_cast<std::size_t>(batch)];
  int devices = 1;
  for (int n : in.mesh_shape) devices *= n;
  MDTRAIN_CHECK(devices == p * pipelines, std::invalid_argument, "[plan] a pipeline's mesh has only the pipe and ",
                "batch axes (", devices, " devices for ", p, " stages x ", pipelines, " pipelines)");
  const std::size_t elem = size_of(in.dtype);
  const auto elem64 = static_cast<std::int64_t>(elem);

  std::vector<int> bounds{0};
  for (int s : in.stage_starts) {
    MDTRAIN_CHECK(s > bounds.back() && s < static_cast<int>(layers.size()), std::invalid_argument,
                  "[plan] stage starts must be ascending layer indices in [1, ", layers.size(), "), got ", s);
    bounds.push_back(s);
  }
  bounds.push_back(static_cast<int>(layers.size()));

  StepPlan plan;
  plan.strategy = in.strategy;
  plan.mesh_shape = in.mesh_shape;
  plan.mesh_axes = in.mesh_axes;
  std::vector<std::int64_t> first_value(static_cast<std::size_t>(p), 0), values(static_cast<std::size_t>(p), 0);
  std::int64_t v = 0;
  for (int s = 0; s < p; ++s) {
    Segment seg{"stage" + std::to_string(s),
                static_cast<std::size_t>(bounds[static_cast<std::size_t>(s)]),
                static_cast<std::size_t>(bounds[static_cast<std::size_t>(s) + 1]),
                {}};
    for (int d = 0; d < devices; ++d)
      if (coordinates_of(in.mesh_shape, d)[static_cast<std::size_t>(pipe)] == s) seg.devices.push_back(d);
    first_value[static_cast<std::size_t>(s)] = v;
    for (std::size_t i = seg.first_layer; i < seg.end_layer; ++i)
      for (WeightPlacement w : layers[i].weights) {
        w.segment = s;
        v += w.values;
        plan.layouts.push_back(std::move(w));
      }
    values[static_cast<std::size_t>(s)] = v - first_value[static_cast<std::size_t>(s)];
    plan.segments.push_back(std::move(seg));
    GradientSync sync;
    sync.kind = SyncKind::BucketedAllReduce;
    sync.axis = in.batch_axis.empty() ? "batch" : in.batch_axis;
    sync.group = pipelines;
    sync.first_value = first_value[static_cast<std::size_t>(s)];
    sync.values = values[static_cast<std::size_t>(s)];
    sync.bucket_bytes = in.bucket_bytes;
    plan.syncs.push_back(sync);
  }
  // Values of one row crossing the boundary after stage s: its last layer's output.
  auto boundary = [&](int s) {
    return layers[static_cast<std::size_t>(bounds[static_cast<std::size_t>(s) + 1] - 1)].output_values;
  };

  for (int d = 0; d < devices; ++d) {
    std::vector<int> at = coordinates_of(in.mesh_shape, d);
    const int s = at[static_cast<std::size_t>(pipe)];
    const int b = batch < 0 ? 0 : at[static_cast<std::size_t>(batch)];
    auto neighbour = [&](int stage) {
      std::vector<int> c = at;
      c[static_cast<std::size_t>(pipe)] = stage;
      return device_at(in.mesh_shape, c);
    };
    const RowSlice group = slice_of(global_batch, pipelines, b);
    auto rows_of = [&](int mb) { return slice_of(group.rows, m, mb).rows; };
    DevicePlan dev;
    dev.device = d;
    const std::string& sum_axis = plan.syncs[static_cast<std::size_t>(s)].axis;
    auto batch_sum = [&](std::int64_t float64s) {
      dev.ops.push_back(collective_op(CountedCollective::AllReduce, sum_axis, pipelines, float64s * 8));
    };
    if (pipelines > 1 && in.counts_labels) batch_sum(1);
    for (const PipelineOp& op : schedule.ops[static_cast<std::size_t>(s)]) {
      const int mb = op.microbatch;
      const std::int64_t rows = rows_of(mb);
      switch (op.kind) {
        case PipelineOpKind::Forward: dev.ops.push_back(compute_op(OpKind::Forward, s, mb, rows)); break;
        case PipelineOpKind::Backward: dev.ops.push_back(compute_op(OpKind::Backward, s, mb, rows)); break;
        case PipelineOpKind::RecvActivation:
          dev.ops.push_back(
              transfer_op(OpKind::Recv, false, s - 1, mb, rows, neighbour(s - 1), rows * boundary(s - 1) * elem64));
          break;
        case PipelineOpKind::SendActivation:
          dev.ops.push_back(
              transfer_op(OpKind::Send, false, s, mb, rows, neighbour(s + 1), rows * boundary(s) * elem64));
          break;
        case PipelineOpKind::RecvGradient:
          dev.ops.push_back(
              transfer_op(OpKind::Recv, true, s, mb, rows, neighbour(s + 1), rows * boundary(s) * elem64));
          break;
        case PipelineOpKind::SendGradient:
          dev.ops.push_back(
              transfer_op(OpKind::Send, true, s - 1, mb, rows, neighbour(s - 1), rows * boundary(s - 1) * elem64));
          break;
      }
    }
    // The stage's gradients summed over the batch axis after the schedule (GradientReducer::reduce
    // of the stage's packed gradients), then its update.
    const auto si = static_cast<std::size_t>(s);
    for (int i = bounds[si]; i < bounds[si + 1] && pipelines > 1; ++i) {
      const std::int64_t channels = layers[static_cast<std::size_t>(i)].statistics_channels;
      if (channels == 0) continue;
      batch_sum(1 + channels);
      batch_sum(channels);
    }
    if (pipelines > 1)
      add_gradient_buckets(dev.ops, plan.syncs[si].axis, pipelines, first_value[si], values[si], elem, in.bucket_bytes,
                           false, false);
    dev.ops.push_back(update_op(first_value[si], values[si]));
    plan.devices.push_back(std::move(dev));
  }
  return plan;
}

PipelineSchedule pipeline_schedule_of(const StepPlan& plan, PipelineScheduleKind kind, int microbatches) {
  const int p = static_cast<int>(plan.segments.size());
  PipelineSchedule schedule{kind, p, microbatches, std::vector<std::vector<PipelineOp>>(static_cast<std::size_t>(p))};
  for (int s = 0; s < p; ++s) {
    const Segment& seg = plan.segments[static_cast<std::size_t>(s)];
    MDTRAIN_CHECK(!seg.devices.empty(), std::logic_error, "[pipeline] the plan's segment ", seg.name,
                  " names no device: not a pipeline stage");
    const auto it = std::find_if(plan.devices.begin(), plan.devices.end(),
                                 [&](const DevicePlan& d) { return d.device == seg.devices.front(); });
    MDTRAIN_CHECK(it != plan.devices.end(), std::logic_error, "[pipeline] the plan has no ops for device ",
                  seg.devices.front());
    auto& ops = schedule.ops[static_cast<std::size_t>(s)];
    for (const PlanOp& op : it->ops) {
      switch (op.kind) {
        case OpKind::Forward: ops.push_back({PipelineOpKind::Forward, op.microbatch}); break;
        case OpKind::Backward: ops.push_back({PipelineOpKind::Backward, op.microbatch}); break;
        case OpKind::Send:
          ops.push_back({op.gradient ? PipelineOpKind::SendGradient : PipelineOpKind::SendActivation, op.microbatch});
          break;
        case OpKind::Recv:
          ops.push_back({op.gradient ? PipelineOpKind::RecvGradient : PipelineOpKind::RecvActivation, op.microbatch});
          break;
        default: break;  // the gradient sum and the update follow the schedule
      }
    }
  }
  return schedule;
}

std::vector<std::pair<int, int>> wavefront_stage_ranges(Network& network, int stages) {
  const auto& layers = network.layers();
  const int n = static_cast<int>(layers.size());
  // The recurrent prefix is a chain: each of its layers reads only the one before it (the first the
  // model's input) and only the next one reads it (a cut point after it), in a stack as in a graph.
  const std::vector<std::vector<int>> inputs = network.layer_inputs();
  auto chained = [&](int i) {
    return inputs[static_cast<std::size_t>(i)] == std::vector<int>{i - 1} &&
           (i + 1 == n || is_cut_point(network, i + 1));
  };
  int prefix = 0;
  bool recurrent = true;  // false: the prefix ends at a recurrent layer that is not chained
  while (prefix < n) {
    auto* r = dynamic_cast<RecurrentLayer*>(layers[static_cast<std::size_t>(prefix)].get());
    if (!r || !r->options().return_sequences) break;
    if (!chained(prefix)) {
      recurrent = false;
      break;
    }
    ++prefix;
  }
  if (prefix < stages) {
    const std::string what =
        prefix < n ? "layer \"" + layers[static_cast<std::size_t>(prefix)]->name() +
                         (recurrent ? "\" is not a recurrent layer with return_sequences=True"
                                    : "\" reads more than the layer before it, or more than the next layer reads it")
                   : "the model has only " + std::to_string(prefix) + " layers";
    fail<std::invalid_argument>(
        "[wavefront] every stage but the last holds recurrent layers with "
        "return_sequences=True, and there are ",
        stages, " stages: ", what);
  }
  std::vector<std::pair<int, int>> out;
  int start = 0;
  for (int s = 0; s < stages; ++s) {
    const int end = start + prefix / stages + (s < prefix % stages ? 1 : 0);
    out.emplace_back(start, end);
    start = end;
  }
  return out;
}

StepPlan wavefront_step_plan(const std::vector<PlanLayer>& layers, const WavefrontPlanInputs& in,
                             std::int64_t global_batch) {
  const int p = static_cast<int>(in.stage_ranges.size());
  MDTRAIN_CHECK(p >= 1 && in.time_chunk >= 1 && in.timesteps >= 1, std::invalid_argument,
                "[plan] a wavefront plan needs stages, time_chunk and timesteps >= 1");
  const auto elem64 = static_cast<std::int64_t>(size_of(in.dtype));
  const int prefix = in.stage_ranges.back().second;
  const bool head = prefix < static_cast<int>(layers.size());
  StepPlan plan;
  plan.strategy = in.strategy;
  plan.mesh_shape = {p};
  plan.mesh_axes = {in.pipe_axis};
  auto add_segment = [&](const std::string& name, int first, int end, int device) {
    const int index = static_cast<int>(plan.segments.size());
    plan.segments.push_back(
        Segment{name, static_cast<std::size_t>(first), static_cast<std::size_t>(end), std::vector<int>{device}});
    for (int i = first; i < end; ++i)
      for (WeightPlacement w : layers[static_cast<std::size_t>(i)].weights) {
        w.segment = index;
        plan.layouts.push_back(std::move(w));
      }
  };
  for (int s = 0; s < p; ++s)
    add_segment("stage" + std::to_string(s), in.stage_ranges[static_cast<std::size_t>(s)].first,
                in.stage_ranges[static_cast<std::size_t>(s)].second, s);
  if (head) add_segment("head", prefix, static_cast<int>(layers.size()), p - 1);
  std::int64_t total = 0;
  for (const WeightPlacement& w : plan.layouts) total += w.values;
  // One optimizer updates the whole model: no gradient is summed over devices.
  GradientSync sync;
  sync.axis = in.pipe_axis;
  sync.values = total;
  plan.syncs.push_back(sync);

  std::vector<std::int64_t> chunk_begin;
  for (std::int64_t t = 0; t < in.timesteps; t += in.time_chunk) chunk_begin.push_back(t);
  chunk_begin.push_back(in.timesteps);
  const int chunks = static_cast<int>(chunk_begin.size()) - 1;
  // Bytes of chunk k of stage s's output sequence (the whole batch, the chunk's steps).
  auto chunk_bytes = [&](int s, int k) {
    const std::int64_t per_step =
        layers[static_cast<std::size_t>(in.stage_ranges[static_cast<std::size_t>(s)].second - 1)].output_values /
        in.timesteps;
    return global_batch * (chunk_begin[static_cast<std::size_t>(k) + 1] - chunk_begin[static_cast<std::size_t>(k)]) *
           per_step * elem64;
  };
  auto steps_of = [&](int k) {
    return chunk_begin[static_cast<std::size_t>(k) + 1] - chunk_begin[static_cast<std::size_t>(k)];
  };
  for (int s = 0; s < p; ++s) {
    DevicePlan dev;
    dev.device = s;
    const bool last = s == p - 1;
    for (int k = 0; k < chunks; ++k) {
      if (s > 0)
        dev.ops.push_back(
            transfer_op(OpKind::Recv, false, s - 1, k, global_batch, s - 1, chunk_bytes(s - 1, k), steps_of(k)));
      dev.ops.push_back(compute_op(OpKind::Forward, s, k, global_batch, steps_of(k)));
      if (!last)
        dev.ops.push_back(transfer_op(OpKind::Send, false, s, k, global_batch, s + 1, chunk_bytes(s, k), steps_of(k)));
    }
    if (last && head) {
      dev.ops.push_back(compute_op(OpKind::Forward, p, 0, global_batch));
      dev.ops.push_back(compute_op(OpKind::Backward, p, 0, global_batch));
    }
    for (int k = chunks; k-- > 0;) {
      if (!last)
        dev.ops.push_back(transfer_op(OpKind::Recv, true, s, k, global_batch, s + 1, chunk_bytes(s, k), steps_of(k)));
      dev.ops.push_back(compute_op(OpKind::Backward, s, k, global_batch, steps_of(k)));
      if (s > 0)
        dev.ops.push_back(
            transfer_op(OpKind::Send, true, s - 1, k, global_batch, s - 1, chunk_bytes(s - 1, k), steps_of(k)));
    }
    if (s == 0) dev.ops.push_back(update_op(0, total));
    plan.devices.push_back(std::move(dev));
  }
  return plan;
}

}  // namespace mdtrain
