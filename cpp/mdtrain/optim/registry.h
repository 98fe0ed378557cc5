#pragma once
// Optimizers by name or config, as keras.optimizers.get / deserialize.
#include <memory>
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/optim/optimizer.h"

namespace mdtrain {

// The names make_optimizer accepts (lower case): "adagrad", "adam", "adamw", "rmsprop", "sgd".
std::vector<std::string> known_optimizers();

// A new optimizer with Keras's defaults; the name is matched case-insensitively ("Adam", "SGD").
// Unknown names throw std::invalid_argument("[optim] ...") listing the known ones.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name);
inline std::unique_ptr<Optimizer> make_optimizer(const char* name) { return make_optimizer(std::string(name)); }

// Accepts:
//   - a string: as make_optimizer(name);
//   - Keras's serialised form {"class_name": "Adam", "config": {...}} (module and
//     registered_name are ignored);
//   - a bare get_config() dictionary, whose "name" picks the class ({"name": "adam", ...}).
// Unknown keys or unsupported values throw std::invalid_argument.
std::unique_ptr<Optimizer> make_optimizer(const Json& config);

// {"module": "keras.optimizers", "class_name": ..., "config": optimizer.config(),
//  "registered_name": null}; make_optimizer() reads it back.
Json serialize_optimizer(const Optimizer& optimizer);

}  // namespace mdtrain
