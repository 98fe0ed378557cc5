#include "mdtrain/nn/gaussian_noise.h"

#include "mdtrain/core/rng.h"
#include "mdtrain/nn/noise_seed.h"
#include "mdtrain/ops/noise.h"

namespace mdtrain {

GaussianNoise::GaussianNoise(std::string name, double stddev, std::uint64_t seed)
    : Layer(std::move(name)), stddev_(stddev), seed_(seed) {
  MDTRAIN_CHECK(stddev >= 0.0 && stddev <= 1.0, std::invalid_argument, "[layers] GaussianNoise layer \"", name_,
                "\": Invalid value received for argument `stddev`. Expected a float value between 0 and 1. "
                "Received: stddev=",
                stddev);
  MDTRAIN_CHECK(seed <= kMaxSeed, std::invalid_argument, "[layers] GaussianNoise layer \"", name_,
                "\": seed must be below 2^53, got ", seed);
}

Tensor GaussianNoise::forward(const Tensor& x, const ForwardContext& ctx) {
  check_input(x);
  if (!ctx.training || stddev_ == 0.0) return x;
  ensure_buffer(y_, x.shape(), dtype_, x.device());
  const auto first = static_cast<std::uint64_t>(ctx.global_row_offset * x.row_size());
  ops::gaussian_noise(x, stddev_, seed_, ctx.step, first, y_);
  return y_;
}

Tensor GaussianNoise::backward(const Tensor& dy, bool need_input_grad) {
  return need_input_grad ? dy : Tensor();  // d(x + noise)/dx = 1
}

std::unique_ptr<Layer> GaussianNoise::clone() const {
  auto copy = std::make_unique<GaussianNoise>(name_, stddev_, seed_);
  copy->copy_build_state(*this);
  return copy;
}

Json GaussianNoise::config() const {
  Json c = Layer::config();
  c.set("stddev", stddev_);
  c.set("seed", static_cast<double>(seed_));
  return c;
}

std::unique_ptr<Layer> GaussianNoise::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  return std::make_unique<GaussianNoise>(name, c.at("stddev").as_number(), noise_seed_from_config(c, name));
}

}  // namespace mdtrain
