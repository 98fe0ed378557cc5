#include "mdtrain/nn/layer_graph.h"

#include <algorithm>
#include <cstring>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/nn/concatenate.h"
#include "mdtrain/nn/merge_layer.h"
#include "mdtrain/nn/sequence_mask.h"
#include "mdtrain/nn/value_gradient.h"
#include "mdtrain/ops/accumulate.h"

namespace mdtrain {

namespace {

std::int64_t row_elements(const Shape& shape) { return numel(shape); }

// Copies rows of `part` (batch, ...) into columns [offset, offset + part's row size) of `packed`
// (batch, total), or back when `to_packed` is false.
void copy_columns(Tensor& packed, std::int64_t offset, Tensor& part, bool to_packed) {
  const std::int64_t rows = part.dim(0), width = part.row_size(), total = packed.row_size();
  const auto elem = static_cast<std::int64_t>(size_of(packed.dtype()));
  auto* p = static_cast<char*>(packed.raw());
  auto* q = static_cast<char*>(part.raw());
  for (std::int64_t r = 0; r < rows; ++r) {
    char* in_packed = p + (r * total + offset) * elem;
    char* in_part = q + r * width * elem;
    if (to_packed) std::memcpy(in_packed, in_part, static_cast<std::size_t>(width * elem));
    else std::memcpy(in_part, in_packed, static_cast<std::size_t>(width * elem));
  }
}

Shape batched(std::int64_t batch, const Shape& shape) {
  Shape out{batch};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

}  // namespace

LayerGraph::LayerGraph(std::vector<Shape> input_shapes) : input_shapes_(std::move(input_shapes)) {
  MDTRAIN_CHECK(!input_shapes_.empty(), std::invalid_argument, "[functional] a model needs at least one input");
  readers_.assign(input_shapes_.size(), 0);
  if (input_shapes_.size() == 1) {
    packed_input_shape_ = input_shapes_[0];
  } else {
    // Several inputs cross as one packed (batch, total) array: each needs a fixed row size.
    for (const auto& s : input_shapes_)
      MDTRAIN_CHECK(!has_unknown_dim(s), std::invalid_argument, "[functional] a model with ", input_shapes_.size(),
                    " inputs needs every dimension of each input known, got input shape ", to_string(s),
                    " (variable-length inputs: one input per model for now)");
    std::int64_t total = 0;
    for (const auto& s : input_shapes_) total += row_elements(s);
    packed_input_shape_ = {total};
  }
}

int LayerGraph::add_node(std::shared_ptr<Layer> layer, std::vector<int> inputs) {
  MDTRAIN_CHECK(layer != nullptr, std::invalid_argument, "[functional] cannot add a null layer");
  MDTRAIN_CHECK(!built_, std::logic_error, "[functional] the graph is built: no node can be added");
  const int value = num_inputs() + static_cast<int>(nodes_.size());
  int shares = -1;
  for (std::size_t i = 0; i < nodes_.size() && shares < 0; ++i)
    if (nodes_[i].shares < 0 && nodes_[i].layer == layer) shares = static_cast<int>(i);
  if (shares < 0)
    for (const auto& l : layers_)
      MDTRAIN_CHECK(l->name() != layer->name(), std::invalid_argument, "[functional] a layer named \"", layer->name(),
                    "\" is already in the model; layer names must be unique");
  MDTRAIN_CHECK(shares < 0 || !layer->adds_activity_loss(), std::invalid_argument, "[functional] layer \"",
                layer->name(), "\" (", layer->class_name(),
                ") adds an activity loss and is called more than once; mdtrain calls such a layer once per model");
  const bool merge = dynamic_cast<MergeLayer*>(layer.get()) != nullptr;
  MDTRAIN_CHECK(merge ? inputs.size() >= 2 : inputs.size() == 1, std::invalid_argument, "[functional] layer \"",
                layer->name(), "\" (", layer->class_name(), ") ",
                merge ? "should be called on a list of at least 2 inputs" : "takes exactly one input", ", got ",
                inputs.size());
  for (int v : inputs)
    MDTRAIN_CHECK(v >= 0 && v < value, std::invalid_argument, "[functional] layer \"", layer->name(), "\" reads value ",
                  v, ", which is not defined before it (values 0..", value - 1, ")");
  for (int v : inputs) ++readers_[static_cast<std::size_t>(v)];
  readers_.push_back(0);
  std::size_t layer_index = layers_.size();
  if (shares >= 0) {
    layer_index = nodes_[static_cast<std::size_t>(shares)].layer_index;
  } else {
    layers_.push_back(layer);
  }
  nodes_.push_back({std::move(layer), std::move(inputs), shares, layer_index});
  return value;
}

const std::shared_ptr<Layer>& LayerGraph::node_layer(std::size_t i) const { return layers_[nodes_.at(i).layer_index]; }

bool LayerGraph::has_shared_layers() const { return layers_.size() != nodes_.size(); }

void LayerGraph::require_unshared(const char* what) const {
  for (const auto& node : nodes_)
    MDTRAIN_CHECK(node.shares < 0, std::invalid_argument, "[functional] layer \"", node.layer->name(),
                  "\" is called at several places of the model; ", what,
                  " needs one call per layer (train a model with shared layers under a data-parallel strategy)");
}

void LayerGraph::set_outputs(std::vector<int> outputs) {
  MDTRAIN_CHECK(!outputs.empty(), std::invalid_argument, "[functional] a model needs at least one output");
  const int values = num_inputs() + static_cast<int>(nodes_.size());
  std::vector<bool> needed(static_cast<std::size_t>(values), false);
  for (int v : outputs) {
    MDTRAIN_CHECK(v >= 0 && v < values, std::invalid_argument, "[functional] output value ", v,
                  " is not defined (values 0..", values - 1, ")");
    needed[static_cast<std::size_t>(v)] = true;
  }
  for (std::size_t i = nodes_.size(); i-- > 0;) {
    const std::size_t value = static_cast<std::size_t>(num_inputs()) + i;
    MDTRAIN_CHECK(needed[value], std::invalid_argument, "[functional] layer \"", nodes_[i].layer->name(),
                  "\" does not contribute to any output of the model");
    for (int v : nodes_[i].inputs) needed[static_cast<std::size_t>(v)] = true;
  }
  for (int v : outputs_) --readers_[static_cast<std::size_t>(v)];
  outputs_ = std::move(outputs);
  for (int v : outputs_) ++readers_[static_cast<std::size_t>(v)];
}

void LayerGraph::build(std::uint64_t seed, DType dtype) {
  MDTRAIN_CHECK(!nodes_.empty(), std::invalid_argument, "[functional] cannot build a model with no layers");
  MDTRAIN_CHECK(!outputs_.empty(), std::invalid_argument, "[functional] the model's outputs are not set");
  std::vector<Shape> shapes = input_shapes_;
  std::size_t weighted = 0;  // nodes with weights so far: the seeds' index (layer_seed)
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    Node& node = nodes_[i];
    if (node.shares >= 0) {
      // A later call: the layer is built on its first call's inputs; this one must fit them.
      const Node& first = nodes_[static_cast<std::size_t>(node.shares)];
      for (std::size_t k = 0; k < node.inputs.size(); ++k) {
        const Shape& expected = shapes[static_cast<std::size_t>(first.inputs[k])];
        const Shape& given = shapes[static_cast<std::size_t>(node.inputs[k])];
        MDTRAIN_CHECK(given == expected, std::invalid_argument, "[functional] layer \"", node.layer->name(), "\" (",
                      node.layer->class_name(), ") is called on an input of shape ", to_string(given),
                      " after a call on ", to_string(expected),
                      "; a layer called at several places takes inputs of one shape");
      }
      node.layer = std::shared_ptr<Layer>(first.layer->clone());
      shapes.push_back(node.layer->output_shape());
      continue;
    }
    if (auto* merge = dynamic_cast<MergeLayer*>(node.layer.get())) {
      std::vector<Shape> in;
      for (int v : node.inputs) in.push_back(shapes[static_cast<std::size_t>(v)]);
      merge->build_inputs(in, dtype);
    } else {
      node.layer->build(shapes[static_cast<std::size_t>(node.inputs[0])], layer_seed(seed, weighted), dtype);
    }
    if (!node.layer->parameters().empty()) ++weighted;
    shapes.push_back(node.layer->output_shape());
  }
  if (outputs_.size() > 1)
    for (int v : outputs_)  // several outputs cross as one packed array, like several inputs
      MDTRAIN_CHECK(!has_unknown_dim(shapes[static_cast<std::size_t>(v)]), std::invalid_argument,
                    "[functional] a model with ", outputs_.size(),
                    " outputs needs every dimension of each output known, got output shape ",
                    to_string(shapes[static_cast<std::size_t>(v)]));
  dtype_ = dtype;
  built_ = true;
  pack_parameters();
}

void LayerGraph::check_built() const {
  MDTRAIN_CHECK(built_, std::logic_error, "[functional] the model is not built yet");
}

void LayerGraph::pack_parameters() {
  PackedNetwork::pack_parameters();
  for (auto& node : nodes_) {
    if (node.shares < 0) continue;
    const Layer& layer = *layers_[node.layer_index];
    node.layer->set_trainable(layer.trainable());
    const std::vector<Parameter*> own = layers_[node.layer_index]->parameters();
    const std::vector<Parameter*> call = node.layer->parameters();
    MDTRAIN_CHECK(own.size() == call.size(), std::logic_error, "[functional] layer \"", layer.name(),
                  "\" has a clone of another weight count");
    for (std::size_t k = 0; k < own.size(); ++k) {
      call[k]->value = own[k]->value;
      call[k]->trainable = own[k]->trainable;
      call[k]->grad = own[k]->grad.defined()
                          ? Tensor::zeros(own[k]->value.shape(), own[k]->value.dtype(), own[k]->value.device())
                          : Tensor();
    }
  }
}

void LayerGraph::add_shared_gradients(std::size_t i) {
  if (!has_shared_layers()) return;
  const std::vector<Parameter*> own = nodes_[i].layer->parameters();
  for (std::size_t j = i + 1; j < nodes_.size(); ++j) {
    if (nodes_[j].shares != static_cast<int>(i)) continue;
    const std::vector<Parameter*> call = nodes_[j].layer->parameters();
    for (std::size_t k = 0; k < own.size(); ++k)
      if (own[k]->trainable) ops::add_into(own[k]->grad, call[k]->grad);
  }
}

Shape LayerGraph::value_shape(int value) const {
  if (value < num_inputs()) return input_shapes_[static_cast<std::size_t>(value)];
  check_built();
  return nodes_[static_cast<std::size_t>(value - num_inputs())].layer->output_shape();
}

std::vector<Shape> LayerGraph::output_shapes() const {
  std::vector<Shape> out;
  for (int v : outputs_) out.push_back(value_shape(v));
  return out;
}

Shape LayerGraph::output_shape() const {
  check_built();
  if (outputs_.size() == 1) return value_shape(outputs_[0]);
  std::int64_t total = 0;
  for (const auto& s : output_shapes()) total += row_elements(s);
  return {total};
}

bool LayerGraph::reads_only_inputs(const Node& node) const {
  for (int v : node.inputs)
    if (v >= num_inputs()) return false;
  return true;
}

Tensor LayerGraph::forward(const Tensor& x, const ForwardContext& ctx) {
  check_built();
  const auto ni = static_cast<std::size_t>(num_inputs());
  values_.assign(ni + nodes_.size(), Tensor());
  if (ni == 1) {
    values_[0] = x;
  } else {
    MDTRAIN_CHECK(x.ndim() == 2 && x.dim(1) == packed_input_shape_[0], std::invalid_argument,
                  "[functional] a model with ", ni, " inputs takes them packed as (batch, ", packed_input_shape_[0],
                  "), got ", to_string(x.shape()));
    input_buffers_.resize(ni);
    Tensor packed = x;
    std::int64_t offset = 0;
    for (std::size_t k = 0; k < ni; ++k) {
      ensure_buffer(input_buffers_[k], batched(x.dim(0), input_shapes_[k]), x.dtype(), x.device());
      copy_columns(packed, offset, input_buffers_[k], false);
      offset += row_elements(input_shapes_[k]);
      values_[k] = input_buffers_[k];
    }
  }
  masks_.assign(ni + nodes_.size(), Tensor());
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    if (auto* merge = dynamic_cast<MergeLayer*>(node.layer.get())) {
      std::vector<Tensor> in;
      for (int v : node.inputs) in.push_back(values_[static_cast<std::size_t>(v)]);
      values_[ni + i] = merge->forward_inputs(in);
      masks_[ni + i] = merged_mask(node, in);
    } else {
      const auto input = static_cast<std::size_t>(node.inputs[0]);
      auto* masked = dynamic_cast<MaskedLayer*>(node.layer.get());
      if (masked != nullptr) masked->set_input_mask(masks_[input]);
      values_[ni + i] = node.layer->forward(values_[input], ctx);
      if (masked != nullptr) masks_[ni + i] = masked->output_mask();
      else if (passes_mask(*node.layer)) masks_[ni + i] = masks_[input];
    }
  }
  if (outputs_.size() == 1) return values_[static_cast<std::size_t>(outputs_[0])];
  output_buffer_.resize(1);
  ensure_buffer(output_buffer_[0], batched(x.dim(0), output_shape()), dtype_, x.device());
  std::int64_t offset = 0;
  for (int v : outputs_) {
    Tensor part = values_[static_cast<std::size_t>(v)];
    copy_columns(output_buffer_[0], offset, part, true);
    offset += part.row_size();
  }
  return output_buffer_[0];
}

void LayerGraph::accumulate(int value, const Tensor& g) {
  if (value < num_inputs()) return;
  const auto v = static_cast<std::size_t>(value);
  accumulators_.resize(readers_.size());
  accumulate_value_gradient(grads_[v], accumulators_[v], g, readers_[v]);
}

void LayerGraph::run_backward(const Tensor* dy, const Tensor* dlogits, const GradientsFinal& on_final) {
  check_built();
  const auto ni = static_cast<std::size_t>(num_inputs());
  grads_.assign(ni + nodes_.size(), Tensor());
  if (dy != nullptr) {
    if (outputs_.size() == 1) {
      accumulate(outputs_[0], *dy);
    } else {
      Tensor packed = *dy;
      std::int64_t offset = 0;
      for (int v : outputs_) {
        Tensor part(batched(dy->dim(0), value_shape(v)), dy->dtype(), dy->device());
        copy_columns(packed, offset, part, false);
        offset += part.row_size();
        accumulate(v, part);
      }
    }
  }
  for (std::size_t i = nodes_.size(); i-- > 0;) {
    const Node& node = nodes_[i];
    const bool need = !reads_only_inputs(node);
    if (dlogits != nullptr && i + 1 == nodes_.size()) {
      Tensor dx = node.layer->backward_from_logits(*dlogits, need);
      if (need) accumulate(node.inputs[0], dx);
    } else {
      Tensor g = grads_[ni + i];
      if (auto* merge = dynamic_cast<MergeLayer*>(node.layer.get())) {
        std::vector<Tensor> dx = merge->backward_inputs(g);
        for (std::size_t k = 0; k < dx.size(); ++k) accumulate(node.inputs[k], dx[k]);
      } else {
        Tensor dx = node.layer->backward(g, need);
        if (need) accumulate(node.inputs[0], dx);
      }
    }
    if (node.shares < 0) {
      add_shared_gradients(i);
      layer_done(node.layer_index, on_final);
    }
  }
}

void LayerGraph::backward(const Tensor& dy, const GradientsFinal& on_final) { run_backward(&dy, nullptr, on_final); }

Activation LayerGraph::output_activation() const {
  if (outputs_.size() != 1 || nodes_.empty() || outputs_[0] != num_inputs() + static_cast<int>(nodes_.size()) - 1)
    return Activation::Linear;
  return nodes_.back().layer->output_activation();
}

Tensor LayerGraph::logits() const { return nodes_.back().layer->logits(); }

void LayerGraph::backward_from_logits(const Tensor& dlogits, const GradientsFinal& on_final) {
  MDTRAIN_CHECK(output_activation() != Activation::Linear, std::logic_error,
                "[functional] the model's output has no logits");
  run_backward(nullptr, &dlogits, on_final);
}

void LayerGraph::step_without_rows(const ForwardContext& ctx, const GradientsFinal& on_final) {
  forward_without_rows(ctx);
  backward_without_rows(on_final);
}

void LayerGraph::forward_without_rows(const ForwardContext& ctx) {
  check_built();
  for (auto& node : nodes_) node.layer->forward_without_rows(ctx);
}

void LayerGraph::backward_without_rows(const GradientsFinal& on_final) {
  for (std::size_t i = nodes_.size(); i-- > 0;) {
    nodes_[i].layer->backward_without_rows(!reads_only_inputs(nodes_[i]));
    if (nodes_[i].shares < 0) layer_done(nodes_[i].layer_index, on_final);
  }
}

namespace {

// A concatenation's mask joins its inputs' along time (axis 1 of (batch, timesteps, ...)) or ORs
// them (the last axis); any other axis has no mask to give in Keras's terms here.
enum class MaskJoin { Or, Time, Unsupported };

MaskJoin concatenate_join(const Concatenate& layer) {
  const std::size_t rank = layer.output_shape().size();  // without the batch axis
  const int axis = layer.axis() < 0 ? layer.axis() + static_cast<int>(rank) + 1 : layer.axis();
  if (rank >= 2 && axis == static_cast<int>(rank)) return MaskJoin::Or;
  if (rank >= 2 && axis == 1) return MaskJoin::Time;
  return MaskJoin::Unsupported;
}

}  // namespace

bool LayerGraph::output_masked() const {
  if (outputs_.size() != 1 || !built_) return false;
  const auto ni = static_cast<std::size_t>(num_inputs());
  std::vector<bool> masked(ni + nodes_.size(), false);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    if (const auto* merge = dynamic_cast<const MergeLayer*>(node.layer.get())) {
      bool any = false, all = true;
      for (int v : node.inputs) {
        any = any || masked[static_cast<std::size_t>(v)];
        all = all && masked[static_cast<std::size_t>(v)];
      }
      masked[ni + i] = merge->keeps_masks() && (dynamic_cast<const Concatenate*>(merge) != nullptr ? any : all);
    } else if (const auto* reader = dynamic_cast<const MaskedLayer*>(node.layer.get())) {
      masked[ni + i] = reader->output_masked(masked[static_cast<std::size_t>(node.inputs[0])]);
    } else {
      masked[ni + i] = passes_mask(*node.layer) && masked[static_cast<std::size_t>(node.inputs[0])];
    }
  }
  return masked[static_cast<std::size_t>(outputs_[0])];
}

Tensor LayerGraph::output_mask() const {
  if (outputs_.size() != 1 || masks_.empty()) return Tensor();
  return masks_[static_cast<std::size_t>(outputs_[0])];
}

Tensor LayerGraph::merged_mask(const Node& node, const std::vector<Tensor>& inputs) const {
  std::vector<Tensor> masks;
  std::size_t present = 0;
  for (int v : node.inputs) {
    masks.push_back(masks_[static_cast<std::size_t>(v)]);
    if (masks.back().defined()) ++present;
  }
  const auto* concatenate = dynamic_cast<const Concatenate*>(node.layer.get());
  const auto* merge = static_cast<const MergeLayer*>(node.layer.get());
  // Keras's Multiply, Maximum and Minimum read masks (masked steps multiply as 1 or take the other
  // input's value, the output is zeroed outside the merged mask); the merges here do not.
  MDTRAIN_CHECK(present == 0 || !merge->reads_masks(), std::invalid_argument, "[functional] layer \"",
                node.layer->name(), "\" (", node.layer->class_name(),
                ") receives masks, which Keras's merge reads at masked steps; mdtrain does not yet");
  if (present == 0 || !merge->keeps_masks() || (concatenate == nullptr && present < masks.size())) return Tensor();
  const MaskJoin join = concatenate != nullptr ? concatenate_join(*concatenate) : MaskJoin::Or;
  MDTRAIN_CHECK(join != MaskJoin::Unsupported, std::invalid_argument, "[functional] layer \"", node.layer->name(),
                "\" concatenates inputs that carry masks along axis ", concatenate->axis(),
                "; mdtrain joins masks along the time or the last axis only");
  const std::int64_t batch = inputs[0].dim(0);
  // Each input's mask as (batch, its timesteps); an unmasked input's is all ones.
  std::vector<std::vector<std::uint8_t>> bytes;
  std::vector<std::int64_t> steps;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const std::int64_t t = inputs[k].dim(1);
    steps.push_back(t);
    if (masks[k].defined()) {
      check_mask_shape(masks[k], batch, t, "functional", node.layer->name());
      bytes.push_back(mask_to_bytes(masks[k]));
    } else {
      bytes.emplace_back(static_cast<std::size_t>(batch * t), std::uint8_t{1});
    }
  }
  const Tensor& first = masks[0].defined()
                            ? masks[0]
                            : *std::find_if(masks.begin(), masks.end(), [](const Tensor& m) { return m.defined(); });
  std::int64_t out_steps = steps[0];
  if (join == MaskJoin::Time) {
    out_steps = 0;
    for (std::int64_t t : steps) out_steps += t;
  }
  Tensor out({batch, out_steps}, first.dtype(), first.device());
  dispatch_floating(out.dtype(), "functional", [&](auto tag) {
    using T = decltype(tag);
    T* m = out.template data<T>();
    for (std::int64_t b = 0; b < batch; ++b) {
      if (join == MaskJoin::Time) {
        std::int64_t at = 0;
        for (std::size_t k = 0; k < bytes.size(); ++k)
          for (std::int64_t t = 0; t < steps[k]; ++t, ++at)
            m[b * out_steps + at] = bytes[k][static_cast<std::size_t>(b * steps[k] + t)] ? T(1) : T(0);
      } else {
        for (std::int64_t t = 0; t < out_steps; ++t) {
          bool keep = false;
          for (const auto& k : bytes) keep = keep || k[static_cast<std::size_t>(b * out_steps + t)] != 0;
          m[b * out_steps + t] = keep ? T(1) : T(0);
        }
      }
    }
  });
  return out;
}

std::vector<std::vector<int>> LayerGraph::layer_readers() const {
  require_unshared("splitting the model by its layers");
  const int inputs = num_inputs();
  std::vector<std::vector<int>> readers(nodes_.size());
  for (std::size_t j = 0; j < nodes_.size(); ++j)
    for (int v : nodes_[j].inputs)
      if (v >= inputs) readers[static_cast<std::size_t>(v - inputs)].push_back(static_cast<int>(j));
  for (int v : outputs_)
    if (v >= inputs) readers[static_cast<std::size_t>(v - inputs)].push_back(kOutput);
  return readers;
}

std::vector<std::vector<int>> LayerGraph::layer_inputs() const {
  require_unshared("splitting the model by its layers");
  const int inputs = num_inputs();
  std::vector<std::vector<int>> out(nodes_.size());
  for (std::size_t j = 0; j < nodes_.size(); ++j)
    for (int v : nodes_[j].inputs) out[j].push_back(v >= inputs ? v - inputs : kNetworkInput - v);
  return out;
}

std::vector<int> LayerGraph::cut_points() const {
  require_unshared("splitting the model by its layers");
  // last_read[v]: the last node reading value v (nodes_.size() when an output returns it).
  const int inputs = num_inputs();
  const int n = static_cast<int>(nodes_.size());
  std::vector<int> last_read(static_cast<std::size_t>(inputs + n), -1);
  for (int j = 0; j < n; ++j)
    for (int v : nodes_[static_cast<std::size_t>(j)].inputs) last_read[static_cast<std::size_t>(v)] = j;
  for (int v : outputs_) last_read[static_cast<std::size_t>(v)] = n;
  // Sweeping p up: crossing counts the values defined before p that a node from p on (or an
  // output) reads; the cut is clean when that is node p - 1's value alone.
  std::vector<int> cuts;
  int furthest = -1;  // the furthest reader of any value defined before node p - 1
  for (int v = 0; v < inputs; ++v) furthest = std::max(furthest, last_read[static_cast<std::size_t>(v)]);
  for (int p = 1; p < n; ++p) {
    if (furthest < p) cuts.push_back(p);
    furthest = std::max(furthest, last_read[static_cast<std::size_t>(inputs + p - 1)]);
  }
  return cuts;
}

std::unique_ptr<Network> LayerGraph::with_layers(std::vector<std::shared_ptr<Layer>> layers) const {
  check_built();
  require_unshared("splitting the model by its layers");
  MDTRAIN_CHECK(layers.size() == nodes_.size(), std::invalid_argument, "[functional] with_layers got ", layers.size(),
                " layers for a graph of ", nodes_.size(), " nodes");
  auto graph = std::make_unique<LayerGraph>(input_shapes_);
  for (std::size_t i = 0; i < nodes_.size(); ++i) graph->add_node(std::move(layers[i]), nodes_[i].inputs);
  graph->set_outputs(outputs_);
  graph->build(0, dtype_);
  return graph;
}

std::unique_ptr<LayerGraph> LayerGraph::clone_to(const Device& device) const {
  check_device_support(device);
  if (!device.is_cpu()) {
    // Packing several inputs or outputs and summing gradients run on the host only for now.
    bool host_only = input_shapes_.size() > 1 || outputs_.size() > 1;
    for (int r : readers_) host_only = host_only || r > 1;
    MDTRAIN_CHECK(!host_only, std::invalid_argument,
                  "[functional] a model with several inputs or outputs, or a value read by several layers, has "
                  "no CUDA path yet; train it on CPU devices, not ",
                  device.to_string());
  }
  auto copy = std::make_unique<LayerGraph>(input_shapes_);
  copy->device_ = device;
  for (const auto& node : nodes_) {
    if (node.shares < 0) {
      copy->add_node(std::shared_ptr<Layer>(node.layer->clone()), node.inputs);
    } else {  // a later call of a layer the copy has: the call's own clone replaces it below
      copy->add_node(copy->nodes_[static_cast<std::size_t>(node.shares)].layer, node.inputs);
      copy->nodes_.back().layer = std::shared_ptr<Layer>(node.layer->clone());
    }
  }
  copy->set_outputs(outputs_);
  copy->built_ = built_;
  copy->dtype_ = dtype_;
  if (built_) copy->pack_parameters();
  return copy;
}

}  // namespace mdtrain
