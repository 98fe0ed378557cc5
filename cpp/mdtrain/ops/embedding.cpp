#include "mdtrain/ops/embedding.h"

#include <cstring>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/core/threading/thread_team.h"
#include "mdtrain/ops/cpu/embedding_kernels.h"
#include "mdtrain/ops/cuda/embedding_kernels.h"
#include "mdtrain/ops/device_checks.h"
#include "mdtrain/ops/embedding_math.h"

namespace mdtrain::ops {

namespace {

std::string describe(const Tensor& t) {
  return t.defined() ? cat(name_of(t.dtype()), " ", to_string(t.shape()), " on ", t.device().to_string())
                     : std::string("undefined");
}

// The index tensor's element type: int32, int64, float32 or float64.
template <class F>
decltype(auto) dispatch_index(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Int32: return std::forward<F>(f)(std::int32_t{});
    case DType::Int64: return std::forward<F>(f)(std::int64_t{});
    case DType::Float32: return std::forward<F>(f)(float{});
    case DType::Float64: return std::forward<F>(f)(double{});
    default: break;
  }
  throw std::invalid_argument(
      cat("[embedding] indices must be int32, int64, float32 or float64 (whole numbers), got ", name_of(dtype)));
}

// rows: int64 (count,) in `reference`'s memory.
void check_rows(const char* op, const Tensor& rows, std::int64_t count, const Tensor& reference) {
  MDTRAIN_CHECK(rows.defined() && rows.dtype() == DType::Int64 && rows.numel() == count, std::invalid_argument,
                "[embedding] ", op, ": rows must be int64 with ", count, " elements, got ", describe(rows));
  detail::require_same_memory("embedding", op, "rows", rows, reference);
}

// table-like: a 2-D float tensor on the host or a usable GPU.
void check_matrix(const char* op, const char* what, const Tensor& t) {
  MDTRAIN_CHECK(t.defined() && is_floating(t.dtype()) && t.ndim() == 2, std::invalid_argument, "[embedding] ", op, ": ",
                what, " must be a 2-D float32 or float64 tensor, got ", describe(t));
  detail::require_usable_device("embedding", op, what, t);
}

// Copies and gathers of at least 64 KiB are split over the intra-op threads (as ops::gather_rows):
// rows of a table larger than the caches come from DRAM one miss after another.
constexpr std::int64_t kSplitBytes = std::int64_t{1} << 16;

}  // namespace

BadEmbeddingIndex embedding_rows(const Tensor& x, std::int64_t table_rows, Tensor& rows) {
  MDTRAIN_CHECK(x.defined(), std::invalid_argument, "[embedding] embedding_rows: the indices are undefined");
  detail::require_usable_device("embedding", "embedding_rows", "x", x);
  MDTRAIN_CHECK(table_rows >= 1, std::invalid_argument,
                "[embedding] embedding_rows: the table needs at least one row, got ", table_rows);
  check_rows("embedding_rows", rows, x.numel(), x);
  BadEmbeddingIndex bad;
  if (x.numel() == 0) return bad;
  if (!x.device().is_cpu()) {
    bad.position = cuda::embedding_rows(x, table_rows, rows);
  } else {
    bad.position = dispatch_index(x.dtype(), [&](auto tag) {
      using I = decltype(tag);
      return cpu::embedding_rows<I>(x.data<I>(), x.numel(), table_rows, rows.data<std::int64_t>());
    });
  }
  if (bad.position < 0) return bad;
  // The offending element, read back on its own (from a GPU: one element).
  Tensor one({1}, x.dtype());
  one.copy_from(x.reshape({-1}).rows(bad.position, bad.position + 1));
  dispatch_index(x.dtype(), [&](auto tag) {
    using I = decltype(tag);
    const I v = one.data<I>()[0];
    bad.value = static_cast<double>(v);
    bad.integral = math::embedding_row(v, table_rows) != math::kIndexNotIntegral;
  });
  return bad;
}

void embedding_lookup(const Tensor& table, const Tensor& rows, Tensor& out) {
  check_matrix("embedding_lookup", "table", table);
  check_matrix("embedding_lookup", "out", out);
  detail::require_same_memory("embedding", "embedding_lookup", "out", out, table);
  MDTRAIN_CHECK(out.dtype() == table.dtype() && out.dim(1) == table.dim(1), std::invalid_argument,
                "[embedding] embedding_lookup: out ", describe(out), " does not fit table ", describe(table));
  const std::int64_t count = out.dim(0), dim = table.dim(1);
  check_rows("embedding_lookup", rows, count, table);
  if (count == 0) return;
  if (!table.device().is_cpu()) return cuda::embedding_lookup(table, rows, out);
  dispatch_floating(table.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t bytes = count * dim * static_cast<std::int64_t>(sizeof(T));
    cpu::run_in_ranges(count, bytes >= kSplitBytes, [&](std::int64_t lo, std::int64_t hi) {
      cpu::embedding_lookup<T>(table.data<T>(), dim, rows.data<std::int64_t>(), lo, hi, out.data<T>());
    });
  });
}

void embedding_scatter_add(const Tensor& dy, const Tensor& rows, Tensor& grad) {
  check_matrix("embedding_scatter_add", "dy", dy);
  check_matrix("embedding_scatter_add", "grad", grad);
  detail::require_same_memory("embedding", "embedding_scatter_add", "grad", grad, dy);
  MDTRAIN_CHECK(grad.dtype() == dy.dtype() && grad.dim(1) == dy.dim(1), std::invalid_argument,
                "[embedding] embedding_scatter_add: grad ", describe(grad), " does not fit dy ", describe(dy));
  const std::int64_t count = dy.dim(0), dim = dy.dim(1);
  check_rows("embedding_scatter_add", rows, count, dy);
  if (!dy.device().is_cpu()) return cuda::embedding_scatter_add(dy, rows, grad);
  // Row numbers come from embedding_rows; a caller passing its own is checked here, before any write.
  const std::int64_t* r = rows.data<std::int64_t>();
  for (std::int64_t i = 0; i < count; ++i)
    MDTRAIN_CHECK(r[i] >= 0 && r[i] < grad.dim(0), std::out_of_range, "[embedding] embedding_scatter_add: row ", r[i],
                  " at position ", i, " is outside the ", grad.dim(0), " rows of grad");
  dispatch_floating(dy.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    T* g = grad.data<T>();
    const std::int64_t grad_bytes = grad.numel() * static_cast<std::int64_t>(sizeof(T));
    // A large table's zeroing is most of the work of a small batch: split it too.
    cpu::run_in_ranges(grad.dim(0), grad_bytes >= kSplitBytes, [&](std::int64_t lo, std::int64_t hi) {
      std::memset(g + lo * dim, 0, static_cast<std::size_t>((hi - lo) * dim) * sizeof(T));
    });
    // Threads own ranges of columns and each walks every index in order, so each element's sum
    // is taken in index order whatever the split.
    const std::int64_t bytes = count * dim * static_cast<std::int64_t>(sizeof(T));
    cpu::run_in_ranges(dim, bytes >= kSplitBytes, [&](std::int64_t lo, std::int64_t hi) {
      cpu::embedding_scatter_add<T>(dy.data<T>(), dim, r, count, lo, hi, g);
    });
  });
}

void embedding_shard_rows(const Tensor& rows, std::int64_t first, std::int64_t held, Tensor& local, Tensor& keep) {
  check_matrix("embedding_shard_rows", "keep", keep);
  const std::int64_t count = keep.dim(0), dim = keep.dim(1);
  check_rows("embedding_shard_rows", rows, count, keep);
  check_rows("embedding_shard_rows", local, count, keep);
  MDTRAIN_CHECK(first >= 0 && held >= 0, std::invalid_argument, "[embedding] embedding_shard_rows: rows [", first, ", ",
                first + held, ") are not a shard of a table");
  if (count == 0) return;
  if (!keep.device().is_cpu()) return cuda::embedding_shard_rows(rows, first, held, local, keep);
  dispatch_floating(keep.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    cpu::embedding_shard_rows<T>(rows.data<std::int64_t>(), count, first, held, dim, local.data<std::int64_t>(),
                                 keep.data<T>());
  });
}

}  // namespace mdtrain::ops
