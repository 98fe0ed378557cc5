#include "mdtrain/nn/graph_segment.h"

#include <algorithm>

#include "mdtrain/core/errors.h"
#include "mdtrain/nn/merge_layer.h"
#include "mdtrain/nn/value_gradient.h"

namespace mdtrain {

GraphSegment::GraphSegment(std::string name, std::vector<Node> nodes)
    : Layer(std::move(name)), nodes_(std::move(nodes)) {
  MDTRAIN_CHECK(!nodes_.empty(), std::invalid_argument, "[segment] segment \"", name_, "\" has no layers");
  readers_.assign(nodes_.size() + 1, 0);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    MDTRAIN_CHECK(node.layer != nullptr, std::invalid_argument, "[segment] segment \"", name_, "\" has a null layer");
    const bool merge = dynamic_cast<const MergeLayer*>(node.layer.get()) != nullptr;
    MDTRAIN_CHECK(merge ? node.inputs.size() >= 2 : node.inputs.size() == 1, std::invalid_argument,
                  "[segment] layer \"", node.layer->name(), "\" (", node.layer->class_name(), ") ",
                  merge ? "reads at least 2 values" : "reads exactly one value", ", got ", node.inputs.size());
    for (int v : node.inputs) {
      MDTRAIN_CHECK(v >= 0 && v <= static_cast<int>(i), std::invalid_argument, "[segment] layer \"", node.layer->name(),
                    "\" reads value ", v, ", which is not defined before it (values 0..", i, ")");
      ++readers_[static_cast<std::size_t>(v)];
    }
    layers_.push_back(node.layer);
  }
  ++readers_.back();  // the output
  for (std::size_t v = 0; v < nodes_.size(); ++v)
    MDTRAIN_CHECK(readers_[v] > 0, std::invalid_argument, "[segment] ",
                  v == 0 ? std::string("the input") : "the output of layer \"" + nodes_[v - 1].layer->name() + "\"",
                  " is read by no layer of segment \"", name_, "\"");
  const bool all_built =
      std::all_of(layers_.begin(), layers_.end(), [](const std::shared_ptr<Layer>& l) { return l->built(); });
  if (!all_built) return;
  // Built around built layers: the input shape is what a reader of value 0 was built for.
  for (const Node& node : nodes_) {
    const auto at = std::find(node.inputs.begin(), node.inputs.end(), 0);
    if (at == node.inputs.end()) continue;
    const auto* merge = dynamic_cast<const MergeLayer*>(node.layer.get());
    input_shape_ = merge != nullptr ? merge->input_shapes()[static_cast<std::size_t>(at - node.inputs.begin())]
                                    : node.layer->input_shape();
    break;
  }
  output_shape_ = layers_.back()->output_shape();
  dtype_ = layers_.front()->dtype();
  built_ = true;
}

Shape GraphSegment::compute_output_shape(const Shape& input_shape) const {
  std::vector<Shape> shapes{input_shape};
  for (const Node& node : nodes_) {
    if (const auto* merge = dynamic_cast<const MergeLayer*>(node.layer.get())) {
      std::vector<Shape> in;
      for (int v : node.inputs) in.push_back(shapes[static_cast<std::size_t>(v)]);
      shapes.push_back(merge->merged_shape(in));
    } else {
      shapes.push_back(node.layer->compute_output_shape(shapes[static_cast<std::size_t>(node.inputs[0])]));
    }
  }
  return shapes.back();
}

void GraphSegment::build_weights(const Shape& input_shape, std::uint64_t seed) {
  std::vector<Shape> shapes{input_shape};
  std::size_t weighted = 0;  // layers with weights so far: the seeds' index (layer_seed)
  for (Node& node : nodes_) {
    if (auto* merge = dynamic_cast<MergeLayer*>(node.layer.get())) {
      std::vector<Shape> in;
      for (int v : node.inputs) in.push_back(shapes[static_cast<std::size_t>(v)]);
      merge->build_inputs(in, dtype_);
    } else {
      node.layer->build(shapes[static_cast<std::size_t>(node.inputs[0])], layer_seed(seed, weighted), dtype_);
    }
    if (!node.layer->parameters().empty()) ++weighted;
    shapes.push_back(node.layer->output_shape());
  }
}

Tensor GraphSegment::forward(const Tensor& x, const ForwardContext& ctx) {
  MDTRAIN_CHECK(built_, std::logic_error, "[segment] segment \"", name_, "\" was called before it was built");
  values_.assign(nodes_.size() + 1, Tensor());
  values_[0] = x;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    if (auto* merge = dynamic_cast<MergeLayer*>(node.layer.get())) {
      std::vector<Tensor> in;
      for (int v : node.inputs) in.push_back(values_[static_cast<std::size_t>(v)]);
      values_[i + 1] = merge->forward_inputs(in);
    } else {
      values_[i + 1] = node.layer->forward(values_[static_cast<std::size_t>(node.inputs[0])], ctx);
    }
  }
  return values_.back();
}

bool GraphSegment::node_needs_input_grad(std::size_t i, bool need_input_grad) const {
  if (need_input_grad) return true;
  for (int v : nodes_[i].inputs)
    if (v != 0) return true;
  return false;
}

void GraphSegment::accumulate(int value, const Tensor& g, bool need_input_grad) {
  if (value == 0 && !need_input_grad) return;
  const auto v = static_cast<std::size_t>(value);
  accumulators_.resize(readers_.size());
  accumulate_value_gradient(grads_[v], accumulators_[v], g, readers_[v]);
}

Tensor GraphSegment::run_backward(const Tensor* dy, const Tensor* dlogits, bool need_input_grad) {
  for (const auto& layer : layers_) layer->set_accumulate_gradients(accumulate_gradients_);
  grads_.assign(nodes_.size() + 1, Tensor());
  if (dy != nullptr) grads_.back() = *dy;
  for (std::size_t i = nodes_.size(); i-- > 0;) {
    const Node& node = nodes_[i];
    const bool need = node_needs_input_grad(i, need_input_grad);
    if (dlogits != nullptr && i + 1 == nodes_.size()) {
      Tensor dx = node.layer->backward_from_logits(*dlogits, need);
      if (need) accumulate(node.inputs[0], dx, need_input_grad);
    } else if (auto* merge = dynamic_cast<MergeLayer*>(node.layer.get())) {
      std::vector<Tensor> dx = merge->backward_inputs(grads_[i + 1]);
      for (std::size_t k = 0; k < dx.size(); ++k) accumulate(node.inputs[k], dx[k], need_input_grad);
    } else {
      Tensor dx = node.layer->backward(grads_[i + 1], need);
      if (need) accumulate(node.inputs[0], dx, need_input_grad);
    }
  }
  return need_input_grad ? grads_[0] : Tensor();
}

Tensor GraphSegment::backward(const Tensor& dy, bool need_input_grad) {
  return run_backward(&dy, nullptr, need_input_grad);
}

Tensor GraphSegment::backward_from_logits(const Tensor& dlogits, bool need_input_grad) {
  MDTRAIN_CHECK(output_activation() != Activation::Linear, std::logic_error, "[segment] segment \"", name_,
                "\" has no logits");
  return run_backward(nullptr, &dlogits, need_input_grad);
}

bool GraphSegment::supports_gradient_accumulation() const {
  for (const auto& layer : layers_) {
    if (layer->supports_gradient_accumulation()) continue;
    for (const Parameter* p : layer->parameters())
      if (p->trainable) return false;
  }
  return true;
}

void GraphSegment::forward_without_rows(const ForwardContext& ctx) {
  for (const auto& layer : layers_) layer->forward_without_rows(ctx);
}

void GraphSegment::backward_without_rows(bool need_input_grad) {
  for (std::size_t i = nodes_.size(); i-- > 0;)
    layers_[i]->backward_without_rows(node_needs_input_grad(i, need_input_grad));
}

void GraphSegment::apply_deferred_statistics(CrossReplicaContext* replicas) {
  for (const auto& layer : layers_) layer->apply_deferred_statistics(replicas);
}

void GraphSegment::move_deferred_statistics_to(Layer& to) {
  auto* other = dynamic_cast<GraphSegment*>(&to);
  MDTRAIN_CHECK(other != nullptr && other->layers_.size() == layers_.size(), std::logic_error, "[segment] segment \"",
                name_, "\" can move its statistics only to a clone of itself, not to \"", to.name(), "\"");
  for (std::size_t j = 0; j < layers_.size(); ++j) layers_[j]->move_deferred_statistics_to(*other->layers_[j]);
}

Activation GraphSegment::output_activation() const { return layers_.back()->output_activation(); }

Tensor GraphSegment::logits() const { return layers_.back()->logits(); }

std::unique_ptr<Layer> GraphSegment::clone() const {
  std::vector<Node> nodes;
  for (const Node& node : nodes_) nodes.push_back({std::shared_ptr<Layer>(node.layer->clone()), node.inputs});
  auto copy = std::make_unique<GraphSegment>(name_, std::move(nodes));
  copy->copy_build_state(*this);
  return copy;
}

std::int64_t GraphSegment::held_activation_bytes() const {
  std::int64_t sum = 0;
  for (const auto& layer : layers_) sum += layer->held_activation_bytes();
  for (const Tensor& t : accumulators_)
    if (t.defined()) sum += static_cast<std::int64_t>(t.nbytes());
  return sum;
}

bool GraphSegment::has_cuda_kernels() const {
  return std::all_of(layers_.begin(), layers_.end(),
                     [](const std::shared_ptr<Layer>& l) { return l->has_cuda_kernels(); });
}

LayerList inner_layers(const LayerList& units) {
  LayerList out;
  for (const auto& unit : units) {
    if (const auto* segment = dynamic_cast<const GraphSegment*>(unit.get()))
      out.insert(out.end(), segment->layers().begin(), segment->layers().end());
    else out.push_back(unit);
  }
  return out;
}

bool is_cut_point(const Network& network, int position) {
  const std::vector<int> cuts = network.cut_points();
  return std::binary_search(cuts.begin(), cuts.end(), position);
}

std::string cut_error(const Network& network, int position) {
  const auto& layers = network.layers();
  const std::vector<std::vector<int>> inputs = network.layer_inputs();
  const std::vector<std::vector<int>> readers = network.layer_readers();
  const std::string here = "layer \"" + layers[static_cast<std::size_t>(position)]->name() + "\"";
  // A value defined before layer position - 1 (or a network input) read from position on, or an
  // output of the model before the cut.
  for (std::size_t j = static_cast<std::size_t>(position); j < layers.size(); ++j)
    for (int v : inputs[j])
      if (v < position - 1)
        return here + " is inside a block that cannot be cut: the " +
               (v < 0 ? std::string("model's input")
                      : "output of layer \"" + layers[static_cast<std::size_t>(v)]->name() + "\"") +
               " is read by layer \"" + layers[j]->name() + "\" after it";
  for (int i = 0; i < position; ++i)
    for (int r : readers[static_cast<std::size_t>(i)])
      if (r == Network::kOutput)
        return here + " comes after layer \"" + layers[static_cast<std::size_t>(i)]->name() +
               "\", an output of the model: the model cannot be cut there";
  return here + " is not a cut point of the model";
}

LayerList segment_layers(const Network& network, int first, int last, bool clone) {
  const auto& layers = network.layers();
  const int n = static_cast<int>(layers.size());
  MDTRAIN_CHECK(0 <= first && first < last && last <= n, std::invalid_argument, "[segment] positions [", first, ", ",
                last, ") are not a range of the network's ", n, " layers");
  const std::vector<std::vector<int>> inputs = network.layer_inputs();
  const std::vector<std::vector<int>> readers = network.layer_readers();
  for (int i = 0; i < n; ++i) {
    for (int v : inputs[static_cast<std::size_t>(i)])
      MDTRAIN_CHECK(v >= Network::kNetworkInput, std::invalid_argument, "[segment] layer \"",
                    layers[static_cast<std::size_t>(i)]->name(),
                    "\" reads a second input of the model: a model with several inputs cannot be cut into segments");
    for (int r : readers[static_cast<std::size_t>(i)])
      MDTRAIN_CHECK(r != Network::kOutput || i == n - 1, std::invalid_argument, "[segment] layer \"",
                    layers[static_cast<std::size_t>(i)]->name(),
                    "\" is an output of the model besides the last layer: a model with several outputs cannot be cut "
                    "into segments");
  }
  for (int bound : {first, last})
    MDTRAIN_CHECK(bound == 0 || bound == n || is_cut_point(network, bound), std::invalid_argument, "[segment] ",
                  cut_error(network, bound));
  // The stretches between consecutive cut points inside [first, last).
  std::vector<int> bounds{first};
  for (int c : network.cut_points())
    if (c > first && c < last) bounds.push_back(c);
  bounds.push_back(last);
  LayerList out;
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
    const int a = bounds[s], b = bounds[s + 1];
    auto layer_at = [&](int i) {
      const auto& l = layers[static_cast<std::size_t>(i)];
      return clone ? std::shared_ptr<Layer>(l->clone()) : l;
    };
    if (b - a == 1) {
      out.push_back(layer_at(a));
      continue;
    }
    std::vector<GraphSegment::Node> nodes;
    for (int i = a; i < b; ++i) {
      GraphSegment::Node node{layer_at(i), {}};
      for (int v : inputs[static_cast<std::size_t>(i)]) {
        // Only the previous stretch's last output (the model's input before the first) enters.
        const int local = v >= a ? v - a + 1 : 0;
        MDTRAIN_CHECK(v >= a || v == a - 1, std::logic_error, "[segment] layer \"",
                      layers[static_cast<std::size_t>(i)]->name(), "\" reads a value from before the cut at ", a);
        node.inputs.push_back(local);
      }
      nodes.push_back(std::move(node));
    }
    out.push_back(std::make_shared<GraphSegment>("segment[" + layers[static_cast<std::size_t>(a)]->name() + ".." +
                                                     layers[static_cast<std::size_t>(b - 1)]->name() + "]",
                                                 std::move(nodes)));
  }
  return out;
}

}  // namespace mdtrain
