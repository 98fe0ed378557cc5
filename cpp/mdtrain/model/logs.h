#pragma once
#include <string>
#include <utility>
#include <vector>

namespace mdtrain {

// Keras's `logs`: ordered (name, value) pairs, "loss" first, then the metrics in compile order.
using Logs = std::vector<std::pair<std::string, double>>;

}  // namespace mdtrain
