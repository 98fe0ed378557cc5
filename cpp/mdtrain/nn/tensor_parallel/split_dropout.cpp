#include "mdtrain/nn/tensor_parallel/split_dropout.h"

#include "mdtrain/ops/ops.h"

namespace mdtrain {

SplitDropout::SplitDropout(std::string name, double rate, std::uint64_t seed, std::int64_t whole_features,
                           std::int64_t offset)
    : Layer(std::move(name)), rate_(rate), seed_(seed), whole_features_(whole_features), offset_(offset) {
  MDTRAIN_CHECK(rate >= 0.0 && rate < 1.0, std::invalid_argument, "[dropout] layer \"", name_,
                "\": rate must be in [0, 1), got ", rate);
}

Tensor SplitDropout::forward(const Tensor& x, const ForwardContext& ctx) {
  check_input(x);
  applied_ = ctx.training && rate_ > 0.0;
  if (!applied_) return x;
  ensure_buffer(mask_, x.shape(), dtype_, x.device());
  ensure_buffer(y_, x.shape(), dtype_, x.device());
  // Runs of `piece` features: run q of this slice is run (first row's runs + q) of the global
  // batch, which starts at element run * whole_features + offset of the unsharded activation.
  const std::int64_t piece = x.dim(x.ndim() - 1), runs = piece ? x.numel() / piece : 0;
  const std::int64_t runs_per_row = x.dim(0) ? runs / x.dim(0) : 0;
  const Tensor x2 = x.reshape({runs, piece});
  Tensor m2 = mask_.reshape({runs, piece}), y2 = y_.reshape({runs, piece});
  const auto first_run = static_cast<std::uint64_t>(ctx.global_row_offset * runs_per_row);
  for (std::int64_t q = 0; q < runs; ++q) {
    Tensor m = m2.rows(q, q + 1), y = y2.rows(q, q + 1);
    const std::uint64_t first =
        (first_run + static_cast<std::uint64_t>(q)) * static_cast<std::uint64_t>(whole_features_) +
        static_cast<std::uint64_t>(offset_);
    ops::dropout(x2.rows(q, q + 1), rate_, seed_, ctx.step, first, m, y);
  }
  return y_;
}

Tensor SplitDropout::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  if (!applied_) return dy;
  ensure_buffer(dx_, mask_.shape(), dtype_, mask_.device());
  ops::multiply(dy.reshape(mask_.shape()), mask_, dx_);
  return dx_;
}

std::unique_ptr<Layer> SplitDropout::clone() const {
  auto copy = std::make_unique<SplitDropout>(name_, rate_, seed_, whole_features_, offset_);
  copy->copy_build_state(*this);
  return copy;
}

Json SplitDropout::config() const {
  Json c = Layer::config();
  c.set("rate", rate_);
  c.set("seed", static_cast<double>(seed_));
  return c;
}

}  // namespace mdtrain
