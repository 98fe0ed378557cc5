// CPU loops of ops/recurrent.h (declared in recurrent_kernels.h). The pointers are __restrict
// (outputs never overlap inputs) and the float32 gate math (ops/recurrent_math.h) has no branches or
// libm calls, so each row's loop over the units vectorizes.
#include "mdtrain/ops/cpu/recurrent_kernels.h"

#include "mdtrain/ops/recurrent_math.h"

namespace mdtrain::cpu {

template <class T>
void lstm_step_forward(const T* __restrict z, const T* __restrict c_prev, std::int64_t units, std::int64_t lo,
                       std::int64_t hi, T* __restrict gates, T* __restrict c, T* __restrict h) {
  for (std::int64_t r = lo; r < hi; ++r)
    for (std::int64_t j = 0; j < units; ++j)
      math::lstm_unit_forward(z + r * 4 * units, units, j, c_prev[r * units + j], gates + r * 4 * units,
                              c + r * units + j, h + r * units + j);
}

template <class T>
void lstm_step_backward(const T* __restrict gates, const T* __restrict c_prev, const T* __restrict c,
                        const T* __restrict dh, std::int64_t units, std::int64_t lo, std::int64_t hi, T* __restrict dc,
                        T* __restrict dz) {
  for (std::int64_t r = lo; r < hi; ++r)
    for (std::int64_t j = 0; j < units; ++j) {
      const std::int64_t k = r * units + j;
      math::lstm_unit_backward(gates + r * 4 * units, units, j, c_prev[k], c[k], dh[k], dc + k, dz + r * 4 * units);
    }
}

}  // namespace mdtrain::cpu

namespace mdtrain::cpu {

template <class T>
void gru_step_forward(const T* __restrict xz, const T* __restrict hz, const T* __restrict h_prev, std::int64_t units,
                      std::int64_t lo, std::int64_t hi, T* __restrict gates, T* __restrict h) {
  for (std::int64_t r = lo; r < hi; ++r)
    for (std::int64_t j = 0; j < units; ++j)
      math::gru_unit_forward(xz + r * 3 * units, hz + r * 3 * units, units, j, h_prev[r * units + j],
                             gates + r * 3 * units, h + r * units + j);
}

template <class T>
void gru_step_backward(const T* __restrict gates, const T* __restrict hz, const T* __restrict h_prev,
                       const T* __restrict dh, std::int64_t units, std::int64_t lo, std::int64_t hi, T* __restrict dx,
                       T* __restrict dhz, T* __restrict dh_prev) {
  // Two loops, not a test per unit: the conditional store would keep the loop from vectorizing.
  for (std::int64_t r = lo; r < hi; ++r) {
    if (dh_prev) {
      for (std::int64_t j = 0; j < units; ++j) {
        const std::int64_t k = r * units + j;
        dh_prev[k] += math::gru_unit_backward(gates + r * 3 * units, hz + r * 3 * units, units, j, h_prev[k], dh[k],
                                              dx + r * 3 * units, dhz + r * 3 * units);
      }
    } else {
      for (std::int64_t j = 0; j < units; ++j) {
        const std::int64_t k = r * units + j;
        math::gru_unit_backward(gates + r * 3 * units, hz + r * 3 * units, units, j, h_prev[k], dh[k],
                                dx + r * 3 * units, dhz + r * 3 * units);
      }
    }
  }
}

template <class T>
void add_masked(const T* g, const T* mask, std::int64_t n, T* acc) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] = math::add_masked(acc[i], g[i], mask[i]);
}

}  // namespace mdtrain::cpu

namespace mdtrain::cpu {

#define MDTRAIN_RECURRENT_KERNELS(T)                                                                                   \
  template void lstm_step_forward<T>(const T*, const T*, std::int64_t, std::int64_t, std::int64_t, T*, T*, T*);        \
  template void lstm_step_backward<T>(const T*, const T*, const T*, const T*, std::int64_t, std::int64_t,              \
                                      std::int64_t, T*, T*);                                                           \
  template void gru_step_forward<T>(const T*, const T*, const T*, std::int64_t, std::int64_t, std::int64_t, T*, T*);   \
  template void gru_step_backward<T>(const T*, const T*, const T*, const T*, std::int64_t, std::int64_t, std::int64_t, \
                                     T*, T*, T*);                                                                      \
  template void add_masked<T>(const T*, const T*, std::int64_t, T*);
MDTRAIN_RECURRENT_KERNELS(float)
MDTRAIN_RECURRENT_KERNELS(double)
#undef MDTRAIN_RECURRENT_KERNELS

}  // namespace mdtrain::cpu
