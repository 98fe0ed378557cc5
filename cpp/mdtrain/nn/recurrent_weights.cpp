#include "mdtrain/nn/recurrent_weights.h"

#include "mdtrain/nn/layer.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {

RecurrentWeights::RecurrentWeights(bool use_bias_, const Json& kernel_regularizer, const Json& recurrent_regularizer,
                                   const Json& bias_regularizer)
    : use_bias(use_bias_),
      kernel_reg(make_regularizer(kernel_regularizer)),
      recurrent_reg(make_regularizer(recurrent_regularizer)),
      bias_reg(make_regularizer(bias_regularizer)) {}

std::vector<Parameter*> RecurrentWeights::parameters() {
  if (use_bias) return {&kernel, &recurrent_kernel, &bias};
  return {&kernel, &recurrent_kernel};
}

double RecurrentWeights::regularization_loss() const {
  double loss = 0.0;
  if (kernel_reg) loss += kernel_reg->loss(kernel.value);
  if (recurrent_reg) loss += recurrent_reg->loss(recurrent_kernel.value);
  if (bias_reg && use_bias) loss += bias_reg->loss(bias.value);
  return loss;
}

void RecurrentWeights::add_regularization_gradients() {
  if (kernel_reg) kernel_reg->add_gradient(kernel.value, kernel.grad);
  if (recurrent_reg) recurrent_reg->add_gradient(recurrent_kernel.value, recurrent_kernel.grad);
  if (bias_reg && use_bias) bias_reg->add_gradient(bias.value, bias.grad);
}

void RecurrentWeights::copy_values_to(RecurrentWeights& copy) const {
  copy.kernel = Parameter(kernel.name, kernel.value.clone());
  copy.recurrent_kernel = Parameter(recurrent_kernel.name, recurrent_kernel.value.clone());
  if (use_bias) copy.bias = Parameter(bias.name, bias.value.clone());
}

void RecurrentWeights::project_inputs(const Tensor& xt, Tensor& xz) const {
  ops::gemm(xt, false, kernel.value, false, xz);
  if (use_bias) ops::bias_activation(xz, input_bias(bias.value, kernel.value.dim(1)), Activation::Linear, xz);
}

void RecurrentWeights::set_gradients(const Tensor& xt, const Tensor& h_prev, const Tensor& dxz, const Tensor& dhz) {
  ops::gemm(xt, true, dxz, false, kernel.grad);
  ops::gemm(h_prev, true, dhz, false, recurrent_kernel.grad);
  if (!use_bias) return;
  Tensor input_grad = input_bias(bias.grad, kernel.value.dim(1));
  ops::sum_rows(dxz, input_grad);
  if (bias.grad.ndim() == 2) {
    Tensor recurrent_grad = bias.grad.rows(1, 2).reshape({-1});
    ops::sum_rows(dhz, recurrent_grad);
  }
}

void recurrent_time_major_order(std::int64_t batch, std::int64_t steps, bool go_backwards,
                                std::vector<std::int64_t>& to_time_major, std::vector<std::int64_t>& to_batch_major) {
  to_time_major.resize(static_cast<std::size_t>(batch * steps));
  to_batch_major.resize(static_cast<std::size_t>(batch * steps));
  for (std::int64_t t = 0; t < steps; ++t)
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t read = go_backwards ? steps - 1 - t : t;
      to_time_major[static_cast<std::size_t>(t * batch + b)] = b * steps + read;
      to_batch_major[static_cast<std::size_t>(b * steps + t)] = (t + 1) * batch + b;
    }
}

void recurrent_output_grad_time_major(const Tensor& dy, std::int64_t batch, std::int64_t steps, std::int64_t units,
                                      bool return_sequences, Tensor& dh) {
  const std::int64_t n = batch * steps;
  if (return_sequences) {
    std::vector<std::int64_t> from_output(static_cast<std::size_t>(n));
    for (std::int64_t t = 0; t < steps; ++t)
      for (std::int64_t b = 0; b < batch; ++b) from_output[static_cast<std::size_t>(t * batch + b)] = b * steps + t;
    ops::gather_rows(dy.reshape({n, units}), from_output.data(), n, dh);
  } else {
    dh.fill(0.0);
    dh.rows(n - batch, n).copy_from(dy.reshape({batch, units}));
  }
}

void recurrent_input_grad_batch_major(const Tensor& dxt, const std::vector<std::int64_t>& to_time_major, Tensor& dx) {
  // Input row b * steps + t' came from time-major row t * batch + b.
  const auto n = static_cast<std::int64_t>(to_time_major.size());
  std::vector<std::int64_t> from_time_major(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    from_time_major[static_cast<std::size_t>(to_time_major[static_cast<std::size_t>(i)])] = i;
  ops::gather_rows(dxt, from_time_major.data(), n, dx);
}

void draw_recurrent_dropout_mask(Tensor& mask, Tensor& scratch, double rate, std::uint64_t seed, std::uint64_t stream,
                                 std::int64_t first_row) {
  ensure_buffer(scratch, mask.shape(), mask.dtype(), mask.device());
  scratch.fill(1.0);
  Tensor ones_out = scratch;
  ops::dropout(scratch, rate, seed, stream, static_cast<std::uint64_t>(first_row * mask.dim(1)), mask, ones_out);
}

void multiply_each_step(Tensor& time_major, const Tensor& mask) {
  const std::int64_t batch = mask.dim(0), steps = time_major.dim(0) / batch;
  for (std::int64_t t = 0; t < steps; ++t) {
    Tensor rows = time_major.rows(t * batch, (t + 1) * batch);
    ops::multiply(rows, mask, rows);
  }
}

}  // namespace mdtrain
