#include "mdtrain/nn/gaussian_dropout.h"

#include <cmath>

#include "mdtrain/core/rng.h"
#include "mdtrain/nn/noise_seed.h"
#include "mdtrain/ops/noise.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {

GaussianDropout::GaussianDropout(std::string name, double rate, std::uint64_t seed)
    : Layer(std::move(name)), rate_(rate), seed_(seed) {
  MDTRAIN_CHECK(rate >= 0.0 && rate <= 1.0, std::invalid_argument, "[layers] GaussianDropout layer \"", name_,
                "\": Invalid value received for argument `rate`. Expected a float value between 0 and 1. "
                "Received: rate=",
                rate);
  MDTRAIN_CHECK(rate < 1.0, std::invalid_argument, "[layers] GaussianDropout layer \"", name_,
                "\": rate=1 gives the noise an infinite standard deviation sqrt(rate / (1 - rate)); use a rate "
                "below 1");
  MDTRAIN_CHECK(seed <= kMaxSeed, std::invalid_argument, "[layers] GaussianDropout layer \"", name_,
                "\": seed must be below 2^53, got ", seed);
}

Tensor GaussianDropout::forward(const Tensor& x, const ForwardContext& ctx) {
  check_input(x);
  applied_ = ctx.training && rate_ > 0.0;
  if (!applied_) return x;
  ensure_buffer(multiplier_, x.shape(), dtype_, x.device());
  ensure_buffer(y_, x.shape(), dtype_, x.device());
  const auto first = static_cast<std::uint64_t>(ctx.global_row_offset * x.row_size());
  ops::gaussian_dropout(x, std::sqrt(rate_ / (1.0 - rate_)), seed_, ctx.step, first, multiplier_, y_);
  return y_;
}

Tensor GaussianDropout::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  if (!applied_) return dy;
  ensure_buffer(dx_, multiplier_.shape(), dtype_, multiplier_.device());
  ops::multiply(dy.reshape(multiplier_.shape()), multiplier_, dx_);
  return dx_;
}

std::unique_ptr<Layer> GaussianDropout::clone() const {
  auto copy = std::make_unique<GaussianDropout>(name_, rate_, seed_);
  copy->copy_build_state(*this);
  return copy;
}

Json GaussianDropout::config() const {
  Json c = Layer::config();
  c.set("rate", rate_);
  c.set("seed", static_cast<double>(seed_));
  return c;
}

std::unique_ptr<Layer> GaussianDropout::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  return std::make_unique<GaussianDropout>(name, c.at("rate").as_number(), noise_seed_from_config(c, name));
}

}  // namespace mdtrain
