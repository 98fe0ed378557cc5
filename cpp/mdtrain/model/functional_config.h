#pragma once
// A functional model's architecture as Keras 3 writes it ("class_name": "Functional", with
// "layers" each holding its "inbound_nodes", "input_layers" and "output_layers"), so that model
// files and .keras archives describe a LayerGraph the way Keras reads it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/nn/layer_graph.h"

namespace mdtrain {

// {"class_name": "Functional", "config": {"name", "seed", "trainable", "layers", "input_layers",
// "output_layers"}}; inputs appear as InputLayer entries named `input_names`.
Json functional_config(const LayerGraph& graph, const std::vector<std::string>& input_names, const std::string& name,
                       std::uint64_t seed);

// The (unbuilt) graph a Functional config describes, and its input names. Layers come from
// layer_from_config; nodes are taken in the order of "layers" (Keras writes them topologically).
// Throws std::invalid_argument("[functional] ...") naming what does not fit: an unknown layer in an
// inbound node, a layer called several times, an output that is not a layer's.
std::unique_ptr<LayerGraph> graph_from_config(const Json& config, std::vector<std::string>* input_names);

}  // namespace mdtrain
