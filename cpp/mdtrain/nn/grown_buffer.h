#pragma once
#include <cstdint>

#include "mdtrain/core/tensor.h"

namespace mdtrain {

// A (rows, cols) view of `buffer` on `device`, which grows to the largest request and is then
// viewed, so an epoch's smaller last batch does not reallocate it (twice). The scratch of the
// convolution layers (columns, activation gradients).
inline Tensor grown_rows(Tensor& buffer, std::int64_t rows, std::int64_t cols, DType dtype, const Device& device) {
  if (!buffer.defined() || buffer.dtype() != dtype || buffer.device() != device || buffer.dim(1) != cols ||
      buffer.dim(0) < rows)
    buffer = Tensor({rows, cols}, dtype, device);
  return buffer.rows(0, rows);
}

}  // namespace mdtrain
