#pragma once
// The element-wise folds of the collectives, shared by the host backends' rank-order reduction
// (reduce_kernels.cpp) and the NCCL backend's kernels (NCCL's own max/min drop NaN: fmaxf), so
// every backend gives the same answer for Max/Min with NaN.
#include <type_traits>

#include "mdtrain/core/hd.h"

namespace mdtrain::math {

// Max/Min return NaN when either side is NaN, so a diverged replica is never hidden.
template <class T>
MDTRAIN_HD T fold_max(T acc, T x) {
  return (x > acc || x != x) ? x : acc;
}
template <class T>
MDTRAIN_HD T fold_min(T acc, T x) {
  return (x < acc || x != x) ? x : acc;
}

// Integer sums wrap (two's complement) instead of overflowing into undefined behaviour.
template <class T>
MDTRAIN_HD T fold_sum(T acc, T x) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(acc) + static_cast<U>(x)));
  } else {
    return acc + x;
  }
}

}  // namespace mdtrain::math
