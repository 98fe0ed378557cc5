#pragma once
// The ops of an embedding table (keras.layers.Embedding): index values to table rows, rows of the
// table gathered into an output, and the table's gradient scattered back. The table, the output and
// the gradients are float32 or float64 of one dtype; row numbers are int64 tensors. All tensors of a
// call live in one memory, the host (any CPU device) or one GPU, where the op runs (CPU loops over
// the intra-op threads, or the CUDA kernels of ops/cuda/embedding_kernels.h). Per-element math:
// ops/embedding_math.h.
#include <cstdint>

#include "mdtrain/core/tensor.h"

namespace mdtrain::ops {

// The first index value that names no row of a table (see embedding_rows).
struct BadEmbeddingIndex {
  std::int64_t position = -1;  // flat position in the index tensor; -1: every index is good
  double value = 0;            // the value there
  bool integral = true;        // false: a float that is not a whole number
};

// rows[i] = the table row index value x[i] names, for x of any shape holding int32, int64, float32
// or float64 whole numbers and a table of `table_rows` rows; rows is int64 with x's element count.
// Returns the first value (lowest position) that is not a whole number in [0, table_rows), rows
// then holding nothing of use; or position -1 when every value names a row.
BadEmbeddingIndex embedding_rows(const Tensor& x, std::int64_t table_rows, Tensor& rows);

// out[i, :] = table[rows[i], :] for table (table_rows, dim), rows (count,) from embedding_rows,
// out (count, dim).
void embedding_lookup(const Tensor& table, const Tensor& rows, Tensor& out);

// grad = 0, then grad[rows[i], :] += dy[i, :] for i = 0, 1, ..., count - 1 in that order: rows
// named several times add up, and every element's sum is taken in index order (the same bits for
// any thread split). dy (count, dim), grad (table_rows, dim).
void embedding_scatter_add(const Tensor& dy, const Tensor& rows, Tensor& grad);

// For a table split by rows (shard holding rows [first, first + held) of the whole): local[i] =
// math::shard_row(rows[i], first, held), or 0 for rows another shard holds; keep (count, dim),
// float32 or float64, = 1 on the rows of held indices and 0 on the others (a lookup through local
// times keep is this shard's share of the whole lookup). rows and local int64 (count,), all three in
// one memory.
void embedding_shard_rows(const Tensor& rows, std::int64_t first, std::int64_t held, Tensor& local, Tensor& keep);

}  // namespace mdtrain::ops
