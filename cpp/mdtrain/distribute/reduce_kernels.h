#pragma once
// Element-wise reduction of several ranks' buffers in a fixed order, for host backends.
//
// out[i] = ((in[0][i] op in[1][i]) op in[2][i]) ... op in[n-1][i], then / n for Mean: always in
// rank order, so the result depends only on the inputs, never on which rank arrived first.
#include <cstddef>

#include "mdtrain/core/dtype.h"
#include "mdtrain/distribute/communicator.h"

namespace mdtrain::detail {

// Reads elements [offset, offset + count) of each inputs[r] (r < n_inputs) and writes the
// reduction to outputs[k][0, count) for every k < n_outputs. An output may alias inputs[r] +
// offset: each tile is read from every input before it is written.
void reduce_in_rank_order(void* const* outputs, int n_outputs, const void* const* inputs, int n_inputs,
                          std::size_t offset, std::size_t count, DType dtype, ReduceOp op);

}  // namespace mdtrain::detail
