#include "mdtrain/nn/tensor_parallel/row_parallel_dense.h"

#include "mdtrain/nn/kernel_bias.h"
#include "mdtrain/nn/tensor_parallel/dim_slices.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {

namespace {
Json inner_config(const Json& c) {
  Json inner = c;
  inner.set("activation", "linear");
  inner.set("use_bias", false);
  inner.set("bias_regularizer", Json());
  return inner;
}
}  // namespace

RowParallelDense::RowParallelDense(const Json& dense_config, ShardGroup* group, bool input_split)
    : Layer(dense_config.at("name").as_string()),
      config_(dense_config),
      group_(group),
      input_split_(input_split),
      units_(dense_config.at("units").as_int()),
      use_bias_(dense_config.get("use_bias", true).as_bool()),
      activation_(parse_activation(dense_config.get("activation", "linear").as_string())),
      bias_regularizer_(make_regularizer(dense_config.get("bias_regularizer", Json()))) {
  MDTRAIN_CHECK(group_ != nullptr, std::invalid_argument, "[tensor_parallel] layer \"", name_,
                "\" needs a shard group");
  std::unique_ptr<Layer> inner = Dense::from_config(inner_config(config_));
  inner_.reset(static_cast<Dense*>(inner.release()));
}

Shape RowParallelDense::compute_output_shape(const Shape& input_shape) const {
  MDTRAIN_CHECK(!input_shape.empty(), std::invalid_argument, "[dense] layer \"", name_,
                "\" needs inputs of rank >= 2 (batch, features), got input shape (batch,)");
  Shape out = input_shape;
  out.back() = units_;
  return out;
}

void RowParallelDense::build_weights(const Shape& input_shape, std::uint64_t seed) {
  Shape piece = input_shape;
  if (!input_split_) {
    MDTRAIN_CHECK(piece.back() % group_->size() == 0, std::invalid_argument, "[model_parallel] layer \"", name_,
                  "\": ", piece.back(), " input features cannot be split into ", group_->size(), " shards");
    piece.back() /= group_->size();
  }
  inner_->build(piece, seed, dtype_);
  if (use_bias_) bias_ = Parameter(name_ + "/bias", Tensor::zeros({units_}, dtype_));
}

Tensor RowParallelDense::forward(const Tensor& x, const ForwardContext& ctx) {
  check_input(x);
  Tensor in = x;
  last_output_shape_ = x.shape();
  last_output_shape_.back() = units_;
  if (!input_split_) {
    Shape piece = x.shape();
    piece.back() /= group_->size();
    ensure_buffer(x_piece_, piece, dtype_, x.device());
    copy_piece_out(x, x.ndim() - 1, group_->rank(), group_->size(), x_piece_);
    in = x_piece_;
  }
  Tensor partial = inner_->forward(in, ctx);
  ensure_buffer(z_, {partial.numel() / units_, units_}, dtype_, x.device());
  z_.copy_from(partial.reshape(z_.shape()));
  group_->sum(z_);
  // The bias once, after the sum; then the activation (z kept when its gradient or the logits
  // need it), as KernelBias does for the unsharded layer.
  const Tensor no_bias;
  const Tensor& b = use_bias_ ? bias_.value : no_bias;
  ensure_buffer(y_, z_.shape(), dtype_, x.device());
  if (keeps_preactivation(activation_)) {
    ops::bias_activation(z_, b, Activation::Linear, z_);
    ops::bias_activation(z_, no_bias, activation_, y_);
  } else {
    ops::bias_activation(z_, b, activation_, y_);
  }
  return y_.reshape(last_output_shape_);
}

Tensor RowParallelDense::logits() const {
  MDTRAIN_CHECK(keeps_preactivation(activation_), std::logic_error, "[dense] layer \"", name_,
                "\" keeps no logits for activation ", name_of(activation_));
  return z_.reshape(last_output_shape_);
}

Tensor RowParallelDense::backward(const Tensor& dy, bool need_input_grad) {
  Tensor dy2 = dy.reshape({-1, units_});
  if (activation_ == Activation::Linear) return backward_preactivation(dy2, need_input_grad);
  ensure_buffer(dz_, dy2.shape(), dtype_, dy2.device());
  ops::activation_backward(activation_, z_, y_, dy2, dz_);
  return backward_preactivation(dz_, need_input_grad);
}

Tensor RowParallelDense::backward_from_logits(const Tensor& dlogits, bool need_input_grad) {
  return backward_preactivation(dlogits.reshape({-1, units_}), need_input_grad);
}

Tensor RowParallelDense::backward_preactivation(const Tensor& dz, bool need_input_grad) {
  // dz is the same on every shard (it follows the summed output), so the bias gradient is too.
  if (use_bias_) ops::sum_rows(dz, bias_.grad);
  Tensor dx = inner_->backward(dz, need_input_grad);
  if (!need_input_grad || input_split_) return dx;
  const int n = group_->size();
  ensure_buffer(blocks_, {dx.numel() * n}, dtype_, dx.device());
  group_->all_gather(dx, blocks_);
  Shape whole = dx.shape();
  whole.back() *= n;
  ensure_buffer(dx_, whole, dtype_, dx.device());
  interleave_last_dim(blocks_, n, dx_);
  return dx_;
}

std::vector<Parameter*> RowParallelDense::parameters() {
  if (!built_) return {};
  std::vector<Parameter*> out = inner_->parameters();
  if (use_bias_) out.push_back(&bias_);
  return out;
}

double RowParallelDense::regularization_loss() const {
  double l = inner_->regularization_loss();
  if (bias_regularizer_ && built_ && use_bias_ && group_->rank() == 0) l += bias_regularizer_->loss(bias_.value);
  return l;
}

void RowParallelDense::add_regularization_gradients() {
  inner_->add_regularization_gradients();
  if (bias_regularizer_ && use_bias_) bias_regularizer_->add_gradient(bias_.value, bias_.grad);
}

std::unique_ptr<Layer> RowParallelDense::clone() const {
  auto copy = std::make_unique<RowParallelDense>(config_, group_, input_split_);
  copy->copy_build_state(*this);
  if (built_) {
    std::unique_ptr<Layer> inner = inner_->clone();
    copy->inner_.reset(static_cast<Dense*>(inner.release()));
    if (use_bias_) copy->bias_ = Parameter(bias_.name, bias_.value.clone());
  }
  return copy;
}

}  // namespace mdtrain
