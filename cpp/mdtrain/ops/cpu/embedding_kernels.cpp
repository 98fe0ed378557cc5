#include "mdtrain/ops/cpu/embedding_kernels.h"

#include <cstring>

#include "mdtrain/ops/embedding_math.h"

namespace mdtrain::cpu {

template <class I>
std::int64_t embedding_rows(const I* x, std::int64_t n, std::int64_t table_rows, std::int64_t* rows) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = math::embedding_row(x[i], table_rows);
    if (row < 0) return i;
    rows[i] = row;
  }
  return -1;
}

template <class T>
void embedding_lookup(const T* table, std::int64_t dim, const std::int64_t* rows, std::int64_t begin, std::int64_t end,
                      T* out) {
  const std::size_t row_bytes = static_cast<std::size_t>(dim) * sizeof(T);
  for (std::int64_t i = begin; i < end; ++i) std::memcpy(out + i * dim, table + rows[i] * dim, row_bytes);
}

template <class T>
void embedding_scatter_add(const T* dy, std::int64_t dim, const std::int64_t* rows, std::int64_t count,
                           std::int64_t col_begin, std::int64_t col_end, T* grad) {
  for (std::int64_t i = 0; i < count; ++i) {
    const T* src = dy + i * dim;
    T* dst = grad + rows[i] * dim;
    for (std::int64_t c = col_begin; c < col_end; ++c) dst[c] += src[c];
  }
}

template <class T>
void embedding_shard_rows(const std::int64_t* rows, std::int64_t count, std::int64_t first, std::int64_t held,
                          std::int64_t dim, std::int64_t* local, T* keep) {
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t row = math::shard_row(rows[i], first, held);
    local[i] = row < 0 ? 0 : row;
    const T k = row < 0 ? T(0) : T(1);
    for (std::int64_t c = 0; c < dim; ++c) keep[i * dim + c] = k;
  }
}

#define MDTRAIN_EMBEDDING_INDEX(I) \
  template std::int64_t embedding_rows<I>(const I*, std::int64_t, std::int64_t, std::int64_t*);
MDTRAIN_EMBEDDING_INDEX(std::int32_t)
MDTRAIN_EMBEDDING_INDEX(std::int64_t)
MDTRAIN_EMBEDDING_INDEX(float)
MDTRAIN_EMBEDDING_INDEX(double)
#undef MDTRAIN_EMBEDDING_INDEX

#define MDTRAIN_EMBEDDING_FLOAT(T)                                                                                   \
  template void embedding_lookup<T>(const T*, std::int64_t, const std::int64_t*, std::int64_t, std::int64_t, T*);    \
  template void embedding_scatter_add<T>(const T*, std::int64_t, const std::int64_t*, std::int64_t, std::int64_t,    \
                                         std::int64_t, T*);                                                          \
  template void embedding_shard_rows<T>(const std::int64_t*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, \
                                        std::int64_t*, T*);
MDTRAIN_EMBEDDING_FLOAT(float)
MDTRAIN_EMBEDDING_FLOAT(double)
#undef MDTRAIN_EMBEDDING_FLOAT

}  // namespace mdtrain::cpu
