#pragma once
#include <memory>
#include <string>

#include "mdtrain/core/json.h"
#include "mdtrain/nn/layer.h"

namespace mdtrain {

// Rebuilds a layer from {"class_name": "Dense", "config": {...}} as written by a model file.
// Unknown class names → std::invalid_argument listing the known ones.
std::unique_ptr<Layer> layer_from_config(const Json& spec);
// {"class_name": layer.class_name(), "config": layer.config()}.
Json layer_to_config(const Layer& layer);

}  // namespace mdtrain
