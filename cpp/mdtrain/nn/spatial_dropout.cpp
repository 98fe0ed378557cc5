#include "mdtrain/nn/spatial_dropout.h"

#include "mdtrain/core/rng.h"
#include "mdtrain/nn/noise_seed.h"
#include "mdtrain/nn/strided_view_layer.h"
#include "mdtrain/ops/noise.h"

namespace mdtrain {

SpatialDropout::SpatialDropout(std::string name, int spatial_rank, double rate, std::uint64_t seed)
    : Layer(std::move(name)), spatial_rank_(spatial_rank), rate_(rate), seed_(seed) {
  MDTRAIN_CHECK(spatial_rank == 1 || spatial_rank == 2, std::invalid_argument, "[layers] SpatialDropout layer \"",
                name_, "\": spatial rank must be 1 or 2, got ", spatial_rank);
  MDTRAIN_CHECK(rate >= 0.0 && rate <= 1.0, std::invalid_argument, "[layers] ", class_name(), " layer \"", name_,
                "\": Invalid value received for argument `rate`. Expected a float value between 0 and 1. "
                "Received: rate=",
                rate);
  MDTRAIN_CHECK(rate < 1.0, std::invalid_argument, "[layers] ", class_name(), " layer \"", name_,
                "\": rate=1 would drop every channel and scale by 1 / (1 - rate) = inf; use a rate below 1");
  MDTRAIN_CHECK(seed <= kMaxSeed, std::invalid_argument, "[layers] ", class_name(), " layer \"", name_,
                "\": seed must be below 2^53, got ", seed);
}

Shape SpatialDropout::compute_output_shape(const Shape& input_shape) const {
  check_input_ndim(name_, input_shape, static_cast<std::size_t>(spatial_rank_) + 2);
  return input_shape;
}

Tensor SpatialDropout::forward(const Tensor& x, const ForwardContext& ctx) {
  check_input(x);
  applied_ = ctx.training && rate_ > 0.0;
  if (!applied_) return x;
  const std::int64_t channels = input_shape_.back();
  ensure_buffer(mask_, {x.dim(0), channels}, dtype_, x.device());
  ensure_buffer(y_, x.shape(), dtype_, x.device());
  ops::dropout_mask(rate_, seed_, ctx.step, static_cast<std::uint64_t>(ctx.global_row_offset * channels), mask_);
  ops::scale_channels(x, mask_, y_);
  return y_;
}

Tensor SpatialDropout::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  if (!applied_) return dy;
  ensure_buffer(dx_, y_.shape(), dtype_, y_.device());
  ops::scale_channels(dy.reshape(y_.shape()), mask_, dx_);
  return dx_;
}

std::unique_ptr<Layer> SpatialDropout::clone() const {
  auto copy = std::make_unique<SpatialDropout>(name_, spatial_rank_, rate_, seed_);
  copy->copy_build_state(*this);
  return copy;
}

Json SpatialDropout::config() const {
  Json c = Json::object();
  c.set("name", name_);
  c.set("dtype", name_of(dtype_));
  c.set("rate", rate_);
  c.set("seed", static_cast<double>(seed_));
  if (spatial_rank_ == 2) c.set("data_format", "channels_last");
  return c;
}

namespace {

std::unique_ptr<Layer> from_config(const Json& c, int rank) {
  const std::string name = c.at("name").as_string();
  if (rank == 2) {
    const Json format = c.get("data_format", Json("channels_last"));
    MDTRAIN_CHECK(format.is_string() && format.as_string() == "channels_last", std::invalid_argument,
                  "[layers] SpatialDropout2D layer \"", name, "\": data_format=", format.dump(),
                  " is not supported (only \"channels_last\", as the convolutions)");
  }
  return std::make_unique<SpatialDropout>(name, rank, c.at("rate").as_number(), noise_seed_from_config(c, name));
}

}  // namespace

std::unique_ptr<Layer> SpatialDropout::from_config_1d(const Json& c) { return from_config(c, 1); }
std::unique_ptr<Layer> SpatialDropout::from_config_2d(const Json& c) { return from_config(c, 2); }

}  // namespace mdtrain
