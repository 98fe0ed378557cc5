#include "mdtrain/nn/zero_padding.h"

#include "mdtrain/nn/window_args.h"

namespace mdtrain {

ZeroPadding::ZeroPadding(std::string name, std::vector<std::vector<std::int64_t>> padding, std::string data_format)
    : StridedViewLayer(std::move(name)), padding_(std::move(padding)), data_format_(std::move(data_format)) {
  check_pairs_arg(padding_.size() == 1 ? "ZeroPadding1D" : "ZeroPadding2D", name_, "padding", padding_);
  check_data_format_arg("layers", name_, data_format_);
}

Shape ZeroPadding::compute_output_shape(const Shape& input_shape) const {
  check_input_ndim(name_, input_shape, padding_.size() + 2);
  Shape out = input_shape;
  for (std::size_t d = 0; d < padding_.size(); ++d) out[d] += padding_[d][0] + padding_[d][1];
  return out;
}

ops::ViewPlan ZeroPadding::forward_plan(std::int64_t batch) const {
  return window_plan(batch, input_shape_, output_shape_, before_offsets(padding_), false);
}

ops::ViewPlan ZeroPadding::backward_plan(std::int64_t batch) const {
  return window_plan(batch, input_shape_, output_shape_, before_offsets(padding_), true);
}

std::unique_ptr<Layer> ZeroPadding::clone() const {
  auto copy = std::make_unique<ZeroPadding>(name_, padding_, data_format_);
  copy->copy_build_state(*this);
  return copy;
}

Json ZeroPadding::config() const {
  Json c = Layer::config();
  c.set("padding", pairs_to_json(padding_));
  c.set("data_format", data_format_);
  return c;
}

std::unique_ptr<Layer> ZeroPadding::from_config_1d(const Json& c) {
  return std::make_unique<ZeroPadding>(c.at("name").as_string(), pairs_from_json(c.get("padding", 1), 1),
                                       c.get("data_format", "channels_last").as_string());
}

std::unique_ptr<Layer> ZeroPadding::from_config_2d(const Json& c) {
  return std::make_unique<ZeroPadding>(c.at("name").as_string(), pairs_from_json(c.get("padding", 1), 2),
                                       c.get("data_format", "channels_last").as_string());
}

}  // namespace mdtrain
