#include "mdtrain/nn/masked_steps.h"

#include <cstring>
#include <string>

#include "mdtrain/core/errors.h"
#include "mdtrain/nn/layer.h"
#include "mdtrain/nn/sequence_mask.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {

namespace {

void check_layout(const Tensor& y_true, const Tensor& y_pred, const Tensor& mask, const std::string& prefix) {
  MDTRAIN_CHECK(y_pred.ndim() == 3, std::invalid_argument, prefix,
                "an output that carries a mask must be (batch, timesteps, features), got ", to_string(y_pred.shape()));
  MDTRAIN_CHECK(mask.ndim() == 2 && mask.dim(0) == y_pred.dim(0) && mask.dim(1) == y_pred.dim(1), std::invalid_argument,
                prefix, "the mask ", to_string(mask.shape()), " is not (batch, timesteps) of the output ",
                to_string(y_pred.shape()));
  MDTRAIN_CHECK(y_true.ndim() >= 2 && y_true.dim(0) == y_pred.dim(0) && y_true.dim(1) == y_pred.dim(1),
                std::invalid_argument, prefix, "y_true ", to_string(y_true.shape()),
                " must have one target per (batch, timesteps) step of the masked output ", to_string(y_pred.shape()));
  MDTRAIN_CHECK(y_true.device().is_cpu() && y_pred.device().is_cpu() && mask.device().is_cpu(), std::invalid_argument,
                prefix, "masked losses and metrics run on CPU devices only for now");
}

// Rows positions[i] of `src` viewed as (batch * timesteps, rest...) into out (kept, rest...).
void gather_steps(const Tensor& src, const std::vector<std::int64_t>& positions, Tensor& out) {
  const std::int64_t steps = src.dim(0) * src.dim(1);
  Shape flat{steps};
  Shape kept{static_cast<std::int64_t>(positions.size())};
  for (int a = 2; a < src.ndim(); ++a) {
    flat.push_back(src.dim(a));
    kept.push_back(src.dim(a));
  }
  ensure_buffer(out, kept, src.dtype(), src.device());
  if (positions.empty()) return;
  ops::gather_rows(src.reshape(flat), positions.data(), static_cast<std::int64_t>(positions.size()), out);
}

}  // namespace

void MaskedSteps::gather(const Tensor& y_true, const Tensor& y_pred, const Tensor& mask) {
  const std::vector<std::uint8_t> keep = mask_to_bytes(mask);
  positions_.clear();
  for (std::size_t i = 0; i < keep.size(); ++i)
    if (keep[i]) positions_.push_back(static_cast<std::int64_t>(i));
  pred_shape_ = y_pred.shape();
  gather_steps(y_true, positions_, y_true_);
  gather_steps(y_pred, positions_, y_pred_);
}

void MaskedSteps::select(const Loss& loss, const Tensor& y_true, const Tensor& y_pred, const Tensor& mask) {
  loss.validate(y_true, y_pred);
  check_layout(y_true, y_pred, mask, "[loss] " + loss.name() + ": ");
  gather(y_true, y_pred, mask);
}

void MaskedSteps::select(const Tensor& y_true, const Tensor& y_pred, const Tensor& mask, const char* area) {
  check_layout(y_true, y_pred, mask, std::string("[") + area + "] ");
  gather(y_true, y_pred, mask);
}

std::int64_t MaskedSteps::count(const Loss& loss) const {
  if (positions_.empty()) return 0;
  return loss.sample_count(y_true_, y_pred_);
}

double MaskedSteps::forward_backward(const Loss& loss, double grad_scale, Tensor* dpred) {
  double sum = 0;
  if (!positions_.empty()) sum = loss.forward_backward(y_true_, y_pred_, grad_scale, dpred ? &dpred_ : nullptr);
  if (dpred == nullptr) return sum;
  ensure_buffer(*dpred, pred_shape_, y_pred_.dtype(), y_pred_.device());
  dpred->fill(0.0);
  const std::size_t row_bytes = static_cast<std::size_t>(pred_shape_[2]) * size_of(y_pred_.dtype());
  auto* out = static_cast<char*>(dpred->raw());
  const auto* in = static_cast<const char*>(dpred_.raw());
  for (std::size_t i = 0; i < positions_.size(); ++i)
    std::memcpy(out + static_cast<std::size_t>(positions_[i]) * row_bytes, in + i * row_bytes, row_bytes);
  return sum;
}

}  // namespace mdtrain
