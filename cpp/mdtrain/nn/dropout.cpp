#include "mdtrain/nn/dropout.h"

#include <cmath>

#include "mdtrain/core/rng.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {

Dropout::Dropout(std::string name, double rate, std::uint64_t seed) : Layer(std::move(name)), rate_(rate), seed_(seed) {
  MDTRAIN_CHECK(rate >= 0.0 && rate < 1.0, std::invalid_argument, "[dropout] layer \"", name_,
                "\": rate must be in [0, 1), got ", rate);
  MDTRAIN_CHECK(seed <= kMaxSeed, std::invalid_argument, "[dropout] layer \"", name_,
                "\": seed must be below 2^53, got ", seed);
}

Tensor Dropout::forward(const Tensor& x, const ForwardContext& ctx) {
  check_input(x);
  applied_ = ctx.training && rate_ > 0.0;
  if (!applied_) return x;
  ensure_buffer(mask_, x.shape(), dtype_, x.device());
  ensure_buffer(y_, x.shape(), dtype_, x.device());
  const auto first = static_cast<std::uint64_t>(ctx.global_row_offset * x.row_size());
  ops::dropout(x, rate_, seed_, ctx.step, first, mask_, y_);
  return y_;
}

Tensor Dropout::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  if (!applied_) return dy;
  ensure_buffer(dx_, mask_.shape(), dtype_, mask_.device());
  ops::multiply(dy.reshape(mask_.shape()), mask_, dx_);
  return dx_;
}

std::unique_ptr<Layer> Dropout::clone() const {
  auto copy = std::make_unique<Dropout>(name_, rate_, seed_);
  copy->copy_build_state(*this);
  return copy;
}

Json Dropout::config() const {
  Json c = Layer::config();
  c.set("rate", rate_);
  c.set("seed", static_cast<double>(seed_));
  return c;
}

std::unique_ptr<Layer> Dropout::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  // Checked before the conversion, which is undefined for negative or too large values; the
  // constructor then checks the 2^53 bound.
  const Json seed = c.get("seed", 0);
  const double s = seed.as_number();
  MDTRAIN_CHECK(s >= 0 && s < 18446744073709551616.0 && std::trunc(s) == s, std::invalid_argument, "[dropout] layer \"",
                name, "\": seed must be a non-negative integer below 2^53, got ", seed.dump());
  return std::make_unique<Dropout>(name, c.at("rate").as_number(), static_cast<std::uint64_t>(s));
}

}  // namespace mdtrain
