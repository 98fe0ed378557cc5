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

Json history(const std::string& layer) {
  Json h = Json::array();
  h.push_back(layer);
  h.push_back(Json(0));
  h.push_back(Json(0));
  return h;
}

Json keras_tensor(const std::string& layer, const Shape& shape, DType dtype) {
  Json c = Json::object();
  c.set("shape", shape_json(shape));
  c.set("dtype", name_of(dtype));
  c.set("keras_history", history(layer));
  Json t = Json::object();
  t.set("class_name", "__keras_tensor__");
  t.set("config", c);
  return t;
}

// The layer names a node's first argument refers to: one keras tensor, or a list of them.
std::vector<std::string> inbound_layers(const Json& layer_spec) {
  std::vector<std::string> names;
  const Json nodes = layer_spec.get("inbound_nodes", Json::array());
  if (nodes.as_array().empty()) return names;
  MDTRAIN_CHECK(nodes.as_array().size() == 1, std::invalid_argument, "[functional] layer \"",
                layer_spec.at("config").at("name").as_string(),
                "\" is called more than once; mdtrain does not share a layer between calls yet");
  const Json& node = nodes.as_array()[0];
  // Keras 3 writes {"args": [...], "kwargs": {}}; Keras 2 wrote [[name, 0, 0, {}], ...].
  auto add_tensor = [&](const Json& t) {
    if (t.is_object()) {
      names.push_back(t.at("config").at("keras_history").as_array()[0].as_string());
    } else {
      names.push_back(t.as_array()[0].as_string());
    }
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

// The layer names of "input_layers"/"output_layers": [[name, 0, 0], ...], or one flat [name, 0, 0]
// (Keras writes the flat form for a single input or output).
std::vector<std::string> history_names(const Json& list) {
  std::vector<std::string> names;
  const auto& items = list.as_array();
  if (!items.empty() && items[0].is_string()) {
    names.push_back(items[0].as_string());
    return names;
  }
  for (const auto& h : items) names.push_back(h.as_array().at(0).as_string());
  return names;
}

}  // namespace

Json functional_config(const LayerGraph& graph, const std::vector<std::string>& input_names, const std::string& name,
                       std::uint64_t seed) {
  const DType dtype = graph.dtype();
  std::vector<std::string> value_names = input_names;
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
    input_layers.push_back(history(input));
  }
  for (const auto& node : graph.nodes()) {
    Json spec = layer_to_config(*node.layer);
    spec.set("name", node.layer->name());
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
    Json inbound = Json::array();
    inbound.push_back(call);
    spec.set("inbound_nodes", inbound);
    layers.push_back(spec);
    value_names.push_back(node.layer->name());
  }
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
  std::map<std::string, int> value_of;
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
  for (const auto& name : history_names(config.at("input_layers"))) {
    std::size_t k = 0;
    while (k < inputs.size() && inputs[k] != name) ++k;
    MDTRAIN_CHECK(k < inputs.size(), std::invalid_argument, "[functional] input \"", name,
                  "\" is not an InputLayer of the model");
    value_of[name] = static_cast<int>(ordered.size());
    ordered.push_back(name);
    ordered_shapes.push_back(input_shapes[k]);
  }
  auto graph = std::make_unique<LayerGraph>(ordered_shapes);
  for (const auto& spec : config.at("layers").as_array()) {
    if (spec.at("class_name").as_string() == "InputLayer") continue;
    std::shared_ptr<Layer> layer(layer_from_config(spec));
    std::vector<int> in;
    for (const auto& name : inbound_layers(spec)) {
      auto it = value_of.find(name);
      MDTRAIN_CHECK(it != value_of.end(), std::invalid_argument, "[functional] layer \"", layer->name(), "\" reads \"",
                    name, "\", which is not defined before it");
      in.push_back(it->second);
    }
    const std::string name = layer->name();
    value_of[name] = graph->add_node(std::move(layer), in);
  }
  std::vector<int> outputs;
  for (const auto& name : history_names(config.at("output_layers"))) {
    auto it = value_of.find(name);
    MDTRAIN_CHECK(it != value_of.end(), std::invalid_argument, "[functional] output \"", name,
                  "\" is not a layer of the model");
    outputs.push_back(it->second);
  }
  graph->set_outputs(outputs);
  if (input_names) *input_names = ordered;
  return graph;
}

}  // namespace mdtrain
