#pragma once
// CPU loops of ops/recurrent.h over rows [lo, hi); the math is ops/recurrent_math.h.
#include <cstdint>

#include "mdtrain/ops/recurrent_math.h"

namespace mdtrain::cpu {

template <class T>
void lstm_step_forward(const T* z, const T* c_prev, std::int64_t units, std::int64_t lo, std::int64_t hi, T* gates,
                       T* c, T* h) {
  for (std::int64_t r = lo; r < hi; ++r)
    for (std::int64_t j = 0; j < units; ++j)
      math::lstm_unit_forward(z + r * 4 * units, units, j, c_prev[r * units + j], gates + r * 4 * units,
                              c + r * units + j, h + r * units + j);
}

template <class T>
void lstm_step_backward(const T* gates, const T* c_prev, const T* c, const T* dh, std::int64_t units, std::int64_t lo,
                        std::int64_t hi, T* dc, T* dz) {
  for (std::int64_t r = lo; r < hi; ++r)
    for (std::int64_t j = 0; j < units; ++j) {
      const std::int64_t k = r * units + j;
      math::lstm_unit_backward(gates + r * 4 * units, units, j, c_prev[k], c[k], dh[k], dc + k, dz + r * 4 * units);
    }
}

}  // namespace mdtrain::cpu

namespace mdtrain::cpu {

template <class T>
void gru_step_forward(const T* xz, const T* hz, const T* h_prev, std::int64_t units, std::int64_t lo, std::int64_t hi,
                      T* gates, T* h) {
  for (std::int64_t r = lo; r < hi; ++r)
    for (std::int64_t j = 0; j < units; ++j)
      math::gru_unit_forward(xz + r * 3 * units, hz + r * 3 * units, units, j, h_prev[r * units + j],
                             gates + r * 3 * units, h + r * units + j);
}

template <class T>
void gru_step_backward(const T* gates, const T* hz, const T* h_prev, const T* dh, std::int64_t units, std::int64_t lo,
                       std::int64_t hi, T* dx, T* dhz, T* dh_prev) {
  for (std::int64_t r = lo; r < hi; ++r)
    for (std::int64_t j = 0; j < units; ++j) {
      const std::int64_t k = r * units + j;
      const T direct = math::gru_unit_backward(gates + r * 3 * units, hz + r * 3 * units, units, j, h_prev[k], dh[k],
                                               dx + r * 3 * units, dhz + r * 3 * units);
      if (dh_prev) dh_prev[k] += direct;
    }
}

template <class T>
void add_masked(const T* g, const T* mask, std::int64_t n, T* acc) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] = math::add_masked(acc[i], g[i], mask[i]);
}

}  // namespace mdtrain::cpu
