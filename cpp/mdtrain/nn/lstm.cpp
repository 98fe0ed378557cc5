#include "mdtrain/nn/lstm.h"

#include "mdtrain/ops/ops.h"
#include "mdtrain/ops/recurrent.h"

namespace mdtrain {

LSTM::LSTM(std::string name, Options options) : RecurrentLayer(std::move(name), std::move(options), "lstm", 4) {
  MDTRAIN_CHECK(parse_activation(options_.activation) == Activation::Tanh, std::invalid_argument, "[lstm] layer \"",
                name_, "\": activation=\"", options_.activation, "\" is not supported yet (only \"tanh\")");
  MDTRAIN_CHECK(parse_activation(options_.recurrent_activation) == Activation::Sigmoid, std::invalid_argument,
                "[lstm] layer \"", name_, "\": recurrent_activation=\"", options_.recurrent_activation,
                "\" is not supported yet (only \"sigmoid\")");
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
  Tensor z = step_rows(xz_, t), g = step_rows(gates_buf_, t), c = step_rows(c_, t + 1), h = step_rows(h_, t + 1);
  ops::gemm(recurrent_input(t), false, recurrent_kernel_.value, false, z, 1.0, 1.0);
  ops::lstm_step_forward(z, step_rows(c_, t), g, c, h);
}

void LSTM::step_backward(std::int64_t t) {
  if (t + 1 == steps_) {
    // The projections are no longer needed: their rows take dL/dz (one buffer for both parts).
    dxz_ = xz_;
    dhz_ = xz_;
    ensure_buffer(dc_, {batch_, options_.units}, dtype_, xt_.device());
    dc_.fill(0.0);
  }
  Tensor dz = step_rows(dxz_, t);
  ops::lstm_step_backward(step_rows(gates_buf_, t), step_rows(c_, t), step_rows(c_, t + 1), step_rows(dh_, t), dc_, dz);
}

void LSTM::carry_cell_state(std::int64_t /*t*/, std::int64_t row) {
  c_.rows(row + batch_, row + batch_ + 1).copy_from(c_.rows(row, row + 1));
}

void LSTM::hold_cell_gradient(std::int64_t row, bool hold) {
  // dc_ holds dL/dc of the current step for every sequence: a masked one's passes the step as is.
  const std::int64_t b = row % batch_;
  if (hold) {
    ensure_buffer(held_dc_, {batch_, options_.units}, dtype_, xt_.device());
    // The last step's dL/dc is zero (step_backward starts dc_ there).
    if (row / batch_ + 1 == steps_) {
      held_dc_.rows(b, b + 1).fill(0.0);
      return;
    }
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
