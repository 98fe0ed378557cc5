// CUDA kernels behind ops/recurrent.h: the element-wise part of one time step of LSTM and GRU
// (the GEMMs are cuBLAS through ops::gemm). One thread per (row, unit) calls the same
// ops/recurrent_math.h function the CPU loop calls for that unit (ops/cpu/recurrent_kernels.h), so
// each output element is computed by the same expression on both. Arguments were validated by
// recurrent.cpp.
#include <cstdint>

#include "mdtrain/core/cuda/check.h"
#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/ops/cuda/grid.cuh"
#include "mdtrain/ops/cuda/launch.h"
#include "mdtrain/ops/cuda/recurrent_kernels.h"
#include "mdtrain/ops/recurrent_math.h"

namespace mdtrain::cuda {

using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;
using detail::OnDevice;

namespace {

template <class T>
__global__ void lstm_step_forward_kernel(const T* z, const T* c_prev, std::int64_t rows, std::int64_t units, T* gates,
                                         T* c, T* h) {
  const std::int64_t total = rows * units;
  for (std::int64_t k = first_index(); k < total; k += grid_stride()) {
    const std::int64_t r = k / units, j = k % units;
    math::lstm_unit_forward(z + r * 4 * units, units, j, c_prev[k], gates + r * 4 * units, c + k, h + k);
  }
}

template <class T>
__global__ void lstm_step_backward_kernel(const T* gates, const T* c_prev, const T* c, const T* dh, std::int64_t rows,
                                          std::int64_t units, T* dc, T* dz) {
  const std::int64_t total = rows * units;
  for (std::int64_t k = first_index(); k < total; k += grid_stride()) {
    const std::int64_t r = k / units, j = k % units;
    math::lstm_unit_backward(gates + r * 4 * units, units, j, c_prev[k], c[k], dh[k], dc + k, dz + r * 4 * units);
  }
}

template <class T>
__global__ void gru_step_forward_kernel(const T* xz, const T* hz, const T* h_prev, std::int64_t rows,
                                        std::int64_t units, T* gates, T* h) {
  const std::int64_t total = rows * units;
  for (std::int64_t k = first_index(); k < total; k += grid_stride()) {
    const std::int64_t r = k / units, j = k % units;
    math::gru_unit_forward(xz + r * 3 * units, hz + r * 3 * units, units, j, h_prev[k], gates + r * 3 * units, h + k);
  }
}

// dh_prev: nullptr when there is no earlier step.
template <class T>
__global__ void gru_step_backward_kernel(const T* gates, const T* hz, const T* h_prev, const T* dh, std::int64_t rows,
                                         std::int64_t units, T* dx, T* dhz, T* dh_prev) {
  const std::int64_t total = rows * units;
  for (std::int64_t k = first_index(); k < total; k += grid_stride()) {
    const std::int64_t r = k / units, j = k % units;
    const T direct = math::gru_unit_backward(gates + r * 3 * units, hz + r * 3 * units, units, j, h_prev[k], dh[k],
                                             dx + r * 3 * units, dhz + r * 3 * units);
    if (dh_prev) dh_prev[k] += direct;
  }
}

template <class T>
__global__ void add_masked_kernel(const T* g, const T* mask, std::int64_t n, T* acc) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) acc[i] = math::add_masked(acc[i], g[i], mask[i]);
}

}  // namespace

void lstm_step_forward(const Tensor& z, const Tensor& c_prev, Tensor& gates, Tensor& c, Tensor& h) {
  const std::int64_t rows = z.dim(0), units = z.dim(1) / 4;
  if (rows * units == 0) return;
  OnDevice on(z);
  dispatch_floating(z.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    lstm_step_forward_kernel<T><<<blocks_for(rows * units), kThreads, 0, on.stream>>>(z.data<T>(), c_prev.data<T>(),
                                                                                      rows, units, gates.data<T>(),
                                                                                      c.data<T>(), h.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("lstm_step_forward_kernel");
}

void lstm_step_backward(const Tensor& gates, const Tensor& c_prev, const Tensor& c, const Tensor& dh, Tensor& dc,
                        Tensor& dz) {
  const std::int64_t rows = gates.dim(0), units = gates.dim(1) / 4;
  if (rows * units == 0) return;
  OnDevice on(gates);
  dispatch_floating(gates.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    lstm_step_backward_kernel<T>
        <<<blocks_for(rows * units), kThreads, 0, on.stream>>>(gates.data<T>(), c_prev.data<T>(), c.data<T>(),
                                                               dh.data<T>(), rows, units, dc.data<T>(), dz.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("lstm_step_backward_kernel");
}

void gru_step_forward(const Tensor& xz, const Tensor& hz, const Tensor& h_prev, Tensor& gates, Tensor& h) {
  const std::int64_t rows = xz.dim(0), units = xz.dim(1) / 3;
  if (rows * units == 0) return;
  OnDevice on(xz);
  dispatch_floating(xz.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    gru_step_forward_kernel<T><<<blocks_for(rows * units), kThreads, 0, on.stream>>>(xz.data<T>(), hz.data<T>(),
                                                                                     h_prev.data<T>(), rows, units,
                                                                                     gates.data<T>(), h.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("gru_step_forward_kernel");
}

void gru_step_backward(const Tensor& gates, const Tensor& hz, const Tensor& h_prev, const Tensor& dh, Tensor& dx,
                       Tensor& dhz, Tensor& dh_prev) {
  const std::int64_t rows = gates.dim(0), units = gates.dim(1) / 3;
  if (rows * units == 0) return;
  OnDevice on(gates);
  dispatch_floating(gates.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    T* direct = dh_prev.defined() ? dh_prev.data<T>() : nullptr;
    gru_step_backward_kernel<T><<<blocks_for(rows * units), kThreads, 0, on.stream>>>(gates.data<T>(), hz.data<T>(),
                                                                                      h_prev.data<T>(), dh.data<T>(),
                                                                                      rows, units, dx.data<T>(),
                                                                                      dhz.data<T>(), direct);
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("gru_step_backward_kernel");
}

void add_masked(const Tensor& g, const Tensor& mask, Tensor& acc) {
  const std::int64_t n = acc.numel();
  if (n == 0) return;
  OnDevice on(acc);
  dispatch_floating(acc.dtype(), "cuda", [&](auto tag) {
    using T = decltype(tag);
    add_masked_kernel<T><<<blocks_for(n), kThreads, 0, on.stream>>>(g.data<T>(), mask.data<T>(), n, acc.data<T>());
  });
  MDTRAIN_CUDA_CHECK_LAUNCH("add_masked_kernel");
}

}  // namespace mdtrain::cuda
