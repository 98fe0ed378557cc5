#include "mdtrain/nn/lstm.h"

#include <cmath>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/ops/ops.h"
#include "mdtrain/ops/recurrent.h"

namespace mdtrain {

namespace {

// The element-wise activations a gate may use (Keras names: linear, relu, sigmoid, tanh).
template <class T>
T activate(Activation a, T x) {
  switch (a) {
    case Activation::ReLU: return x > T(0) ? x : T(0);
    case Activation::Sigmoid: return T(1) / (T(1) + std::exp(-x));
    case Activation::Tanh: return std::tanh(x);
    default: return x;
  }
}

// d activate / dx at x, given y = activate(x).
template <class T>
T activate_grad(Activation a, T x, T y) {
  switch (a) {
    case Activation::ReLU: return x > T(0) ? T(1) : T(0);
    case Activation::Sigmoid: return y * (T(1) - y);
    case Activation::Tanh: return T(1) - y * y;
    default: return T(1);
  }
}

bool gate_activation(Activation a) {
  return a == Activation::Linear || a == Activation::ReLU || a == Activation::Sigmoid || a == Activation::Tanh;
}

}  // namespace

LSTM::LSTM(std::string name, Options options)
    : RecurrentLayer(std::move(name), std::move(options), "lstm", 4),
      activation_(parse_activation(options_.activation)),
      recurrent_activation_(parse_activation(options_.recurrent_activation)) {
  MDTRAIN_CHECK(gate_activation(activation_) && gate_activation(recurrent_activation_), std::invalid_argument,
                "[lstm] layer \"", name_, "\": activation=\"", options_.activation, "\", recurrent_activation=\"",
                options_.recurrent_activation, "\": only linear, relu, sigmoid and tanh are supported");
}

bool LSTM::keras_default_activations() const {
  return activation_ == Activation::Tanh && recurrent_activation_ == Activation::Sigmoid;
}

// Other activations: the same cell in plain loops (CPU devices). gates_buf_ keeps the activated
// gates; the pre-activations stay in xz_ until backward overwrites them row by row.
void LSTM::step_forward_any_activation(std::int64_t t) {
  MDTRAIN_CHECK(xt_.device().is_cpu(), std::invalid_argument, "[lstm] layer \"", name_,
                "\": activations other than tanh/sigmoid run on CPU devices only for now");
  const std::int64_t u = options_.units, batch = batch_;
  Tensor z = step_rows(xz_, t), g = step_rows(gates_buf_, t), c = step_rows(c_, t + 1), h = step_rows(h_, t + 1);
  const Tensor c_prev = step_rows(c_, t);
  ops::gemm(recurrent_input(t), false, weights_.recurrent_kernel.value, false, z, 1.0, 1.0);
  dispatch_floating(dtype_, "lstm", [&](auto tag) {
    using T = decltype(tag);
    const T *zz = z.data<T>(), *cp = c_prev.data<T>();
    T *gg = g.data<T>(), *cc = c.data<T>(), *hh = h.data<T>();
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t j = 0; j < u; ++j) {
        const std::int64_t k = b * 4 * u + j;
        const T i = activate(recurrent_activation_, zz[k]), f = activate(recurrent_activation_, zz[k + u]);
        const T cg = activate(activation_, zz[k + 2 * u]), o = activate(recurrent_activation_, zz[k + 3 * u]);
        gg[k] = i;
        gg[k + u] = f;
        gg[k + 2 * u] = cg;
        gg[k + 3 * u] = o;
        cc[b * u + j] = f * cp[b * u + j] + i * cg;
        hh[b * u + j] = o * activate(activation_, cc[b * u + j]);
      }
  });
}

void LSTM::step_backward_any_activation(std::int64_t t) {
  const std::int64_t u = options_.units, batch = batch_;
  Tensor dz = step_rows(dxz_, t);  // also xz_'s rows: the pre-activations, read before written
  const Tensor g = step_rows(gates_buf_, t), c_prev = step_rows(c_, t), c = step_rows(c_, t + 1),
               dh = step_rows(dh_, t);
  dispatch_floating(dtype_, "lstm", [&](auto tag) {
    using T = decltype(tag);
    const T *gg = g.data<T>(), *cp = c_prev.data<T>(), *cc = c.data<T>(), *d = dh.data<T>();
    T *zz = dz.data<T>(), *dc = dc_.data<T>();
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t j = 0; j < u; ++j) {
        const std::int64_t k = b * 4 * u + j, m = b * u + j;
        const T i = gg[k], f = gg[k + u], cg = gg[k + 2 * u], o = gg[k + 3 * u];
        const T ac = activate(activation_, cc[m]);
        const T dct = dc[m] + d[m] * o * activate_grad(activation_, cc[m], ac);
        const T zi = zz[k], zf = zz[k + u], zc = zz[k + 2 * u], zo = zz[k + 3 * u];
        zz[k] = dct * cg * activate_grad(recurrent_activation_, zi, i);
        zz[k + u] = dct * cp[m] * activate_grad(recurrent_activation_, zf, f);
        zz[k + 2 * u] = dct * i * activate_grad(activation_, zc, cg);
        zz[k + 3 * u] = d[m] * ac * activate_grad(recurrent_activation_, zo, o);
        dc[m] = dct * f;
      }
  });
}

void LSTM::init_bias(Tensor& bias) {
  // Keras: concat(bias_initializer(u), ones(u), bias_initializer(2u)).
  if (options_.unit_forget_bias) bias.reshape({4, options_.units}).rows(1, 2).fill(1.0);
}

void LSTM::ensure_cell_buffers(std::int64_t rows) {
  ensure_buffer(gates_buf_, {rows, 4 * options_.units}, dtype_, xt_.device());
  ensure_buffer(c_, {rows + batch_, options_.units}, dtype_, xt_.device());
  c_.rows(0, batch_).fill(0.0);
}

void LSTM::step_forward(std::int64_t t) {
  if (!keras_default_activations()) return step_forward_any_activation(t);
  Tensor z = step_rows(xz_, t), g = step_rows(gates_buf_, t), c = step_rows(c_, t + 1), h = step_rows(h_, t + 1);
  ops::gemm(recurrent_input(t), false, weights_.recurrent_kernel.value, false, z, 1.0, 1.0);
  ops::lstm_step_forward(z, step_rows(c_, t), g, c, h);
}

void LSTM::begin_backward_steps() {
  // The projections are no longer needed: their rows take dL/dz (one buffer for both parts).
  dxz_ = xz_;
  dhz_ = xz_;
  // dL/dc of the last step: the final state's gradient when one is given (before a masked last
  // step puts it aside in hold_cell_gradient).
  ensure_buffer(dc_, {batch_, options_.units}, dtype_, xt_.device());
  if (final_state_grad_.size() > 1 && final_state_grad_[1].defined()) dc_.copy_from(final_state_grad_[1]);
  else dc_.fill(0.0);
}

void LSTM::step_backward(std::int64_t t) {
  if (!keras_default_activations()) return step_backward_any_activation(t);
  Tensor dz = step_rows(dxz_, t);
  ops::lstm_step_backward(step_rows(gates_buf_, t), step_rows(c_, t), step_rows(c_, t + 1), step_rows(dh_, t), dc_, dz);
}

void LSTM::load_initial_cell_state(const std::vector<Tensor>& states) { c_.rows(0, batch_).copy_from(states[1]); }

void LSTM::append_final_cell_state(std::vector<Tensor>& states) const {
  const std::int64_t n = batch_ * steps_;
  states.push_back(c_.rows(n, n + batch_));
}

// After step_backward(0), dc_ holds dL/dc_0.
void LSTM::append_initial_cell_gradient(std::vector<Tensor>& grads) const { grads.push_back(dc_); }
void LSTM::carry_cell_state(std::int64_t /*t*/, std::int64_t row) {
  c_.rows(row + batch_, row + batch_ + 1).copy_from(c_.rows(row, row + 1));
}

void LSTM::hold_cell_gradient(std::int64_t row, bool hold) {
  // dc_ holds dL/dc of the current step for every sequence: a masked one's passes the step as is.
  const std::int64_t b = row % batch_;
  if (hold) {
    ensure_buffer(held_dc_, {batch_, options_.units}, dtype_, xt_.device());
    held_dc_.rows(b, b + 1).copy_from(dc_.rows(b, b + 1));
    dc_.rows(b, b + 1).fill(0.0);
  } else {
    dc_.rows(b, b + 1).copy_from(held_dc_.rows(b, b + 1));
  }
}

std::unique_ptr<Layer> LSTM::clone() const {
  auto copy = std::make_unique<LSTM>(name_, options_);
  copy_weights_to(*copy);
  return copy;
}

Json LSTM::config() const {
  Json c = RecurrentLayer::config();
  c.set("unit_forget_bias", options_.unit_forget_bias);
  return c;
}

std::unique_ptr<Layer> LSTM::from_config(const Json& c) {
  return std::make_unique<LSTM>(c.at("name").as_string(), options_from_config(c, "lstm"));
}

}  // namespace mdtrain
