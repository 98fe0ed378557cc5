#pragma once
// CPU loops behind ops/embedding.h. Arguments are already validated; T is float or double, I any
// index element type (int32, int64, float, double).
#include <cstdint>

namespace mdtrain::cpu {

// rows[i] = math::embedding_row(x[i], table_rows) for i in [0, n), stopping at the first value that
// names no row: returns its position (rows written up to it), or -1.
template <class I>
std::int64_t embedding_rows(const I* x, std::int64_t n, std::int64_t table_rows, std::int64_t* rows);

// out[i, :] = table[rows[i], :] for i in [begin, end).
template <class T>
void embedding_lookup(const T* table, std::int64_t dim, const std::int64_t* rows, std::int64_t begin, std::int64_t end,
                      T* out);

// grad[rows[i], c] += dy[i, c] for every i in [0, count) in order and c in [col_begin, col_end).
template <class T>
void embedding_scatter_add(const T* dy, std::int64_t dim, const std::int64_t* rows, std::int64_t count,
                           std::int64_t col_begin, std::int64_t col_end, T* grad);

// local[i] = math::shard_row(rows[i], first, held) or 0, keep[i, :] = 1 or 0 (held or not).
template <class T>
void embedding_shard_rows(const std::int64_t* rows, std::int64_t count, std::int64_t first, std::int64_t held,
                          std::int64_t dim, std::int64_t* local, T* keep);

}  // namespace mdtrain::cpu
