#pragma once
// The per-element rules of the element-wise merge layers (nn/elementwise_merge.h), as TF computes
// tf.maximum / tf.minimum and their gradients: a NaN operand gives NaN, and the gradient of
// max(a, b) goes to a where a >= b (to b otherwise, so to b when either is NaN); min likewise with
// a <= b. Keras folds more inputs pairwise in order, so on ties the first input takes the gradient.
#include "mdtrain/core/hd.h"

namespace mdtrain::math {

// Whether max(cur, x) keeps `cur` (and its gradient) rather than taking x: TF's greater_equal.
template <class T>
MDTRAIN_HD bool max_keeps_first(T cur, T x) {
  return cur >= x;
}
template <class T>
MDTRAIN_HD bool min_keeps_first(T cur, T x) {
  return cur <= x;
}

// max(a, b) and min(a, b) with NaN propagating from either side (TF's Maximum and Minimum).
template <class T>
MDTRAIN_HD T maximum_propagating_nan(T a, T b) {
  return a >= b ? a : (b > a ? b : a + b);  // neither comparison holds: one is NaN, so is a + b
}
template <class T>
MDTRAIN_HD T minimum_propagating_nan(T a, T b) {
  return a <= b ? a : (b < a ? b : a + b);
}

}  // namespace mdtrain::math
