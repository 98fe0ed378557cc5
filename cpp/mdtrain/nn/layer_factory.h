#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/nn/layer.h"

namespace mdtrain {

// The one way to make a layer from its description, for model files and for Python alike:
// {"class_name": "Dense", "config": {...}} → the class's from_config(config) (the Keras config:
// missing fields take Keras's defaults, unknown ones are ignored). Unknown class names →
// std::invalid_argument listing the known ones.
std::unique_ptr<Layer> layer_from_config(const Json& spec);
// The class names layer_from_config knows, in registration order.
std::vector<std::string> layer_class_names();
// {"class_name": layer.class_name(), "config": layer.config()}.
Json layer_to_config(const Layer& layer);

}  // namespace mdtrain
