#include "mdtrain/ops/cpu/masked_pooling_kernels.h"

#include "mdtrain/ops/masked_pooling_math.h"

namespace mdtrain::ops::cpu {

template <class T>
void masked_mean_steps(const T* x, const std::uint8_t* mask, std::int64_t batch, std::int64_t steps,
                       std::int64_t channels, T* y) {
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::uint8_t* m = mask + b * steps;
    const std::int64_t count = math::unmasked_steps(m, steps);
    for (std::int64_t c = 0; c < channels; ++c)
      y[b * channels + c] = math::masked_step_mean(x + b * steps * channels, m, steps, channels, c, count);
  }
}

template <class T>
void masked_mean_steps_backward(const T* dy, const std::uint8_t* mask, std::int64_t batch, std::int64_t steps,
                                std::int64_t channels, T* dx) {
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::uint8_t* m = mask + b * steps;
    const std::int64_t count = math::unmasked_steps(m, steps);
    for (std::int64_t t = 0; t < steps; ++t)
      for (std::int64_t c = 0; c < channels; ++c)
        dx[(b * steps + t) * channels + c] = math::masked_step_mean_grad(dy[b * channels + c], m[t] != 0, count);
  }
}

#define MDTRAIN_INSTANTIATE(T)                                                                                         \
  template void masked_mean_steps<T>(const T*, const std::uint8_t*, std::int64_t, std::int64_t, std::int64_t, T*);     \
  template void masked_mean_steps_backward<T>(const T*, const std::uint8_t*, std::int64_t, std::int64_t, std::int64_t, \
                                              T*);
MDTRAIN_INSTANTIATE(float)
MDTRAIN_INSTANTIATE(double)
#undef MDTRAIN_INSTANTIATE

}  // namespace mdtrain::ops::cpu
