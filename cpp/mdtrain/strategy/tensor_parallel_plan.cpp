#include "mdtrain/strategy/tensor_parallel_plan.h"

#include "mdtrain/core/errors.h"
#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/conv2d.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/embedding.h"
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

// The activation a column-parallel layer applies to its output.
Activation activation_of(Layer& layer) {
  if (auto* conv = dynamic_cast<Conv2D*>(&layer)) return parse_activation(conv->options().activation);
  if (dynamic_cast<Dense*>(&layer)) return parse_activation(layer.config().get("activation", "linear").as_string());
  return Activation::Linear;  // Embedding
}

}  // namespace

TensorParallelPlan::TensorParallelPlan(LayerStack& primary, const WeightLayouts& layouts, const DeviceMesh& mesh,
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
    if (dynamic_cast<Dense*>(&layer)) {
      const auto k = request(kernel);
      if (!k || *k < 0) refuse(first, "a Dense layer is split through its kernel ((None, 'model') or ('model', None))");
      plan.kind = *k == 1 ? Kind::ColumnDense : Kind::RowDense;
      split_dims_[kernel] = *k;
      check_bias(*k == 1);
    } else if (dynamic_cast<Conv2D*>(&layer)) {
      const auto k = request(kernel);
      if (!k || *k != 3) refuse(first, "Conv2D is split by output channels only: kernel (None, None, None, 'model')");
      plan.kind = Kind::ColumnConv2D;
      split_dims_[kernel] = 3;
      check_bias(true);
    } else if (dynamic_cast<Embedding*>(&layer)) {
      plan.kind = split.front().second == 0 ? Kind::RowEmbedding : Kind::ColumnEmbedding;
      split_dims_[first] = split.front().second;
    } else if (auto* rnn = dynamic_cast<RecurrentLayer*>(&layer)) {
      // Split by units: kernel (None, model) leads; recurrent_kernel and bias follow its last axis.
      const auto k = request(kernel);
      const std::string recurrent = layer.name() + "/recurrent_kernel";
      const int last_of_bias = rnn->options().use_bias ? layer.parameters().back()->value.ndim() - 1 : 0;
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
    } else {
      refuse(first, "layer class " + layer.class_name() +
                        " has no sharded form (Dense, Conv2D, Embedding, SimpleRNN, LSTM and GRU do)");
    }
  }

  // Megatron's f/g pairing: a column-parallel output that reaches a row-parallel Dense through
  // element-wise layers stays split.
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Kind kind = layers_[i].kind;
    if (kind != Kind::ColumnDense && kind != Kind::ColumnConv2D && kind != Kind::ColumnEmbedding) continue;
    if (activation_of(*layers[i]) == Activation::Softmax) continue;  // softmax needs every feature
    std::size_t j = i + 1;
    for (; j < layers.size(); ++j) {
      if (dynamic_cast<Dropout*>(layers[j].get()) && layers_[j].kind == Kind::Replicated) continue;
      auto* act = dynamic_cast<ActivationLayer*>(layers[j].get());
      if (act && act->output_activation() != Activation::Softmax) continue;
      break;
    }
    if (j == layers.size() || layers_[j].kind != Kind::RowDense) continue;
    const std::int64_t features = layers[i]->output_shape().back();
    layers_[i].gather_output = false;
    layers_[j].input_split = true;
    for (std::size_t m = i + 1; m < j; ++m) {
      layers_[m].whole_features = features;
      if (dynamic_cast<Dropout*>(layers[m].get())) layers_[m].kind = Kind::SplitDropout;
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

std::unique_ptr<LayerStack> TensorParallelPlan::build_shard(LayerStack& primary, ShardGroup* group) const {
  const int n = shards_, k = group->rank();
  MDTRAIN_CHECK(group->size() == n, std::invalid_argument, "[model_parallel] a shard group of ", group->size(),
                " for a model split in ", n);
  auto stack = std::make_unique<LayerStack>();
  const auto& layers = primary.layers();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    Layer& layer = *layers[i];
    const LayerPlan& plan = layers_[i];
    std::shared_ptr<Layer> out;
    switch (plan.kind) {
      case Kind::Replicated: out = layer.clone(); break;
      case Kind::ColumnDense: {
        Json c = layer.config();
        const Activation act = parse_activation(c.get("activation", "linear").as_string());
        c.set("units", c.at("units").as_int() / n);
        if (plan.gather_output) c.set("activation", "linear");
        out = std::make_shared<ColumnParallel>(Dense::from_config(c), group, plan.gather_output,
                                               plan.gather_output ? act : Activation::Linear);
        break;
      }
      case Kind::ColumnConv2D: {
        Conv2D::Options o = dynamic_cast<Conv2D&>(layer).options();
        const Activation act = parse_activation(o.activation);
        o.filters /= n;
        if (plan.gather_output) o.activation = "linear";
        out = std::make_shared<ColumnParallel>(std::make_unique<Conv2D>(layer.name(), o), group, plan.gather_output,
                                               plan.gather_output ? act : Activation::Linear);
        break;
      }
      case Kind::ColumnEmbedding: {
        Embedding::Options o = dynamic_cast<Embedding&>(layer).options();
        o.output_dim /= n;
        out = std::make_shared<ColumnParallel>(std::make_unique<Embedding>(layer.name(), o), group, plan.gather_output,
                                               Activation::Linear);
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
    stack->add(std::move(out));
  }
  stack->build(primary.input_shape(), 0, primary.dtype());
  scatter(primary, *stack, k);
  return stack;
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

void TensorParallelPlan::scatter(LayerStack& primary, LayerStack& shard, int k) const {
  const ParameterList from = primary.parameters(), to = shard.parameters();
  check_same_weights(from, to);
  for (std::size_t i = 0; i < from.size(); ++i) {
    const int d = split_dim(from[i]->name);
    if (d < 0) to[i]->value.copy_from(from[i]->value);
    else copy_piece_out(from[i]->name, from[i]->value, k, to[i]->value);
  }
}

void TensorParallelPlan::gather(LayerStack& shard, int k, LayerStack& primary) const {
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
