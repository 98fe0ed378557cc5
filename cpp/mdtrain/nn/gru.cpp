#include "mdtrain/nn/gru.h"

#include "mdtrain/ops/ops.h"
#include "mdtrain/ops/recurrent.h"

namespace mdtrain {

GRU::GRU(std::string name, Options options) : RecurrentLayer(std::move(name), std::move(options), "gru", 3) {
  MDTRAIN_CHECK(options_.reset_after, std::invalid_argument, "[gru] layer \"", name_,
                "\": reset_after=false is not supported yet (only Keras's default, true)");
  MDTRAIN_CHECK(parse_activation(options_.activation) == Activation::Tanh, std::invalid_argument, "[gru] layer \"",
                name_, "\": activation=\"", options_.activation, "\" is not supported yet (only \"tanh\")");
  MDTRAIN_CHECK(parse_activation(options_.recurrent_activation) == Activation::Sigmoid, std::invalid_argument,
                "[gru] layer \"", name_, "\": recurrent_activation=\"", options_.recurrent_activation,
                "\" is not supported yet (only \"sigmoid\")");
}

void GRU::ensure_cell_buffers(std::int64_t rows) {
  ensure_buffer(hz_, {rows, 3 * options_.units}, dtype_, xt_.device());
  ensure_buffer(gates_buf_, {rows, 3 * options_.units}, dtype_, xt_.device());
}

void GRU::step_forward(std::int64_t t) {
  Tensor hz = step_rows(hz_, t), g = step_rows(gates_buf_, t), h = step_rows(h_, t + 1);
  ops::gemm(recurrent_input(t), false, recurrent_kernel_.value, false, hz);
  if (options_.use_bias) ops::bias_activation(hz, bias_.value.rows(1, 2).reshape({-1}), Activation::Linear, hz);
  ops::gru_step_forward(step_rows(xz_, t), hz, step_rows(h_, t), g, h);
}

void GRU::step_backward(std::int64_t t) {
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
