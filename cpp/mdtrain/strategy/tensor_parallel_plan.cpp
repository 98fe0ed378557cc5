#include "mdtrain/strategy/tensor_parallel_plan.h"

#include "mdtrain/core/errors.h"
#include "mdtrain/nn/embedding.h"
#include "mdtrain/nn/recurrent_layer.h"
#include "mdtrain/nn/tensor_parallel/column_parallel.h"
#include "mdtrain/nn/tensor_parallel/dim_slices.h"
#include "mdtrain/nn/tensor_parallel/row_parallel_dense.h"
#include "mdtrain/nn/tensor_parallel/split_dropout.h"
#include "mdtrain/nn/tensor_parallel/unit_parallel_recurrent.h"
#include "mdtrain/nn/tensor_parallel/vocab_parallel_embedding.h"

namespace mdtrain {

std::string layout_string(const WeightLayout& layout) {
  std::string out = "(";
  for (std::size_t d = 0; d < layout.size(); ++d)
    out += (d ? ", " : "") + (layout[d] ? "'" + *layout[d] + "'" : std::string("None"));
  return out + (layout.size() == 1 ? ",)" : ")");
}

namespace {

std::string weight_names(Layer& layer) {
  std::string out;
  for (auto* p : layer.parameters()) out += (out.empty() ? "" : ", ") + p->name;
  return out.empty() ? "none" : out;
}

}  // namespace

TensorParallelPlan::TensorParallelPlan(Network& primary, const WeightLayouts& layouts, const DeviceMesh& mesh,
                                       const std::string& model_axis) {
  MDTRAIN_CHECK(primary.built(), std::logic_error, "[model_parallel] the model must be built before it is split");
  shards_ = mesh.axis_size(model_axis);
  const auto& layers = primary.layers();
  layers_.assign(layers.size(), LayerPlan{});
  // Per weight named in `layouts`: the dimension it splits (-1: explicitly replicated).
  std::map<std::string, int> requested;
  for (const auto& [key, layout] : layouts) {
    Parameter* weight = nullptr;
    Layer* owner = nullptr;
    for (const auto& layer : layers)
      for (auto* p : layer->parameters())
        if (p->name == key) {
          weight = p;
          owner = layer.get();
        }
    if (!weight) {
      const std::string layer_name = key.substr(0, key.rfind('/'));
      for (const auto& layer : layers)
        MDTRAIN_CHECK(layer->name() != layer_name, std::invalid_argument, "[model_parallel] layout ",
                      layout_string(layout), " for '", key, "': layer '", layer_name, "' (", layer->class_name(),
                      ") has no weight '", key, "' (its weights: ", weight_names(*layer), ")");
      std::string names;
      for (const auto& layer : layers) names += (names.empty() ? "" : ", ") + layer->name();
      fail<std::invalid_argument>("[model_parallel] layout ", layout_string(layout), " for '", key,
                                  "': the model has no layer named '", layer_name, "' (layers: ", names, ")");
    }
    const std::string where = cat("[model_parallel] layer '", owner->name(), "' (", owner->class_name(), "): layout ",
                                  layout_string(layout), " of weight '", key, "'");
    MDTRAIN_CHECK(static_cast<int>(layout.size()) == weight->value.ndim(), std::invalid_argument, where, " has ",
                  layout.size(), " entries for a weight of shape ", to_string(weight->value.shape()));
    int dim = -1;
    for (std::size_t d = 0; d < layout.size(); ++d) {
      if (!layout[d]) continue;
      MDTRAIN_CHECK(mesh.has_axis(*layout[d]), std::invalid_argument, where, ": axis '", *layout[d],
                    "' is not in the mesh ", mesh.to_string());
      MDTRAIN_CHECK(*layout[d] == model_axis, std::invalid_argument, where,
                    ": weights are split along the model axis '", model_axis, "' only, not '", *layout[d], "'");
      MDTRAIN_CHECK(dim < 0, std::invalid_argument, where, ": a weight is split along one dimension at most");
      dim = static_cast<int>(d);
    }
    if (dim >= 0)
      MDTRAIN_CHECK(weight->value.dim(dim) % shards_ == 0, std::invalid_argument, where, ": dimension ", dim, " (size ",
                    weight->value.dim(dim), ") is not divisible by the size ", shards_, " of axis '", model_axis, "'");
    requested[key] = dim;
  }
  auto request = [&](const std::string& key) -> std::optional<int> {
    auto it = requested.find(key);
    return it == requested.end() ? std::nullopt : std::optional<int>(it->second);
  };

  for (std::size_t i = 0; i < layers.size(); ++i) {
    Layer& layer = *layers[i];
    LayerPlan& plan = layers_[i];
    std::vector<std::pair<std::string, int>> split;  // the layer's split weights
    for (auto* p : layer.parameters()) {
      const auto d = request(p->name);
      if (d && *d >= 0) split.emplace_back(p->name, *d);
    }
    if (split.empty()) continue;
    const std::string kernel = layer.name() + "/kernel", bias = layer.name() + "/bias";
    const std::string first = split.front().first;
    auto refuse = [&](const std::string& weight, const std::string& why) {
      WeightLayout shown = layouts.at(weight);
      fail<std::invalid_argument>("[model_parallel] layer '", layer.name(), "' (", layer.class_name(), "): layout ",
                                  layout_string(shown), " of weight '", weight, "' is not supported: ", why);
    };
    // A bias follows its kernel: split with a column-parallel kernel, replicated otherwise.
    auto check_bias = [&](bool split_kernel) {
      const auto b = request(bias);
      if (!b) {
        if (split_kernel) split_dims_[bias] = 0;
        return;
      }
      if (split_kernel && *b != 0)
        refuse(bias, "the kernel's output features are split, so its bias is split with them ('model',) or left out");
      if (!split_kernel && *b >= 0) refuse(bias, "a bias is split only with a kernel split by output features");
      if (split_kernel) split_dims_[bias] = 0;
    };
    using Form = Layer::TensorParallelForm;
    switch (layer.tensor_parallel_form()) {
      case Form::Dense: {
        const auto k = request(kernel);
        if (!k || *k < 0)
          refuse(first, "a Dense layer is split through its kernel ((None, 'model') or ('model', None))");
        plan.kind = *k == 1 ? Kind::ColumnDense : Kind::RowDense;
        split_dims_[kernel] = *k;
        check_bias(*k == 1);
        break;
      }
      case Form::Conv2D: {
        const auto k = request(kernel);
        if (!k || *k != 3) refuse(first, "Conv2D is split by output channels only: kernel (None, None, None, 'model')");
        plan.kind = Kind::ColumnConv2D;
        split_dims_[kernel] = 3;
        check_bias(true);
        break;
      }
      case Form::Embedding:
        plan.kind = split.front().second == 0 ? Kind::RowEmbedding : Kind::ColumnEmbedding;
        split_dims_[first] = split.front().second;
        break;
      case Form::Recurrent: {
        // Split by units: kernel (None, model) leads; recurrent_kernel and bias follow its last axis.
        const auto k = request(kernel);
        const std::string recurrent = layer.name() + "/recurrent_kernel";
        int last_of_bias = 0;
        for (auto* p : layer.parameters())
          if (p->name == bias) last_of_bias = p->value.ndim() - 1;
        if (!k || *k != 1)
          refuse(first,
                 "a recurrent layer is split by units: kernel (None, 'model') (each shard takes its units of "
                 "every gate), with recurrent_kernel (None, 'model') and the bias split along its last axis, "
                 "or left out");
        const auto r = request(recurrent);
        if (r && *r != 1) refuse(recurrent, "the kernel's units are split, so recurrent_kernel is (None, 'model')");
        const auto b = request(bias);
        if (b && *b != last_of_bias)
          refuse(bias, "the kernel's units are split, so the bias is split along its last axis");
        plan.kind = Kind::UnitParallelRecurrent;
        const std::int64_t gates = UnitParallelRecurrent::gates_of(layer.class_name());
        for (auto* p : layer.parameters()) {
          split_dims_[p->name] = p->value.ndim() - 1;
          gate_counts_[p->name] = gates;
        }
        break;
      }
      case Form::None:
      case Form::ElementwiseDropout:
      case Form::Elementwise:
        refuse(first, "layer class " + layer.class_name() +
                          " has no sharded form (Dense, Conv2D, Embedding, SimpleRNN, LSTM and GRU do)");
    }
  }

  // Megatron's f/g pairing: a column-parallel output that reaches a row-parallel Dense through
  // element-wise layers stays split. Each value on the way has one reader (a layer graph's value
  // read twice, or returned, is gathered).
  const std::vector<std::vector<int>> readers = primary.layer_readers();
  auto only_reader = [&](std::size_t i) -> int {
    const auto& r = readers[i];
    return r.size() == 1 ? r.front() : Network::kOutput;
  };
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Kind kind = layers_[i].kind;
    if (kind != Kind::ColumnDense && kind != Kind::ColumnConv2D && kind != Kind::ColumnEmbedding) continue;
    if (layers[i]->output_activation() == Activation::Softmax) continue;  // softmax needs every feature
    std::vector<std::size_t> between;
    int j = only_reader(i);
    for (; j != Network::kOutput; j = only_reader(static_cast<std::size_t>(j))) {
      const auto form = layers[static_cast<std::size_t>(j)]->tensor_parallel_form();
      if (layers_[static_cast<std::size_t>(j)].kind != Kind::Replicated) break;
      if (form != Layer::TensorParallelForm::ElementwiseDropout && form != Layer::TensorParallelForm::Elementwise)
        break;
      between.push_back(static_cast<std::size_t>(j));
    }
    if (j == Network::kOutput || layers_[static_cast<std::size_t>(j)].kind != Kind::RowDense) continue;
    const std::int64_t features = layers[i]->output_shape().back();
    layers_[i].gather_output = false;
    layers_[static_cast<std::size_t>(j)].input_split = true;
    for (std::size_t m : between) {
      layers_[m].whole_features = features;
      if (layers[m]->tensor_parallel_form() == Layer::TensorParallelForm::ElementwiseDropout)
        layers_[m].kind = Kind::SplitDropout;
    }
  }
}

bool TensorParallelPlan::sharded(std::size_t layer) const {
  const Kind k = layers_[layer].kind;
  return k != Kind::Replicated && k != Kind::SplitDropout;
}

int TensorParallelPlan::split_dim(const std::string& weight) const {
  auto it = split_dims_.find(weight);
  return it == split_dims_.end() ? -1 : it->second;
}

std::unique_ptr<Network> TensorParallelPlan::build_shard(Network& primary, ShardGroup* group) const {
  const int n = shards_, k = group->rank();
  MDTRAIN_CHECK(group->size() == n, std::invalid_argument, "[model_parallel] a shard group of ", group->size(),
                " for a model split in ", n);
  const auto& layers = primary.layers();
  std::vector<std::shared_ptr<Layer>> sharded;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    Layer& layer = *layers[i];
    const LayerPlan& plan = layers_[i];
    std::shared_ptr<Layer> out;
    switch (plan.kind) {
      case Kind::Replicated: out = layer.clone(); break;
      case Kind::ColumnDense:
      case Kind::ColumnConv2D:
      case Kind::ColumnEmbedding: {
        // The inner layer applies its activation unless the output is gathered (then the gathered
        // whole gets it) or it is an Embedding (none).
        const Activation act = layer.output_activation();
        out = std::make_shared<ColumnParallel>(layer.with_output_share(n, plan.gather_output), group,
                                               plan.gather_output, plan.gather_output ? act : Activation::Linear);
        break;
      }
      case Kind::RowDense: out = std::make_shared<RowParallelDense>(layer.config(), group, plan.input_split); break;
      case Kind::RowEmbedding:
        out = std::make_shared<VocabParallelEmbedding>(layer.name(), dynamic_cast<Embedding&>(layer).options(), group);
        break;
      case Kind::UnitParallelRecurrent:
        out = std::make_shared<UnitParallelRecurrent>(dynamic_cast<RecurrentLayer&>(layer), group);
        break;
      case Kind::SplitDropout: {
        const Json c = layer.config();
        const std::int64_t piece = plan.whole_features / n;
        out = std::make_shared<SplitDropout>(layer.name(), c.at("rate").as_number(),
                                             static_cast<std::uint64_t>(c.get("seed", 0).as_number()),
                                             plan.whole_features, k * piece);
        break;
      }
    }
    sharded.push_back(std::move(out));
  }
  std::unique_ptr<Network> shard = primary.with_layers(std::move(sharded));
  scatter(primary, *shard, k);
  return shard;
}

namespace {
void check_same_weights(const ParameterList& a, const ParameterList& b) {
  MDTRAIN_CHECK(a.size() == b.size(), std::logic_error, "[model_parallel] a shard has ", b.size(),
                " weights, the model ", a.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    MDTRAIN_CHECK(a[i]->name == b[i]->name, std::logic_error, "[model_parallel] shard weight '", b[i]->name,
                  "' where the model has '", a[i]->name, "'");
}
}  // namespace

void TensorParallelPlan::scatter(Network& primary, Network& shard, int k) const {
  const ParameterList from = primary.parameters(), to = shard.parameters();
  check_same_weights(from, to);
  for (std::size_t i = 0; i < from.size(); ++i) {
    const int d = split_dim(from[i]->name);
    if (d < 0) to[i]->value.copy_from(from[i]->value);
    else copy_piece_out(from[i]->name, from[i]->value, k, to[i]->value);
  }
}

void TensorParallelPlan::gather(Network& shard, int k, Network& primary) const {
  const ParameterList from = shard.parameters(), to = primary.parameters();
  check_same_weights(to, from);
  for (std::size_t i = 0; i < from.size(); ++i) {
    const int d = split_dim(from[i]->name);
    if (d >= 0) copy_piece_in(from[i]->name, from[i]->value, k, to[i]->value);
    else if (k == 0) to[i]->value.copy_from(from[i]->value);
  }
}

void TensorParallelPlan::copy_piece_out(const std::string& weight, const Tensor& whole, int k, Tensor& part) const {
  const auto gated = gate_counts_.find(weight);
  if (gated != gate_counts_.end()) return copy_gate_units_out(whole, gated->second, k, shards_, part);
  ::mdtrain::copy_piece_out(whole, split_dim(weight), k, shards_, part);
}

void TensorParallelPlan::copy_piece_in(const std::string& weight, const Tensor& part, int k, Tensor& whole) const {
  const auto gated = gate_counts_.find(weight);
  if (gated != gate_counts_.end()) return copy_gate_units_in(part, gated->second, k, shards_, whole);
  ::mdtrain::copy_piece_in(part, split_dim(weight), k, shards_, whole);
}

}  // namespace mdtrain
