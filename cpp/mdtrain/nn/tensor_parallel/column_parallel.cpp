#include "mdtrain/nn/tensor_parallel/column_parallel.h"

#include "mdtrain/nn/tensor_parallel/dim_slices.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {

ColumnParallel::ColumnParallel(std::unique_ptr<Layer> inner, ShardGroup* group, bool gather_output,
                               Activation activation)
    : Layer(inner->name()), inner_(std::move(inner)), group_(group), gather_(gather_output), activation_(activation) {
  MDTRAIN_CHECK(group_ != nullptr, std::invalid_argument, "[tensor_parallel] layer \"", name_,
                "\" needs a shard group");
  MDTRAIN_CHECK(gather_ || activation_ == Activation::Linear, std::invalid_argument, "[tensor_parallel] layer \"",
                name_, "\": an output that stays split takes its activation in the inner layer");
}

Shape ColumnParallel::compute_output_shape(const Shape& input_shape) const {
  Shape out = inner_->compute_output_shape(input_shape);
  if (gather_) out.back() *= group_->size();
  return out;
}

void ColumnParallel::build_weights(const Shape& input_shape, std::uint64_t seed) {
  inner_->build(input_shape, seed, dtype_);
}

Tensor ColumnParallel::forward(const Tensor& x, const ForwardContext& ctx) {
  Tensor piece = inner_->forward(x, ctx);
  if (!gather_) return piece;
  const int n = group_->size();
  ensure_buffer(blocks_, {piece.numel() * n}, dtype_, piece.device());
  group_->all_gather(piece, blocks_);
  Shape whole = piece.shape();
  whole.back() *= n;
  ensure_buffer(z_, whole, dtype_, piece.device());
  interleave_last_dim(blocks_, n, z_);
  if (activation_ == Activation::Linear) return z_;
  ensure_buffer(y_, whole, dtype_, piece.device());
  ops::bias_activation(z_, Tensor(), activation_, y_);
  return y_;
}

Activation ColumnParallel::output_activation() const { return gather_ ? activation_ : inner_->output_activation(); }

Tensor ColumnParallel::logits() const {
  if (!gather_) return inner_->logits();
  MDTRAIN_CHECK(activation_ != Activation::Linear, std::logic_error, "[tensor_parallel] layer \"", name_,
                "\" keeps no logits for activation linear");
  return z_;
}

Tensor ColumnParallel::backward(const Tensor& dy, bool need_input_grad) {
  if (!gather_) {
    Tensor dx = inner_->backward(dy, need_input_grad);
    if (need_input_grad) group_->sum(dx);
    return dx;
  }
  if (activation_ == Activation::Linear) return backward_split(dy.reshape(z_.shape()), need_input_grad);
  ensure_buffer(dz_, z_.shape(), dtype_, z_.device());
  ops::activation_backward(activation_, z_, y_, dy.reshape(z_.shape()), dz_);
  return backward_split(dz_, need_input_grad);
}

Tensor ColumnParallel::backward_from_logits(const Tensor& dlogits, bool need_input_grad) {
  if (!gather_) {
    Tensor dx = inner_->backward_from_logits(dlogits, need_input_grad);
    if (need_input_grad) group_->sum(dx);
    return dx;
  }
  return backward_split(dlogits.reshape(z_.shape()), need_input_grad);
}

Tensor ColumnParallel::backward_split(const Tensor& dz_whole, bool need_input_grad) {
  const int n = group_->size();
  Shape piece = dz_whole.shape();
  piece.back() /= n;
  ensure_buffer(dz_piece_, piece, dtype_, dz_whole.device());
  copy_piece_out(dz_whole, dz_whole.ndim() - 1, group_->rank(), n, dz_piece_);
  // The inner layer is linear here: its backward is that of its pre-activation.
  Tensor dx = inner_->backward(dz_piece_, need_input_grad);
  if (need_input_grad) group_->sum(dx);
  return dx;
}

std::unique_ptr<Layer> ColumnParallel::clone() const {
  auto copy = std::make_unique<ColumnParallel>(inner_->clone(), group_, gather_, activation_);
  copy->copy_build_state(*this);
  return copy;
}

}  // namespace mdtrain
