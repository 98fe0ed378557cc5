#include "mdtrain/nn/gru.h"

#include <cmath>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/ops/ops.h"
#include "mdtrain/ops/recurrent.h"

namespace mdtrain {

GRU::GRU(std::string name, Options options) : RecurrentLayer(std::move(name), std::move(options), "gru", 3) {
  MDTRAIN_CHECK(parse_activation(options_.activation) == Activation::Tanh, std::invalid_argument, "[gru] layer \"",
                name_, "\": activation=\"", options_.activation, "\" is not supported yet (only \"tanh\")");
  MDTRAIN_CHECK(parse_activation(options_.recurrent_activation) == Activation::Sigmoid, std::invalid_argument,
                "[gru] layer \"", name_, "\": recurrent_activation=\"", options_.recurrent_activation,
                "\" is not supported yet (only \"sigmoid\")");
}

void GRU::ensure_cell_buffers(std::int64_t rows) {
  ensure_buffer(hz_, {rows, 3 * options_.units}, dtype_, xt_.device());
  ensure_buffer(gates_buf_, {rows, 3 * options_.units}, dtype_, xt_.device());
  if (options_.reset_after) return;
  const std::int64_t u = options_.units;
  MDTRAIN_CHECK(xt_.device().is_cpu(), std::invalid_argument, "[gru] layer \"", name_,
                "\": reset_after=false runs on CPU devices only for now");
  ensure_buffer(u_zr_, {u, 2 * u}, dtype_, xt_.device());
  ensure_buffer(u_h_, {u, u}, dtype_, xt_.device());
  ensure_buffer(rh_, {rows, u}, dtype_, xt_.device());
  dispatch_floating(dtype_, "gru", [&](auto tag) {
    using T = decltype(tag);
    const T* w = weights_.recurrent_kernel.value.data<T>();
    T *zr = u_zr_.data<T>(), *hh = u_h_.data<T>();
    for (std::int64_t i = 0; i < u; ++i)
      for (std::int64_t j = 0; j < 3 * u; ++j) {
        if (j < 2 * u) zr[i * 2 * u + j] = w[i * 3 * u + j];
        else hh[i * u + j - 2 * u] = w[i * 3 * u + j];
      }
  });
}

void GRU::step_forward_reset_before(std::int64_t t) {
  const std::int64_t u = options_.units, batch = batch_;
  const Tensor hin = recurrent_input(t);
  // hz_ rows of this step: columns [0, 2u) take h_prev @ U_zr, [2u, 3u) (r * h_prev) @ U_h.
  Tensor zr_part = Tensor({batch, 2 * u}, dtype_, xt_.device()), h_part = Tensor({batch, u}, dtype_, xt_.device());
  ops::gemm(hin, false, u_zr_, false, zr_part);
  Tensor xz = step_rows(xz_, t), g = step_rows(gates_buf_, t), rh = step_rows(rh_, t), h = step_rows(h_, t + 1);
  const Tensor h_prev = step_rows(h_, t);
  dispatch_floating(dtype_, "gru", [&](auto tag) {
    using T = decltype(tag);
    const T *x = xz.data<T>(), *p = zr_part.data<T>(), *in = hin.data<T>();
    T *gates = g.data<T>(), *r_h = rh.data<T>();
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t j = 0; j < u; ++j) {
        const T z = T(1) / (T(1) + std::exp(-(x[b * 3 * u + j] + p[b * 2 * u + j])));
        const T r = T(1) / (T(1) + std::exp(-(x[b * 3 * u + u + j] + p[b * 2 * u + u + j])));
        gates[b * 3 * u + j] = z;
        gates[b * 3 * u + u + j] = r;
        r_h[b * u + j] = r * in[b * u + j];
      }
  });
  ops::gemm(rh, false, u_h_, false, h_part);
  dispatch_floating(dtype_, "gru", [&](auto tag) {
    using T = decltype(tag);
    const T *x = xz.data<T>(), *q = h_part.data<T>(), *prev = h_prev.data<T>();
    T *gates = g.data<T>(), *out = h.data<T>();
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t j = 0; j < u; ++j) {
        const T hh = std::tanh(x[b * 3 * u + 2 * u + j] + q[b * u + j]);
        const T z = gates[b * 3 * u + j];
        gates[b * 3 * u + 2 * u + j] = hh;
        out[b * u + j] = z * prev[b * u + j] + (T(1) - z) * hh;
      }
  });
}

void GRU::step_backward_reset_before(std::int64_t t) {
  const std::int64_t u = options_.units, batch = batch_;
  if (t + 1 == steps_) {
    ensure_buffer(dx_gates_, xz_.shape(), dtype_, xt_.device());
    ensure_buffer(dh_gates_, xz_.shape(), dtype_, xt_.device());
    dxz_ = dx_gates_;
    dhz_ = dh_gates_;
  }
  ensure_buffer(drh_, {batch, u}, dtype_, xt_.device());
  ensure_buffer(dh_through_, {batch, u}, dtype_, xt_.device());
  Tensor dx = step_rows(dxz_, t), dhz = step_rows(dhz_, t);
  const Tensor g = step_rows(gates_buf_, t), h_prev = step_rows(h_, t), dh = step_rows(dh_, t);
  const Tensor hin = recurrent_input(t);
  // dL/d(hh pre-activation): the h columns of dx; dL/d(r * h_prev) = that @ U_h^T.
  dispatch_floating(dtype_, "gru", [&](auto tag) {
    using T = decltype(tag);
    const T *gates = g.data<T>(), *d = dh.data<T>();
    T* out = dx.data<T>();
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t j = 0; j < u; ++j) {
        const T z = gates[b * 3 * u + j], hh = gates[b * 3 * u + 2 * u + j];
        out[b * 3 * u + 2 * u + j] = d[b * u + j] * (T(1) - z) * (T(1) - hh * hh);
      }
  });
  {
    // dL/d(r * h_prev) = dhh_pre @ U_h^T.
    Tensor dhh({batch, u}, dtype_, xt_.device());
    dispatch_floating(dtype_, "gru", [&](auto tag) {
      using T = decltype(tag);
      const T* src = dx.data<T>();
      T* dst = dhh.data<T>();
      for (std::int64_t b = 0; b < batch; ++b)
        for (std::int64_t j = 0; j < u; ++j) dst[b * u + j] = src[b * 3 * u + 2 * u + j];
    });
    ops::gemm(dhh, false, u_h_, true, drh_);
  }
  dispatch_floating(dtype_, "gru", [&](auto tag) {
    using T = decltype(tag);
    const T *gates = g.data<T>(), *d = dh.data<T>(), *prev = h_prev.data<T>(), *in = hin.data<T>(),
            *drh = drh_.data<T>();
    T *out = dx.data<T>(), *rec = dhz.data<T>(), *through = dh_through_.data<T>();
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t j = 0; j < u; ++j) {
        const std::int64_t k = b * 3 * u + j;
        const T z = gates[k], r = gates[k + u], hh = gates[k + 2 * u];
        const T dz = d[b * u + j] * (prev[b * u + j] - hh) * z * (T(1) - z);
        const T dr = drh[b * u + j] * in[b * u + j] * r * (T(1) - r);
        out[k] = dz;
        out[k + u] = dr;
        // The z, r columns go through the generic h_prev @ U; the h columns' recurrent term is
        // (r * h_prev) @ U_h: added by add_cell_weight_gradients and below.
        rec[k] = dz;
        rec[k + u] = dr;
        rec[k + 2 * u] = T(0);
        through[b * u + j] = drh[b * u + j] * r;  // dL/d(recurrent input) through r * h_prev
      }
  });
  if (t == 0) return;
  Tensor dh_prev = step_rows(dh_, t - 1);
  const bool dropped = recurrent_dropped();
  dispatch_floating(dtype_, "gru", [&](auto tag) {
    using T = decltype(tag);
    const T *gates = g.data<T>(), *d = dh.data<T>(), *through = dh_through_.data<T>();
    const T* mask = dropped ? recurrent_mask().data<T>() : nullptr;
    T* acc = dh_prev.data<T>();
    for (std::int64_t i = 0; i < batch * u; ++i) {
      const std::int64_t b = i / u, j = i % u;
      acc[i] += (mask != nullptr ? through[i] * mask[i] : through[i]) + d[i] * gates[b * 3 * u + j];  // + dh * z
    }
  });
}

void GRU::add_cell_weight_gradients() {
  if (options_.reset_after) return;
  // dL/dU_h = sum over steps of (r * h_prev)^T @ dL/d(hh pre-activation).
  const std::int64_t u = options_.units, n = steps_ * batch_;
  Tensor dhh({n, u}, dtype_, xt_.device()), grad({u, u}, dtype_, xt_.device());
  dispatch_floating(dtype_, "gru", [&](auto tag) {
    using T = decltype(tag);
    const T* src = dxz_.data<T>();
    T* dst = dhh.data<T>();
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < u; ++j) dst[i * u + j] = src[i * 3 * u + 2 * u + j];
  });
  ops::gemm(rh_, true, dhh, false, grad);
  dispatch_floating(dtype_, "gru", [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad.data<T>();
    T* w = weights_.recurrent_kernel.grad.data<T>();
    for (std::int64_t i = 0; i < u; ++i)
      for (std::int64_t j = 0; j < u; ++j) w[i * 3 * u + 2 * u + j] += g[i * u + j];
  });
}

void GRU::step_forward(std::int64_t t) {
  if (!options_.reset_after) return step_forward_reset_before(t);
  Tensor hz = step_rows(hz_, t), g = step_rows(gates_buf_, t), h = step_rows(h_, t + 1);
  ops::gemm(recurrent_input(t), false, weights_.recurrent_kernel.value, false, hz);
  if (options_.use_bias) ops::bias_activation(hz, weights_.bias.value.rows(1, 2).reshape({-1}), Activation::Linear, hz);
  ops::gru_step_forward(step_rows(xz_, t), hz, step_rows(h_, t), g, h);
}

void GRU::step_backward(std::int64_t t) {
  if (!options_.reset_after) return step_backward_reset_before(t);
  if (t + 1 == steps_) {
    ensure_buffer(dx_gates_, xz_.shape(), dtype_, xt_.device());
    ensure_buffer(dh_gates_, xz_.shape(), dtype_, xt_.device());
    dxz_ = dx_gates_;
    dhz_ = dh_gates_;
  }
  Tensor dx = step_rows(dxz_, t), dhz = step_rows(dhz_, t);
  Tensor dh_prev = t > 0 ? step_rows(dh_, t - 1) : dh_initial_;  // dh_initial_: defined when dL/dh_0 is wanted
  ops::gru_step_backward(step_rows(gates_buf_, t), step_rows(hz_, t), step_rows(h_, t), step_rows(dh_, t), dx, dhz,
                         dh_prev);
}

std::unique_ptr<Layer> GRU::clone() const {
  auto copy = std::make_unique<GRU>(name_, options_);
  copy_weights_to(*copy);
  return copy;
}

Json GRU::config() const {
  Json c = RecurrentLayer::config();
  c.set("reset_after", options_.reset_after);
  return c;
}

std::unique_ptr<Layer> GRU::from_config(const Json& c) {
  return std::make_unique<GRU>(c.at("name").as_string(), options_from_config(c, "gru"));
}

}  // namespace mdtrain
