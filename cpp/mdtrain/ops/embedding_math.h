#pragma once
// Per-element math of the embedding ops (ops/embedding.h), shared by the CPU loops
// (ops/cpu/embedding_kernels.cpp) and the CUDA kernels (ops/cuda/embedding_kernels.cu).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "mdtrain/core/hd.h"

namespace mdtrain::math {

// What embedding_row returns for a value that names no row.
constexpr std::int64_t kIndexNotIntegral = -1;  // a float that is not a whole number (NaN included)
constexpr std::int64_t kIndexOutOfRange = -2;   // a whole number outside [0, rows)

// The table row an index value names (Keras casts the indices to int32; mdtrain refuses instead of
// truncating a float that is not a whole number), or one of the codes above. Floats are compared
// in double before any conversion: an infinite or huge value never reaches an integer cast.
template <class T>
MDTRAIN_HD std::int64_t embedding_row(T value, std::int64_t rows) {
  if constexpr (std::is_floating_point<T>::value) {
    if (!(std::floor(value) == value)) return kIndexNotIntegral;
    const double v = static_cast<double>(value);
    if (v < 0.0 || v >= static_cast<double>(rows)) return kIndexOutOfRange;
    return static_cast<std::int64_t>(v);
  } else {
    if (value < T(0) || static_cast<std::int64_t>(value) >= rows) return kIndexOutOfRange;
    return static_cast<std::int64_t>(value);
  }
}

// A table split by rows over shards (tensor parallelism): the row of this shard's table (rows
// [first, first + held) of the whole) that whole-table row `row` is, or -1 when another shard
// holds it.
MDTRAIN_HD std::int64_t shard_row(std::int64_t row, std::int64_t first, std::int64_t held) {
  return row >= first && row < first + held ? row - first : -1;
}

}  // namespace mdtrain::math
