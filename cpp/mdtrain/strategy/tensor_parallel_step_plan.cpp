#include "mdtrain/strategy/tensor_parallel_step_plan.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "mdtrain/core/errors.h"
#include "mdtrain/strategy/batch_split.h"
#include "mdtrain/strategy/zero_shards.h"

namespace mdtrain {

namespace {
constexpr ShardedForm kForms[] = {ShardedForm::Replicated,    ShardedForm::Column,        ShardedForm::ColumnGather,
                                  ShardedForm::Row,           ShardedForm::RowWholeInput, ShardedForm::VocabRows,
                                  ShardedForm::RecurrentUnits};

// The model-axis collectives of layer `l`'s forward on `rows` rows (bytes as Communicator::counts
// counts them: an all-reduce its tensor, an all-gather the whole gathered result).
void add_forward_collectives(std::vector<PlanOp>& ops, const TensorParallelLayer& l, const std::string& axis, int t,
                             std::int64_t rows, std::int64_t elem) {
  const std::int64_t out = rows * l.output_values * elem;
  switch (l.form) {
    case ShardedForm::Row:
    case ShardedForm::RowWholeInput:
    case ShardedForm::VocabRows: ops.push_back(collective_op(CountedCollective::AllReduce, axis, t, out)); break;
    case ShardedForm::ColumnGather: ops.push_back(collective_op(CountedCollective::AllGather, axis, t, out)); break;
    case ShardedForm::RecurrentUnits: {
      // The whole h of every timestep: units = the output's last dimension.
      const std::int64_t h = rows * (l.output_values / std::max<std::int64_t>(1, l.timesteps)) * elem;
      for (std::int64_t s = 0; s < l.timesteps; ++s)
        ops.push_back(collective_op(CountedCollective::AllGather, axis, t, h));
      break;
    }
    case ShardedForm::Replicated:
    case ShardedForm::Column: break;
  }
}

void add_backward_collectives(std::vector<PlanOp>& ops, const TensorParallelLayer& l, const std::string& axis, int t,
                              std::int64_t rows, std::int64_t elem) {
  const std::int64_t in = rows * l.input_values * elem;
  switch (l.form) {
    case ShardedForm::Column:
    case ShardedForm::ColumnGather:
      if (l.input_grad) ops.push_back(collective_op(CountedCollective::AllReduce, axis, t, in));
      break;
    case ShardedForm::RowWholeInput:
      if (l.input_grad) ops.push_back(collective_op(CountedCollective::AllGather, axis, t, in));
      break;
    case ShardedForm::RecurrentUnits: {
      // dL/dh_prev of every timestep but the last (the last has no successor), whole units.
      const std::int64_t h = rows * (l.output_values / std::max<std::int64_t>(1, l.timesteps)) * elem;
      for (std::int64_t s = 1; s < l.timesteps; ++s)
        ops.push_back(collective_op(CountedCollective::AllReduce, axis, t, h));
      if (l.input_grad) ops.push_back(collective_op(CountedCollective::AllReduce, axis, t, in));
      break;
    }
    case ShardedForm::Replicated:
    case ShardedForm::Row:
    case ShardedForm::VocabRows: break;
  }
}

}  // namespace

const char* name_of(ShardedForm form) {
  switch (form) {
    case ShardedForm::Replicated: return "replicated";
    case ShardedForm::Column: return "column";
    case ShardedForm::ColumnGather: return "column_gather";
    case ShardedForm::Row: return "row";
    case ShardedForm::RowWholeInput: return "row_whole_input";
    case ShardedForm::VocabRows: return "vocab_rows";
    case ShardedForm::RecurrentUnits: return "recurrent_units";
  }
  return "unknown";
}

ShardedForm sharded_form_of(const std::string& name) {
  std::string names;
  for (ShardedForm f : kForms) {
    if (name == name_of(f)) return f;
    names += (names.empty() ? "" : ", ") + std::string(name_of(f));
  }
  fail<std::invalid_argument>("[plan] no sharded form '", name, "' (forms: ", names, ")");
}

bool tensor_parallel_zero_one(const TensorParallelPlanInputs& in) {
  const auto it = std::find(in.mesh_axes.begin(), in.mesh_axes.end(), in.batch_axis);
  const int batch = in.batch_axis.empty() || it == in.mesh_axes.end()
                        ? 1
                        : in.mesh_shape[static_cast<std::size_t>(it - in.mesh_axes.begin())];
  return batch > 1 && in.workers == 1 && in.cpu_devices;
}

StepPlan tensor_parallel_step_plan(const std::vector<TensorParallelLayer>& layers, const TensorParallelPlanInputs& in) {
  MDTRAIN_CHECK(in.mesh_shape.size() == in.mesh_axes.size() && !in.mesh_shape.empty(), std::invalid_argument, "[plan] ",
                in.strategy, ": a mesh of ", in.mesh_shape.size(), " sizes and ", in.mesh_axes.size(), " axis names");
  const auto axis_index = [&](const std::string& name) -> int {
    const auto it = std::find(in.mesh_axes.begin(), in.mesh_axes.end(), name);
    return it == in.mesh_axes.end() ? -1 : static_cast<int>(it - in.mesh_axes.begin());
  };
  const int model_index = axis_index(in.model_axis);
  MDTRAIN_CHECK(model_index >= 0, std::invalid_argument, "[plan] ", in.strategy, ": the model axis '", in.model_axis,
                "' is not in the mesh");
  const int batch_index = in.batch_axis.empty() ? -1 : axis_index(in.batch_axis);
  MDTRAIN_CHECK(in.batch_axis.empty() || batch_index >= 0, std::invalid_argument, "[plan] ", in.strategy,
                ": the batch axis '", in.batch_axis, "' is not in the mesh");
  const int t = in.mesh_shape[static_cast<std::size_t>(model_index)];
  const int dp = batch_index < 0 ? 1 : in.mesh_shape[static_cast<std::size_t>(batch_index)];
  const auto elem = static_cast<std::int64_t>(size_of(in.dtype));

  StepPlan plan;
  plan.strategy = in.strategy;
  plan.mesh_shape = in.mesh_shape;
  plan.mesh_axes = in.mesh_axes;
  std::int64_t local_values = 0;  // each device's packed trainable values (its shard)
  for (std::size_t i = 0; i < layers.size(); ++i) {
    plan.segments.push_back(Segment{layers[i].name, i, i + 1, {}});
    for (WeightPlacement w : layers[i].weights) {
      if (w.dim >= 0) {
        // A network's split weights divide evenly (TensorParallelPlan checks); a profiled layer's
        // values described as one weight may not: rounded down.
        w.axis = in.model_axis;
        local_values += w.values / t;
      } else {
        w.axis.clear();
        local_values += w.values;
      }
      plan.layouts.push_back(w);
    }
  }
  const bool zero = tensor_parallel_zero_one(in);
  GradientSync sync;
  sync.kind = zero ? SyncKind::ZeroOne : SyncKind::BucketedAllReduce;
  sync.axis = in.batch_axis.empty() ? in.model_axis : in.batch_axis;
  sync.group = dp;
  sync.values = local_values;
  if (!zero) sync.bucket_bytes = in.bucket_bytes;
  plan.syncs.push_back(sync);

  const int devices = std::accumulate(in.mesh_shape.begin(), in.mesh_shape.end(), 1, std::multiplies<int>());
  const ZeroShards shards(local_values, zero ? dp : 1);
  for (int d = 0; d < devices; ++d) {
    // Row-major coordinates of device d.
    std::vector<int> at(in.mesh_shape.size());
    for (int a = static_cast<int>(in.mesh_shape.size()), rest = d; a-- > 0;) {
      at[static_cast<std::size_t>(a)] = rest % in.mesh_shape[static_cast<std::size_t>(a)];
      rest /= in.mesh_shape[static_cast<std::size_t>(a)];
    }
    const int b = batch_index < 0 ? 0 : at[static_cast<std::size_t>(batch_index)];
    const std::int64_t rows = in.global_batch > 0 ? slice_of(in.global_batch, dp, b).rows : 0;
    // A group with no rows of a real batch runs no model-axis collective.
    const bool talks = in.global_batch == 0 || rows > 0;
    DevicePlan dev;
    dev.device = d;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      dev.ops.push_back(compute_op(OpKind::Forward, static_cast<int>(i), 0, rows));
      if (talks) add_forward_collectives(dev.ops, layers[i], in.model_axis, t, rows, elem);
    }
    for (std::size_t i = layers.size(); i-- > 0;) {
      dev.ops.push_back(compute_op(OpKind::Backward, static_cast<int>(i), 0, rows));
      if (talks) add_backward_collectives(dev.ops, layers[i], in.model_axis, t, rows, elem);
    }
    PlanOp update;
    update.kind = OpKind::Update;
    if (zero) {
      const std::int64_t shard_bytes = shards.shard_size() * dp * elem;
      dev.ops.push_back(collective_op(CountedCollective::ReduceScatter, in.batch_axis, dp, shard_bytes));
      const auto [begin, end] = shards.range_of(b);
      update.first_value = begin;
      update.values = end - begin;
      dev.ops.push_back(update);
      dev.ops.push_back(collective_op(CountedCollective::AllGather, in.batch_axis, dp, shard_bytes));
    } else {
      if (dp > 1)
        add_gradient_buckets(dev.ops, in.batch_axis, dp, 0, local_values, size_of(in.dtype), in.bucket_bytes,
                             /*reduce_to_one=*/false, /*during_backward=*/true);
      update.values = local_values;
      dev.ops.push_back(update);
    }
    plan.devices.push_back(std::move(dev));
  }
  return plan;
}

std::vector<TensorParallelLayer> tensor_parallel_layers(Network& network, const TensorParallelPlan& plan) {
  const auto& layers = network.layers();
  // A layer computes its input gradient unless it reads only the network's input.
  std::vector<bool> read(layers.size(), false);
  for (const auto& readers : network.layer_readers())
    for (int r : readers)
      if (r != Network::kOutput) read[static_cast<std::size_t>(r)] = true;
  std::map<const Parameter*, bool> trainable;
  for (const Parameter* p : network.trainable_parameters()) trainable[p] = true;
  std::vector<TensorParallelLayer> out;
  using Kind = TensorParallelPlan::Kind;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    Layer& layer = *layers[i];
    TensorParallelLayer l;
    l.name = layer.name();
    l.input_values = numel(layer.input_shape());
    l.output_values = numel(layer.output_shape());
    l.input_grad = read[i];
    switch (plan.kind(i)) {
      case Kind::Replicated:
      case Kind::SplitDropout: l.form = ShardedForm::Replicated; break;
      case Kind::ColumnDense:
      case Kind::ColumnConv2D:
      case Kind::ColumnEmbedding:
        l.form = plan.gathers_output(i) ? ShardedForm::ColumnGather : ShardedForm::Column;
        break;
      case Kind::RowDense: l.form = plan.input_split(i) ? ShardedForm::Row : ShardedForm::RowWholeInput; break;
      case Kind::RowEmbedding: l.form = ShardedForm::VocabRows; break;
      case Kind::UnitParallelRecurrent:
        l.form = ShardedForm::RecurrentUnits;
        l.timesteps = layer.input_shape().empty() ? 1 : layer.input_shape().front();
        // The gathered h per timestep: output values per row are timesteps x units with
        // return_sequences, units without; the collectives run per timestep on units either way.
        if (layer.output_shape().size() == 1) l.output_values *= l.timesteps;
        break;
    }
    for (Parameter* p : layer.parameters())
      if (trainable.count(p))
        l.weights.push_back(WeightPlacement{p->name, p->value.numel(), "", plan.split_dim(p->name), -1});
    out.push_back(std::move(l));
  }
  return out;
}

std::vector<ShardedForm> megatron_forms(const std::vector<ProfiledLayer>& layers, int t) {
  MDTRAIN_CHECK(t >= 1, std::invalid_argument, "[plan] a model axis of ", t, " devices");
  std::vector<ShardedForm> forms(layers.size(), ShardedForm::Replicated);
  std::vector<std::size_t> dense;
  for (std::size_t i = 0; i < layers.size(); ++i)
    if (layers[i].kind == "Dense") dense.push_back(i);
  for (std::size_t k = 0; k < dense.size();) {
    const std::size_t a = dense[k];
    if (layers[a].output_values % t != 0) {
      ++k;
      continue;
    }
    bool paired = k + 1 < dense.size();
    for (std::size_t j = a + 1; paired && j < dense[k + 1]; ++j) paired = layers[j].params == 0;
    if (paired) {
      forms[a] = ShardedForm::Column;
      forms[dense[k + 1]] = ShardedForm::Row;
      k += 2;
    } else {
      forms[a] = ShardedForm::ColumnGather;
      k += 1;
    }
  }
  return forms;
}

}  // namespace mdtrain
