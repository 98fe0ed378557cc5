#pragma once
// The per-element math of ops::add_into (ops/accumulate.h), shared by its CPU loop and its CUDA
// kernel so that both round alike: one IEEE addition per element.
#include "mdtrain/core/hd.h"

namespace mdtrain::math {

// sum + x: what a running sum of gradients (pipeline micro-batches) adds per element.
template <class T>
MDTRAIN_HD T accumulate(T sum, T x) {
  return sum + x;
}

}  // namespace mdtrain::math
