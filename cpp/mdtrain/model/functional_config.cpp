#include "mdtrain/model/functional_config.h"

#include <map>

#include "mdtrain/nn/layer_factory.h"

namespace mdtrain {

namespace {

Json shape_json(const Shape& shape) {
  Json s = Json::array();
  s.push_back(Json());
  for (auto d : shape) s.push_back(d == kUnknownDim ? Json() : Json(d));  // null: Keras's None
  return s;
}

// A value of the graph as Keras names it: the layer that made it and which of its calls.
struct ValueName {
  std::string layer;
  std::int64_t call = 0;
};

Json history(const ValueName& value) {
  Json h = Json::array();
  h.push_back(value.layer);
  h.push_back(Json(value.call));
  h.push_back(Json(0));
  return h;
}

Json keras_tensor(const ValueName& value, const Shape& shape, DType dtype) {
  Json c = Json::object();
  c.set("shape", shape_json(shape));
  c.set("dtype", name_of(dtype));
  c.set("keras_history", history(value));
  Json t = Json::object();
  t.set("class_name", "__keras_tensor__");
  t.set("config", c);
  return t;
}

// The values a call (one of a layer's inbound nodes) reads: its first argument, one keras tensor
// or a list of them.
std::vector<ValueName> call_inputs(const Json& node) {
  std::vector<ValueName> names;
  // Keras 3 writes {"args": [...], "kwargs": {}}; Keras 2 wrote [[name, 0, 0, {}], ...].
  auto add_tensor = [&](const Json& t) {
    const Json& h = t.is_object() ? t.at("config").at("keras_history") : t;
    const auto& items = h.as_array();
    names.push_back({items.at(0).as_string(), items.size() > 1 ? items[1].as_int() : 0});
  };
  if (node.is_object()) {
    const Json& first = node.at("args").as_array().at(0);
    if (first.is_array()) {
      for (const auto& t : first.as_array()) add_tensor(t);
    } else {
      add_tensor(first);
    }
  } else {
    for (const auto& t : node.as_array()) add_tensor(t);
  }
  return names;
}

// The values of "input_layers"/"output_layers": [[name, call, 0], ...], or one flat [name, call, 0]
// (Keras writes the flat form for a single input or output).
std::vector<ValueName> history_names(const Json& list) {
  std::vector<ValueName> names;
  const auto& items = list.as_array();
  auto add = [&](const Json& h) {
    const auto& a = h.as_array();
    names.push_back({a.at(0).as_string(), a.size() > 1 ? a[1].as_int() : 0});
  };
  if (!items.empty() && items[0].is_string()) {
    add(list);
    return names;
  }
  for (const auto& h : items) add(h);
  return names;
}

std::string value_key(const ValueName& v) { return v.layer + "#" + std::to_string(v.call); }

}  // namespace

Json functional_config(const LayerGraph& graph, const std::vector<std::string>& input_names, const std::string& name,
                       std::uint64_t seed) {
  const DType dtype = graph.dtype();
  std::vector<ValueName> value_names;
  for (const auto& input : input_names) value_names.push_back({input, 0});
  Json layers = Json::array();
  Json input_layers = Json::array();
  for (int k = 0; k < graph.num_inputs(); ++k) {
    const std::string& input = input_names[static_cast<std::size_t>(k)];
    Json c = Json::object();
    c.set("batch_shape", shape_json(graph.input_shapes()[static_cast<std::size_t>(k)]));
    c.set("dtype", name_of(dtype));
    c.set("sparse", false);
    c.set("name", input);
    Json spec = Json::object();
    spec.set("class_name", "InputLayer");
    spec.set("config", c);
    spec.set("name", input);
    spec.set("inbound_nodes", Json::array());
    layers.push_back(spec);
    input_layers.push_back(history({input, 0}));
  }
  // A layer called at several places is one entry with one inbound node per call (Keras's form).
  std::vector<Json> specs;
  std::vector<std::size_t> spec_of_node;
  std::vector<std::int64_t> calls;
  const auto& nodes = graph.nodes();
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto& node = nodes[i];
    const Layer& layer = *graph.node_layer(i);
    Json args = Json::array();
    std::vector<Json> tensors;
    for (int v : node.inputs)
      tensors.push_back(keras_tensor(value_names[static_cast<std::size_t>(v)], graph.value_shape(v), dtype));
    if (tensors.size() == 1) {
      args.push_back(tensors[0]);
    } else {
      Json list = Json::array();
      for (auto& t : tensors) list.push_back(t);
      args.push_back(list);
    }
    Json call = Json::object();
    call.set("args", args);
    call.set("kwargs", Json::object());
    if (node.shares < 0) {
      Json spec = layer_to_config(layer);
      spec.set("name", layer.name());
      spec.set("inbound_nodes", Json::array());
      spec_of_node.push_back(specs.size());
      specs.push_back(spec);
      calls.push_back(0);
    } else {
      spec_of_node.push_back(spec_of_node[static_cast<std::size_t>(node.shares)]);
    }
    const std::size_t at = spec_of_node.back();
    Json inbound = specs[at].at("inbound_nodes");
    inbound.push_back(call);
    specs[at].set("inbound_nodes", inbound);
    value_names.push_back({layer.name(), calls[at]++});
  }
  for (auto& spec : specs) layers.push_back(spec);
  Json output_layers = Json::array();
  for (int v : graph.outputs()) output_layers.push_back(history(value_names[static_cast<std::size_t>(v)]));
  Json c = Json::object();
  c.set("name", name);
  c.set("seed", static_cast<double>(seed));
  c.set("trainable", true);
  c.set("layers", layers);
  c.set("input_layers", input_layers);
  c.set("output_layers", output_layers);
  Json j = Json::object();
  j.set("class_name", "Functional");
  j.set("config", c);
  return j;
}

std::unique_ptr<LayerGraph> graph_from_config(const Json& config, std::vector<std::string>* input_names) {
  std::map<std::string, int> value_of;  // value_key -> value number
  std::vector<Shape> input_shapes;
  std::vector<std::string> inputs;
  for (const auto& spec : config.at("layers").as_array()) {
    if (spec.at("class_name").as_string() != "InputLayer") continue;
    const Json& c = spec.at("config");
    const Json shape = c.get("batch_shape", c.get("batch_input_shape", Json()));
    MDTRAIN_CHECK(shape.is_array() && !shape.as_array().empty(), std::invalid_argument, "[functional] InputLayer \"",
                  c.at("name").as_string(), "\" has no batch_shape");
    Shape s;
    for (std::size_t d = 1; d < shape.as_array().size(); ++d)
      s.push_back(shape.as_array()[d].is_null() ? kUnknownDim : shape.as_array()[d].as_int());
    inputs.push_back(c.at("name").as_string());
    input_shapes.push_back(s);
  }
  // The graph's inputs are numbered in input_layers order.
  std::vector<std::string> ordered;
  std::vector<Shape> ordered_shapes;
  for (const auto& value : history_names(config.at("input_layers"))) {
    std::size_t k = 0;
    while (k < inputs.size() && inputs[k] != value.layer) ++k;
    MDTRAIN_CHECK(k < inputs.size(), std::invalid_argument, "[functional] input \"", value.layer,
                  "\" is not an InputLayer of the model");
    value_of[value_key(value)] = static_cast<int>(ordered.size());
    ordered.push_back(value.layer);
    ordered_shapes.push_back(input_shapes[k]);
  }
  auto graph = std::make_unique<LayerGraph>(ordered_shapes);
  // Every call of every layer, added once the values it reads exist: in list order, except that a
  // shared layer's later call may read layers listed after it (Keras runs such nodes when ready).
  struct Call {
    std::shared_ptr<Layer> layer;
    std::int64_t index;
    std::vector<ValueName> inputs;
  };
  std::vector<Call> pending;
  for (const auto& spec : config.at("layers").as_array()) {
    if (spec.at("class_name").as_string() == "InputLayer") continue;
    std::shared_ptr<Layer> layer(layer_from_config(spec));
    const Json nodes = spec.get("inbound_nodes", Json::array());
    std::int64_t index = 0;
    for (const auto& node : nodes.as_array()) pending.push_back({layer, index++, call_inputs(node)});
    MDTRAIN_CHECK(index > 0, std::invalid_argument, "[functional] layer \"", layer->name(),
                  "\" is not called in the model (no inbound nodes)");
  }
  while (!pending.empty()) {
    bool progress = false;
    for (auto it = pending.begin(); it != pending.end();) {
      const bool ready = it->index == 0 || value_of.count(value_key({it->layer->name(), it->index - 1})) > 0;
      bool have = ready;
      for (const auto& v : it->inputs) have = have && value_of.count(value_key(v)) > 0;
      if (!have) {
        ++it;
        continue;
      }
      std::vector<int> in;
      for (const auto& v : it->inputs) in.push_back(value_of[value_key(v)]);
      value_of[value_key({it->layer->name(), it->index})] = graph->add_node(it->layer, in);
      it = pending.erase(it);
      progress = true;
    }
    if (!progress) {
      const Call& stuck = pending.front();
      std::string missing;
      for (const auto& v : stuck.inputs)
        if (value_of.count(value_key(v)) == 0) missing = v.layer;
      fail<std::invalid_argument>("[functional] layer \"", stuck.layer->name(), "\" reads \"", missing,
                                  "\", which no layer of the model defines");
    }
  }
  std::vector<int> outputs;
  for (const auto& value : history_names(config.at("output_layers"))) {
    auto it = value_of.find(value_key(value));
    MDTRAIN_CHECK(it != value_of.end(), std::invalid_argument, "[functional] output \"", value.layer,
                  "\" is not a layer of the model");
    outputs.push_back(it->second);
  }
  graph->set_outputs(outputs);
  if (input_names) *input_names = ordered;
  return graph;
}

}  // namespace mdtrain
