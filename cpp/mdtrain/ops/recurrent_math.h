#pragma once
// Per-element math of one time step of the recurrent layers (ops/recurrent.h), shared by the CPU
// loops (ops/cpu/recurrent_kernels.h) and, when written, the CUDA kernels. Keras's LSTM cell:
// z = x @ kernel + h_prev @ recurrent_kernel + bias split into the gates (i, f, c, o);
// i, f, o = sigmoid, g = tanh(z_c); c = f * c_prev + i * g; h = o * tanh(c).
#include "mdtrain/core/hd.h"
#include "mdtrain/ops/elementwise_math.h"

namespace mdtrain::math {

// Unit j of one row: z and gates point at the row's 4u pre-activations / activations (gate k of
// unit j at k * units + j); writes the activated gates, c and h of that unit.
template <class T>
MDTRAIN_HD void lstm_unit_forward(const T* z, std::int64_t units, std::int64_t j, T c_prev, T* gates, T* c, T* h) {
  const T i = sigmoid(z[j]), f = sigmoid(z[units + j]), g = tanh_act(z[2 * units + j]), o = sigmoid(z[3 * units + j]);
  gates[j] = i;
  gates[units + j] = f;
  gates[2 * units + j] = g;
  gates[3 * units + j] = o;
  const T cell = f * c_prev + i * g;
  *c = cell;
  *h = o * tanh_act(cell);
}

// Backward of lstm_unit_forward for unit j: dh is dL/dh of this step (output plus recurrence), *dc
// holds dL/dc from the next step on entry and dL/dc_prev on return; writes the 4 gates' dL/dz.
template <class T>
MDTRAIN_HD void lstm_unit_backward(const T* gates, std::int64_t units, std::int64_t j, T c_prev, T c, T dh, T* dc,
                                   T* dz) {
  const T i = gates[j], f = gates[units + j], g = gates[2 * units + j], o = gates[3 * units + j];
  const T tc = tanh_act(c);
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
  const T z = sigmoid(xz[j] + hz[j]);
  const T r = sigmoid(xz[units + j] + hz[units + j]);
  const T hh = tanh_act(xz[2 * units + j] + r * hz[2 * units + j]);
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
