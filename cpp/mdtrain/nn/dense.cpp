#include "mdtrain/nn/dense.h"

#include "mdtrain/ops/accumulate.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {

Dense::Dense(std::string name, Options options)
    : Layer(std::move(name)), options_(std::move(options)), activation_(parse_activation(options_.activation)) {
  MDTRAIN_CHECK(options_.units > 0, std::invalid_argument, "[dense] layer \"", name_,
                "\": units must be a positive integer, got ", options_.units);
  make_initializer(options_.kernel_initializer);  // validate names now, not at build time
  make_initializer(options_.bias_initializer);
  weights_.kernel_regularizer = make_regularizer(options_.kernel_regularizer);
  weights_.bias_regularizer = make_regularizer(options_.bias_regularizer);
}

Shape Dense::compute_output_shape(const Shape& input_shape) const {
  MDTRAIN_CHECK(!input_shape.empty(), std::invalid_argument, "[dense] layer \"", name_,
                "\" needs inputs of rank >= 2 (batch, features), got input shape (batch,)");
  require_known_dim(input_shape, -1, "the kernel's rows");
  Shape out = input_shape;
  out.back() = options_.units;
  return out;
}

void Dense::build_weights(const Shape& input_shape, std::uint64_t seed) {
  const std::int64_t in = input_shape.back(), units = options_.units;
  Rng rng(seed, 0);
  weights_.kernel = Parameter(name_ + "/kernel", Tensor({in, units}, dtype_));
  make_initializer(options_.kernel_initializer)->fill(weights_.kernel.value, in, units, rng);
  if (options_.use_bias) {
    weights_.bias = Parameter(name_ + "/bias", Tensor({units}, dtype_));
    Rng bias_rng(seed, 1);
    make_initializer(options_.bias_initializer)->fill(weights_.bias.value, units, 0, bias_rng);
  }
}

Tensor Dense::forward(const Tensor& x, const ForwardContext&) {
  check_input(x);
  const std::int64_t in = input_shape_.back(), units = options_.units;
  last_input_shape_ = x.shape();
  x_ = x.reshape({-1, in});
  const std::int64_t rows = x_.dim(0);
  ensure_buffer(y_, {rows, units}, dtype_, x.device());
  // z = x @ kernel + bias stays for GELU's gradient and as the logits of softmax/sigmoid;
  // otherwise the output buffer holds it on its way to y.
  const bool keep = keeps_preactivation(activation_);
  if (keep) ensure_buffer(z_, {rows, units}, dtype_, x.device());
  Tensor& z = keep ? z_ : y_;
  ops::gemm(x_, false, weights_.kernel.value, false, z);
  weights_.add_bias_and_activate(z, options_.use_bias, activation_, keep, y_);
  Shape out = last_input_shape_;
  out.back() = units;
  return y_.reshape(out);
}

Tensor Dense::logits() const {
  MDTRAIN_CHECK(keeps_preactivation(activation_), std::logic_error, "[dense] layer \"", name_,
                "\" keeps no logits for activation ", name_of(activation_));
  Shape out = last_input_shape_;
  out.back() = options_.units;
  return z_.reshape(out);
}

Tensor Dense::backward(const Tensor& dy, bool need_input_grad) {
  Tensor dy2 = dy.reshape({-1, options_.units});
  if (activation_ == Activation::Linear) return backward_preactivation(dy2, need_input_grad);
  ensure_buffer(dz_, dy2.shape(), dtype_, dy2.device());
  ops::activation_backward(activation_, z_, y_, dy2, dz_);
  return backward_preactivation(dz_, need_input_grad);
}

Tensor Dense::backward_from_logits(const Tensor& dlogits, bool need_input_grad) {
  return backward_preactivation(dlogits.reshape({-1, options_.units}), need_input_grad);
}

Tensor Dense::backward_preactivation(const Tensor& dz, bool need_input_grad) {
  // Accumulating: the GEMM adds x^T dz, summed over this call's rows, to the gradient (beta = 1).
  // The bias's column sums go to a scratch first and are then added, so that, as for the kernel, one
  // addition per element joins this call's gradient to the sum (sum_rows with beta = 1 would add the
  // rows one by one into it).
  ops::gemm(x_, true, dz, false, weights_.kernel.grad, 1.0, accumulate_gradients_ ? 1.0 : 0.0);
  if (options_.use_bias) {
    if (accumulate_gradients_) {
      ensure_buffer(dbias_, weights_.bias.grad.shape(), dtype_, dz.device());
      ops::sum_rows(dz, dbias_);
      ops::add_into(weights_.bias.grad, dbias_);
    } else {
      ops::sum_rows(dz, weights_.bias.grad);
    }
  }
  if (!need_input_grad) return Tensor();
  ensure_buffer(dx_, x_.shape(), dtype_, x_.device());
  ops::gemm(dz, false, weights_.kernel.value, true, dx_);
  return dx_.reshape(last_input_shape_);
}

std::vector<Parameter*> Dense::parameters() { return weights_.parameters(built_, options_.use_bias); }

double Dense::regularization_loss() const { return weights_.regularization_loss(built_, options_.use_bias); }

void Dense::add_regularization_gradients() { weights_.add_regularization_gradients(options_.use_bias); }

std::unique_ptr<Layer> Dense::clone() const {
  auto copy = std::make_unique<Dense>(name_, options_);
  copy->copy_build_state(*this);
  copy->weights_.copy_values_from(weights_, built_, options_.use_bias);
  return copy;
}

Json Dense::config() const {
  Json c = Layer::config();
  c.set("units", options_.units);
  weights_.write_config(c, activation_, options_);
  return c;
}

std::unique_ptr<Layer> Dense::with_output_share(int shards, bool drop_activation) const {
  Json c = config();
  c.set("units", c.at("units").as_int() / shards);
  if (drop_activation) c.set("activation", "linear");
  return from_config(c);
}

std::unique_ptr<Layer> Dense::from_config(const Json& c) {
  Options o;
  o.units = c.at("units").as_int();
  read_kernel_bias_config(c, o);
  return std::make_unique<Dense>(c.at("name").as_string(), o);
}

}  // namespace mdtrain
