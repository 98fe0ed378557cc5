#pragma once
// CPU loops of ops/masked_pooling.h over raw arrays (x: batch x steps x channels, mask: batch x
// steps bytes), the math of ops/masked_pooling_math.h.
#include <cstdint>

namespace mdtrain::ops::cpu {

template <class T>
void masked_mean_steps(const T* x, const std::uint8_t* mask, std::int64_t batch, std::int64_t steps,
                       std::int64_t channels, T* y);
template <class T>
void masked_mean_steps_backward(const T* dy, const std::uint8_t* mask, std::int64_t batch, std::int64_t steps,
                                std::int64_t channels, T* dx);

}  // namespace mdtrain::ops::cpu
