#include "mdtrain/distribute/reduce_kernels.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/reduce_math.h"

namespace mdtrain::detail {
namespace {

// The folds themselves are shared with the NCCL backend's kernels (reduce_math.h).
template <class T>
struct MaxOp {
  static T apply(T acc, T x) { return math::fold_max(acc, x); }
};
template <class T>
struct MinOp {
  static T apply(T acc, T x) { return math::fold_min(acc, x); }
};
template <class T>
struct SumOp {
  static T apply(T acc, T x) { return math::fold_sum(acc, x); }
};

// A tile small enough to stay in L1 while every rank's contribution is folded into it: one
// pass over memory per input instead of one per input per output write.
constexpr std::size_t kTileBytes = 8192;

template <class T, class Op>
void reduce_typed(void* const* outputs, int n_outputs, const void* const* inputs, int n, std::size_t offset,
                  std::size_t count, bool mean) {
  constexpr std::size_t tile = kTileBytes / sizeof(T);
  T acc[tile];
  for (std::size_t begin = 0; begin < count; begin += tile) {
    const std::size_t len = count - begin < tile ? count - begin : tile;
    const T* first = static_cast<const T*>(inputs[0]) + offset + begin;
    std::memcpy(acc, first, len * sizeof(T));
    for (int r = 1; r < n; ++r) {
      const T* in = static_cast<const T*>(inputs[r]) + offset + begin;
      for (std::size_t i = 0; i < len; ++i) acc[i] = Op::apply(acc[i], in[i]);
    }
    if (mean) {
      const T divisor = static_cast<T>(n);
      for (std::size_t i = 0; i < len; ++i) acc[i] = acc[i] / divisor;
    }
    for (int k = 0; k < n_outputs; ++k) {
      std::memcpy(static_cast<T*>(outputs[k]) + begin, acc, len * sizeof(T));
    }
  }
}

template <class T>
void reduce_dispatch_op(void* const* o, int m, const void* const* inputs, int n, std::size_t offset, std::size_t count,
                        ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return reduce_typed<T, SumOp<T>>(o, m, inputs, n, offset, count, false);
    case ReduceOp::Mean: return reduce_typed<T, SumOp<T>>(o, m, inputs, n, offset, count, true);
    case ReduceOp::Max: return reduce_typed<T, MaxOp<T>>(o, m, inputs, n, offset, count, false);
    case ReduceOp::Min: return reduce_typed<T, MinOp<T>>(o, m, inputs, n, offset, count, false);
  }
  fail<std::invalid_argument>("[distribute] unknown reduce op ", static_cast<int>(op));
}

}  // namespace

void reduce_in_rank_order(void* const* outputs, int n_outputs, const void* const* inputs, int n_inputs,
                          std::size_t offset, std::size_t count, DType dtype, ReduceOp op) {
  if (count == 0) return;
  void* const* out = outputs;
  const int m = n_outputs;
  dispatch_any(dtype, "distribute",
               [&](auto tag) { reduce_dispatch_op<decltype(tag)>(out, m, inputs, n_inputs, offset, count, op); });
}

}  // namespace mdtrain::detail
