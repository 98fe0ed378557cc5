#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mdtrain {

using Shape = std::vector<std::int64_t>;

std::int64_t numel(const Shape& shape);
// "(32, 784)", the way NumPy and Keras print shapes; -1 prints as None.
std::string to_string(const Shape& shape);

}  // namespace mdtrain
