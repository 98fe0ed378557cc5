#pragma once
// Several per-sample arrays travel packed as one (batch, total) array, each flattened, side by
// side: the inputs and outputs of a LayerGraph, the labels of a MultiOutputLoss. These move one
// of them (its `width` = part.row_size() columns from `offset`) between the packed array and a
// contiguous (batch, ...) tensor of its own. Host memory only (multi-output graphs run on CPU).
#include <cstdint>
#include <cstring>

#include "mdtrain/core/errors.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain {

namespace packed_detail {
inline void move_columns(const Tensor& packed, std::int64_t offset, const Tensor& part, bool to_packed) {
  MDTRAIN_CHECK(packed.dtype() == part.dtype() && packed.ndim() >= 1 && part.ndim() >= 1 &&
                    packed.dim(0) == part.dim(0) && offset >= 0 && offset + part.row_size() <= packed.row_size(),
                std::invalid_argument, "[packed] columns [", offset, ", ", offset + part.row_size(), ") of ",
                to_string(packed.shape()), " do not fit ", to_string(part.shape()));
  MDTRAIN_CHECK(packed.device().is_cpu() && part.device().is_cpu(), std::invalid_argument,
                "[packed] packed arrays are moved on the host only");
  const std::int64_t rows = part.dim(0), width = part.row_size(), total = packed.row_size();
  const auto elem = static_cast<std::int64_t>(size_of(packed.dtype()));
  auto* p = static_cast<char*>(const_cast<void*>(packed.raw()));
  auto* q = static_cast<char*>(const_cast<void*>(part.raw()));
  for (std::int64_t r = 0; r < rows; ++r) {
    char* in_packed = p + (r * total + offset) * elem;
    char* in_part = q + r * width * elem;
    if (to_packed) std::memcpy(in_packed, in_part, static_cast<std::size_t>(width * elem));
    else std::memcpy(in_part, in_packed, static_cast<std::size_t>(width * elem));
  }
}
}  // namespace packed_detail

// part <- packed[:, offset : offset + part.row_size()]
inline void read_columns(const Tensor& packed, std::int64_t offset, Tensor& part) {
  packed_detail::move_columns(packed, offset, part, false);
}
// packed[:, offset : offset + part.row_size()] <- part
inline void write_columns(Tensor& packed, std::int64_t offset, const Tensor& part) {
  packed_detail::move_columns(packed, offset, part, true);
}

}  // namespace mdtrain
