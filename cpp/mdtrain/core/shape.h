#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mdtrain {

using Shape = std::vector<std::int64_t>;

std::int64_t numel(const Shape& shape);
// "(32, 784)", the way NumPy and Keras print shapes; -1 prints as None.
std::string to_string(const Shape& shape);

// A layer's or model's declared shape (the batch axis excluded) may leave dimensions unknown,
// as Keras's None (`keras.Input(shape=(None,))`: sequences of any length): each batch brings its
// own size there. Tensors never have unknown dimensions.
inline constexpr std::int64_t kUnknownDim = -1;
bool has_unknown_dim(const Shape& shape);
// Whether `actual` (a tensor's shape without its batch axis) fits `declared`: the same rank, and
// equal dimensions wherever `declared` knows them.
bool fits_declared(const Shape& declared, const Shape& actual);

}  // namespace mdtrain
