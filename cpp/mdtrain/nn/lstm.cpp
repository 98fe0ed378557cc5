#include "mdtrain/nn/lstm.h"

#include "mdtrain/nn/initializer.h"
#include "mdtrain/ops/ops.h"
#include "mdtrain/ops/recurrent.h"

namespace mdtrain {

namespace {

void refuse(const std::string& layer, const Json& c, const char* key, const Json& fine) {
  const Json v = c.get(key, fine);
  MDTRAIN_CHECK(v == fine, std::invalid_argument, "[lstm] layer \"", layer, "\": ", key, "=", v.dump(),
                " is not supported by mdtrain yet (only ", fine.dump(), ")");
}

}  // namespace

LSTM::LSTM(std::string name, Options options) : Layer(std::move(name)), options_(std::move(options)) {
  MDTRAIN_CHECK(options_.units > 0, std::invalid_argument, "[lstm] layer \"", name_,
                "\": units must be a positive integer, got ", options_.units);
  MDTRAIN_CHECK(parse_activation(options_.activation) == Activation::Tanh, std::invalid_argument, "[lstm] layer \"",
                name_, "\": activation=\"", options_.activation, "\" is not supported yet (only \"tanh\")");
  MDTRAIN_CHECK(parse_activation(options_.recurrent_activation) == Activation::Sigmoid, std::invalid_argument,
                "[lstm] layer \"", name_, "\": recurrent_activation=\"", options_.recurrent_activation,
                "\" is not supported yet (only \"sigmoid\")");
  make_initializer(options_.kernel_initializer);  // validate names now, not at build time
  make_initializer(options_.recurrent_initializer);
  make_initializer(options_.bias_initializer);
  kernel_reg_ = make_regularizer(options_.kernel_regularizer);
  recurrent_reg_ = make_regularizer(options_.recurrent_regularizer);
  bias_reg_ = make_regularizer(options_.bias_regularizer);
}

Shape LSTM::compute_output_shape(const Shape& s) const {
  if (s.size() != 2) {
    Shape full{-1};
    full.insert(full.end(), s.begin(), s.end());
    fail<std::invalid_argument>("[lstm] Input 0 of layer \"", name_,
                                "\" is incompatible with the layer: expected ndim=3 (batch, timesteps, features), "
                                "found ndim=",
                                full.size(), ". Full shape received: ", to_string(full));
  }
  MDTRAIN_CHECK(s[0] >= 1 && s[1] >= 1, std::invalid_argument, "[lstm] layer \"", name_,
                "\" needs at least one timestep and one feature, got input shape ", to_string(s));
  if (options_.return_sequences) return {s[0], options_.units};
  return {options_.units};
}

void LSTM::build_weights(const Shape& input_shape, std::uint64_t seed) {
  const std::int64_t in = input_shape[1], u = options_.units;
  Rng rng(seed, 0), recurrent_rng(seed, 1), bias_rng(seed, 2);
  kernel_ = Parameter(name_ + "/kernel", Tensor({in, 4 * u}, dtype_));
  make_initializer(options_.kernel_initializer)->fill(kernel_.value, in, 4 * u, rng);
  recurrent_kernel_ = Parameter(name_ + "/recurrent_kernel", Tensor({u, 4 * u}, dtype_));
  make_initializer(options_.recurrent_initializer)->fill(recurrent_kernel_.value, u, 4 * u, recurrent_rng);
  if (!options_.use_bias) return;
  bias_ = Parameter(name_ + "/bias", Tensor({4 * u}, dtype_));
  make_initializer(options_.bias_initializer)->fill(bias_.value, 4 * u, 0, bias_rng);
  if (options_.unit_forget_bias) {
    // Keras: concat(bias_initializer(u), ones(u), bias_initializer(2u)).
    Tensor gates = bias_.value.reshape({4, u});
    Tensor forget = gates.rows(1, 2);
    forget.fill(1.0);
  }
}

Tensor LSTM::forward(const Tensor& x, const ForwardContext&) {
  check_input(x);
  const std::int64_t batch = x.dim(0), steps = input_shape_[0], in = input_shape_[1], u = options_.units;
  const Device& dev = x.device();
  if (batch != batch_ || steps != steps_) {
    batch_ = batch;
    steps_ = steps;
    // Row t * batch + b of the time-major layout is row b * steps + t' of the input, t' the t-th
    // step read (reversed with go_backwards); outputs come back in reading order, as Keras's.
    to_time_major_.resize(static_cast<std::size_t>(batch * steps));
    to_batch_major_.resize(static_cast<std::size_t>(batch * steps));
    for (std::int64_t t = 0; t < steps; ++t)
      for (std::int64_t b = 0; b < batch; ++b) {
        const std::int64_t read = options_.go_backwards ? steps - 1 - t : t;
        to_time_major_[static_cast<std::size_t>(t * batch + b)] = b * steps + read;
        to_batch_major_[static_cast<std::size_t>(b * steps + t)] = (t + 1) * batch + b;  // rows of h_ (step t+1)
      }
  }
  const std::int64_t n = batch * steps;
  ensure_buffer(xt_, {n, in}, dtype_, dev);
  ensure_buffer(z_, {n, 4 * u}, dtype_, dev);
  ensure_buffer(gates_, {n, 4 * u}, dtype_, dev);
  ensure_buffer(c_, {n + batch, u}, dtype_, dev);
  ensure_buffer(h_, {n + batch, u}, dtype_, dev);
  ops::gather_rows(x.reshape({n, in}), to_time_major_.data(), n, xt_);
  ops::gemm(xt_, false, kernel_.value, false, z_);
  if (options_.use_bias) ops::bias_activation(z_, bias_.value, Activation::Linear, z_);
  c_.rows(0, batch).fill(0.0);
  h_.rows(0, batch).fill(0.0);
  for (std::int64_t t = 0; t < steps; ++t) {
    Tensor z = z_.rows(t * batch, (t + 1) * batch), g = gates_.rows(t * batch, (t + 1) * batch);
    Tensor c = c_.rows((t + 1) * batch, (t + 2) * batch), h = h_.rows((t + 1) * batch, (t + 2) * batch);
    ops::gemm(h_.rows(t * batch, (t + 1) * batch), false, recurrent_kernel_.value, false, z, 1.0, 1.0);
    ops::lstm_step_forward(z, c_.rows(t * batch, (t + 1) * batch), g, c, h);
  }
  if (!options_.return_sequences) return h_.rows(n, n + batch);
  ensure_buffer(y_, {n, u}, dtype_, dev);
  ops::gather_rows(h_, to_batch_major_.data(), n, y_);
  return y_.reshape({batch, steps, u});
}

Tensor LSTM::backward(const Tensor& dy, bool need_input_grad) {
  const std::int64_t batch = batch_, steps = steps_, n = batch * steps, in = input_shape_[1], u = options_.units;
  const Device& dev = xt_.device();
  // dh_: each step's dL/dh from the output, time-major.
  ensure_buffer(dh_, {n, u}, dtype_, dev);
  if (options_.return_sequences) {
    std::vector<std::int64_t> from_output(static_cast<std::size_t>(n));
    for (std::int64_t t = 0; t < steps; ++t)
      for (std::int64_t b = 0; b < batch; ++b) from_output[static_cast<std::size_t>(t * batch + b)] = b * steps + t;
    ops::gather_rows(dy.reshape({n, u}), from_output.data(), n, dh_);
  } else {
    dh_.fill(0.0);
    dh_.rows(n - batch, n).copy_from(dy.reshape({batch, u}));
  }
  ensure_buffer(dc_, {batch, u}, dtype_, dev);
  dc_.fill(0.0);
  for (std::int64_t t = steps; t-- > 0;) {
    Tensor dh = dh_.rows(t * batch, (t + 1) * batch), dz = z_.rows(t * batch, (t + 1) * batch);
    if (t + 1 < steps)
      ops::gemm(z_.rows((t + 1) * batch, (t + 2) * batch), false, recurrent_kernel_.value, true, dh, 1.0, 1.0);
    ops::lstm_step_backward(gates_.rows(t * batch, (t + 1) * batch), c_.rows(t * batch, (t + 1) * batch),
                            c_.rows((t + 1) * batch, (t + 2) * batch), dh, dc_, dz);
  }
  // z_ now holds dL/dz of every step.
  ops::gemm(xt_, true, z_, false, kernel_.grad);
  ops::gemm(h_.rows(0, n), true, z_, false, recurrent_kernel_.grad);
  if (options_.use_bias) ops::sum_rows(z_, bias_.grad);
  if (!need_input_grad) return Tensor();
  ensure_buffer(dxt_, {n, in}, dtype_, dev);
  ops::gemm(z_, false, kernel_.value, true, dxt_);
  // Back to batch-major: input row b * steps + t' came from time-major row t * batch + b.
  std::vector<std::int64_t> from_time_major(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    from_time_major[static_cast<std::size_t>(to_time_major_[static_cast<std::size_t>(i)])] = i;
  ensure_buffer(dx_, {n, in}, dtype_, dev);
  ops::gather_rows(dxt_, from_time_major.data(), n, dx_);
  return dx_.reshape({batch, steps, in});
}

std::vector<Parameter*> LSTM::parameters() {
  if (!built_) return {};
  if (options_.use_bias) return {&kernel_, &recurrent_kernel_, &bias_};
  return {&kernel_, &recurrent_kernel_};
}

double LSTM::regularization_loss() const {
  if (!built_) return 0.0;
  double loss = 0.0;
  if (kernel_reg_) loss += kernel_reg_->loss(kernel_.value);
  if (recurrent_reg_) loss += recurrent_reg_->loss(recurrent_kernel_.value);
  if (bias_reg_ && options_.use_bias) loss += bias_reg_->loss(bias_.value);
  return loss;
}

void LSTM::add_regularization_gradients() {
  if (!built_) return;
  if (kernel_reg_) kernel_reg_->add_gradient(kernel_.value, kernel_.grad);
  if (recurrent_reg_) recurrent_reg_->add_gradient(recurrent_kernel_.value, recurrent_kernel_.grad);
  if (bias_reg_ && options_.use_bias) bias_reg_->add_gradient(bias_.value, bias_.grad);
}

std::unique_ptr<Layer> LSTM::clone() const {
  auto copy = std::make_unique<LSTM>(name_, options_);
  copy->copy_build_state(*this);
  if (built_) {
    copy->kernel_ = Parameter(kernel_.name, kernel_.value.clone());
    copy->recurrent_kernel_ = Parameter(recurrent_kernel_.name, recurrent_kernel_.value.clone());
    if (options_.use_bias) copy->bias_ = Parameter(bias_.name, bias_.value.clone());
  }
  return copy;
}

Json LSTM::config() const {
  Json c = Layer::config();
  c.set("units", options_.units);
  c.set("activation", options_.activation);
  c.set("recurrent_activation", options_.recurrent_activation);
  c.set("use_bias", options_.use_bias);
  c.set("kernel_initializer", make_initializer(options_.kernel_initializer)->config());
  c.set("recurrent_initializer", make_initializer(options_.recurrent_initializer)->config());
  c.set("bias_initializer", make_initializer(options_.bias_initializer)->config());
  c.set("unit_forget_bias", options_.unit_forget_bias);
  c.set("kernel_regularizer", kernel_reg_ ? kernel_reg_->config() : Json());
  c.set("recurrent_regularizer", recurrent_reg_ ? recurrent_reg_->config() : Json());
  c.set("bias_regularizer", bias_reg_ ? bias_reg_->config() : Json());
  c.set("dropout", 0.0);
  c.set("recurrent_dropout", 0.0);
  c.set("return_sequences", options_.return_sequences);
  c.set("return_state", false);
  c.set("go_backwards", options_.go_backwards);
  c.set("stateful", false);
  c.set("unroll", false);
  return c;
}

std::unique_ptr<Layer> LSTM::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  refuse(name, c, "dropout", Json(0.0));
  refuse(name, c, "recurrent_dropout", Json(0.0));
  refuse(name, c, "return_state", Json(false));
  refuse(name, c, "stateful", Json(false));
  for (const char* key : {"kernel_constraint", "recurrent_constraint", "bias_constraint"}) refuse(name, c, key, Json());
  Options o;
  o.units = c.at("units").as_int();
  const Json act = c.get("activation", "tanh"), rec = c.get("recurrent_activation", "sigmoid");
  o.activation = act.is_null() ? "linear" : act.as_string();
  o.recurrent_activation = rec.is_null() ? "linear" : rec.as_string();
  o.use_bias = c.get("use_bias", true).as_bool();
  o.kernel_initializer = c.get("kernel_initializer", "glorot_uniform");
  o.recurrent_initializer = c.get("recurrent_initializer", "orthogonal");
  o.bias_initializer = c.get("bias_initializer", "zeros");
  o.unit_forget_bias = c.get("unit_forget_bias", true).as_bool();
  o.kernel_regularizer = c.get("kernel_regularizer", Json());
  o.recurrent_regularizer = c.get("recurrent_regularizer", Json());
  o.bias_regularizer = c.get("bias_regularizer", Json());
  o.return_sequences = c.get("return_sequences", false).as_bool();
  o.go_backwards = c.get("go_backwards", false).as_bool();
  return std::make_unique<LSTM>(name, o);
}

}  // namespace mdtrain
