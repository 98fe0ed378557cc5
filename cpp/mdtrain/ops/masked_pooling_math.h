#pragma once
// The math of a mean over a sequence's unmasked steps (keras.layers.GlobalAveragePooling1D with
// a mask), one channel of one sequence at a time. Masked steps are skipped, not multiplied by 0,
// so a NaN or Inf there does not reach the output (Keras selects them away with ops.where); a
// sequence with no unmasked step divides 0 by 0, a NaN, as Keras does.
#include <cstdint>

#include "mdtrain/core/hd.h"

namespace mdtrain::math {

// The number of set entries of a sequence's mask (one byte per step).
MDTRAIN_HD std::int64_t unmasked_steps(const std::uint8_t* mask, std::int64_t steps) {
  std::int64_t n = 0;
  for (std::int64_t t = 0; t < steps; ++t) n += mask[t] != 0;
  return n;
}

// Channel c's mean over the unmasked steps of x (steps, channels), summed in step order.
template <class T>
MDTRAIN_HD T masked_step_mean(const T* x, const std::uint8_t* mask, std::int64_t steps, std::int64_t channels,
                              std::int64_t c, std::int64_t count) {
  T sum = T(0);
  for (std::int64_t t = 0; t < steps; ++t)
    if (mask[t] != 0) sum += x[t * channels + c];
  return sum / static_cast<T>(count);
}

// d(mean)/d(x[t, c]) times the output gradient dy: dy / count on an unmasked step, 0 on a masked
// one (also when no step is unmasked: the NaN is in the value only).
template <class T>
MDTRAIN_HD T masked_step_mean_grad(T dy, bool unmasked, std::int64_t count) {
  return unmasked ? dy / static_cast<T>(count) : T(0);
}

}  // namespace mdtrain::math
