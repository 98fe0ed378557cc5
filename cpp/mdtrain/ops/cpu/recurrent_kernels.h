#pragma once
// CPU loops behind ops/recurrent.h over rows [lo, hi) of one time step (recurrent_kernels.cpp).
// Arguments are already validated; T is float or double; outputs never overlap inputs. The math of
// each (row, unit) is ops/recurrent_math.h, which the CUDA kernels call too.
#include <cstdint>

namespace mdtrain::cpu {

// math::lstm_unit_forward for every unit of rows [lo, hi).
template <class T>
void lstm_step_forward(const T* z, const T* c_prev, std::int64_t units, std::int64_t lo, std::int64_t hi, T* gates,
                       T* c, T* h);
// math::lstm_unit_backward for every unit of rows [lo, hi).
template <class T>
void lstm_step_backward(const T* gates, const T* c_prev, const T* c, const T* dh, std::int64_t units, std::int64_t lo,
                        std::int64_t hi, T* dc, T* dz);
// math::gru_unit_forward for every unit of rows [lo, hi).
template <class T>
void gru_step_forward(const T* xz, const T* hz, const T* h_prev, std::int64_t units, std::int64_t lo, std::int64_t hi,
                      T* gates, T* h);
// math::gru_unit_backward for every unit of rows [lo, hi); its direct dL/dh_prev part is added into
// dh_prev unless that is null.
template <class T>
void gru_step_backward(const T* gates, const T* hz, const T* h_prev, const T* dh, std::int64_t units, std::int64_t lo,
                       std::int64_t hi, T* dx, T* dhz, T* dh_prev);
// acc[i] = math::add_masked(acc[i], g[i], mask[i]) for i in [0, n).
template <class T>
void add_masked(const T* g, const T* mask, std::int64_t n, T* acc);

}  // namespace mdtrain::cpu
