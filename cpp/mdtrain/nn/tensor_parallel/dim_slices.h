#pragma once
// Equal pieces of a tensor along one dimension: piece k of n along `dim` holds indices
// [k * d / n, (k + 1) * d / n) of that dimension (d = the whole size). How a sharded weight is cut
// from its unsharded tensor and put back, and how a split activation (its last dimension cut) is
// cut from or assembled into the whole. Host memory, a GPU, or one of each (a weight scattered from
// the host copy to a GPU shard).
#include "mdtrain/core/tensor.h"

namespace mdtrain {

// part = piece k of n of `whole` along `dim` (part already shaped: whole's shape with that
// dimension divided by n). Throws std::invalid_argument on shapes that do not fit.
void copy_piece_out(const Tensor& whole, int dim, int k, int n, Tensor& part);
// The inverse: writes `part` into piece k of n of `whole` along `dim`.
void copy_piece_in(const Tensor& part, int dim, int k, int n, Tensor& whole);
// `blocks` holds n pieces one after another (an all-gather of pieces shaped like whole's with its
// last dimension divided by n): lays them out as the whole tensor (pieces side by side along the
// last dimension).
void interleave_last_dim(const Tensor& blocks, int n, Tensor& whole);

}  // namespace mdtrain
