#pragma once
// Per-element math of one time step of the recurrent layers (ops/recurrent.h), shared by the CPU
// loops (ops/cpu/recurrent_kernels.h) and the CUDA kernels (ops/cuda/recurrent_kernels.cu). Keras's
// LSTM cell: z = x @ kernel + h_prev @ recurrent_kernel + bias split into the gates (i, f, c, o);
// i, f, o = sigmoid, g = tanh(z_c); c = f * c_prev + i * g; h = o * tanh(c).
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "mdtrain/core/hd.h"
#include "mdtrain/ops/elementwise_math.h"

namespace mdtrain::math {

// The gates' sigmoid and tanh. In float32 they are polynomials without branches or libm calls, so
// the CPU loops vectorize: libm's expf / tanhf took ~20% of an LSTM(128) training step on the CPU
// (perf). exp is Cephes's expf polynomial (within 1 ulp), tanh Eigen's rational approximation
// (within 3 ulps; TF's own CPU kernels compute this one), checked against float64 libm in
// tests/cpp/ops/recurrent_ops_test.cpp. float64 keeps libm (math::sigmoid, math::tanh_act): the
// finite-difference checks run in float64.
MDTRAIN_HD float exp_polynomial(float x) {
  // Ternaries, not fmin/fmax: a NaN stays NaN.
  x = x > 88.3762626647949f ? 88.3762626647949f : x;
  x = x < -87.3365478515625f ? -87.3365478515625f : x;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);  // x = n ln2 + r, |r| <= ln2 / 2
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  // 2^n built from its exponent bits (n in [-126, 127] after the clamp; 0 for a NaN).
  const std::int32_t bits = (static_cast<std::int32_t>(n == n ? n : 0.0f) + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

MDTRAIN_HD float tanh_rational(float x) {
  // tanh(x) = x P(x^2) / Q(x^2) on (-7.905, 7.905); beyond, tanh(x) is +-1 in float32. The
  // saturated value is returned as such: the rational at the bound comes out 1 - 4 ulp or 1
  // depending on which multiply-adds the compiler fuses (GCC and clang differ).
  const float bound = 7.90531110763549805f;
  if (x >= bound) return 1.0f;
  if (x <= -bound) return -1.0f;
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  // Below 4e-4, tanh(x) rounds to x.
  return std::fabs(x) < 0.0004f ? x : x * p / q;
}

template <class T>
MDTRAIN_HD T gate_sigmoid(T x) {
  if constexpr (std::is_same_v<T, float>) {
    const float e = exp_polynomial(-std::fabs(x));  // never overflows
    return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
  } else {
    return sigmoid(x);
  }
}

template <class T>
MDTRAIN_HD T gate_tanh(T x) {
  if constexpr (std::is_same_v<T, float>) return tanh_rational(x);
  else return tanh_act(x);
}

}  // namespace mdtrain::math

namespace mdtrain::math {

// Unit j of one row: z and gates point at the row's 4u pre-activations / activations (gate k of
// unit j at k * units + j); writes the activated gates, c and h of that unit.
template <class T>
MDTRAIN_HD void lstm_unit_forward(const T* z, std::int64_t units, std::int64_t j, T c_prev, T* gates, T* c, T* h) {
  const T i = gate_sigmoid(z[j]), f = gate_sigmoid(z[units + j]), g = gate_tanh(z[2 * units + j]),
          o = gate_sigmoid(z[3 * units + j]);
  gates[j] = i;
  gates[units + j] = f;
  gates[2 * units + j] = g;
  gates[3 * units + j] = o;
  const T cell = f * c_prev + i * g;
  *c = cell;
  *h = o * gate_tanh(cell);
}

// Backward of lstm_unit_forward for unit j: dh is dL/dh of this step (output plus recurrence), *dc
// holds dL/dc from the next step on entry and dL/dc_prev on return; writes the 4 gates' dL/dz.
template <class T>
MDTRAIN_HD void lstm_unit_backward(const T* gates, std::int64_t units, std::int64_t j, T c_prev, T c, T dh, T* dc,
                                   T* dz) {
  const T i = gates[j], f = gates[units + j], g = gates[2 * units + j], o = gates[3 * units + j];
  const T tc = gate_tanh(c);
  const T dcell = *dc + dh * o * tanh_grad_from_output(tc);
  dz[j] = dcell * g * sigmoid_grad_from_output(i);
  dz[units + j] = dcell * c_prev * sigmoid_grad_from_output(f);
  dz[2 * units + j] = dcell * i * tanh_grad_from_output(g);
  dz[3 * units + j] = dh * tc * sigmoid_grad_from_output(o);
  *dc = dcell * f;
}

// acc += g * mask: a gradient through a dropout mask (recurrent_dropout's dL/dh_prev).
template <class T>
MDTRAIN_HD T add_masked(T acc, T g, T mask) {
  return acc + g * mask;
}

}  // namespace mdtrain::math

namespace mdtrain::math {

// Keras's GRU cell with reset_after=True, unit j of one row: xz and hz are the row's input and
// recurrent projections (biases included), gates (z, r, h) at k * units + j.
// z = sigmoid(xz_z + hz_z), r = sigmoid(xz_r + hz_r), hh = tanh(xz_h + r * hz_h),
// h = z * h_prev + (1 - z) * hh. Writes the activated gates (z, r, hh) and h.
template <class T>
MDTRAIN_HD void gru_unit_forward(const T* xz, const T* hz, std::int64_t units, std::int64_t j, T h_prev, T* gates,
                                 T* h) {
  const T z = gate_sigmoid(xz[j] + hz[j]);
  const T r = gate_sigmoid(xz[units + j] + hz[units + j]);
  const T hh = gate_tanh(xz[2 * units + j] + r * hz[2 * units + j]);
  gates[j] = z;
  gates[units + j] = r;
  gates[2 * units + j] = hh;
  *h = z * h_prev + (T(1) - z) * hh;
}

// Backward of gru_unit_forward given dh = dL/dh: writes dL/d(input projection) dx (3 gates), dL/d(recurrent
// projection) dhz (3 gates), and returns the direct part of dL/dh_prev (dh * z; the rest is dhz @ U^T).
template <class T>
MDTRAIN_HD T gru_unit_backward(const T* gates, const T* hz, std::int64_t units, std::int64_t j, T h_prev, T dh, T* dx,
                               T* dhz) {
  const T z = gates[j], r = gates[units + j], hh = gates[2 * units + j];
  const T dpre_h = dh * (T(1) - z) * tanh_grad_from_output(hh);
  const T dpre_r = dpre_h * hz[2 * units + j] * sigmoid_grad_from_output(r);
  const T dpre_z = dh * (h_prev - hh) * sigmoid_grad_from_output(z);
  dx[j] = dpre_z;
  dx[units + j] = dpre_r;
  dx[2 * units + j] = dpre_h;
  dhz[j] = dpre_z;
  dhz[units + j] = dpre_r;
  dhz[2 * units + j] = dpre_h * r;
  return dh * z;
}

}  // namespace mdtrain::math
