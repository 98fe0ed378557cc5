#include "mdtrain/nn/cropping.h"

#include "mdtrain/nn/window_args.h"

namespace mdtrain {

Cropping::Cropping(std::string name, std::vector<std::vector<std::int64_t>> cropping, std::string data_format)
    : StridedViewLayer(std::move(name)), cropping_(std::move(cropping)), data_format_(std::move(data_format)) {
  check_pairs_arg(cropping_.size() == 1 ? "Cropping1D" : "Cropping2D", name_, "cropping", cropping_);
  check_data_format_arg("layers", name_, data_format_);
}

Shape Cropping::compute_output_shape(const Shape& input_shape) const {
  check_input_ndim(name_, input_shape, cropping_.size() + 2);
  Shape full{-1};
  full.insert(full.end(), input_shape.begin(), input_shape.end());
  Shape out = input_shape;
  for (std::size_t d = 0; d < cropping_.size(); ++d) {
    out[d] -= cropping_[d][0] + cropping_[d][1];
    if (out[d] > 0) continue;
    if (cropping_.size() == 1)
      fail<std::invalid_argument>("[layers] layer \"", name_,
                                  "\": `cropping` parameter of `Cropping1D` layer must be smaller than the input "
                                  "length. Received: input_shape=",
                                  to_string(full), ", cropping=", pairs_string(cropping_));
    fail<std::invalid_argument>("[layers] layer \"", name_,
                                "\": Values in `cropping` argument should be smaller than the corresponding spatial "
                                "dimension of the input. Received: input_shape=",
                                to_string(full), ", cropping=", pairs_string(cropping_));
  }
  return out;
}

ops::ViewPlan Cropping::forward_plan(std::int64_t batch) const {
  return window_plan(batch, output_shape_, input_shape_, before_offsets(cropping_), true);
}

ops::ViewPlan Cropping::backward_plan(std::int64_t batch) const {
  return window_plan(batch, output_shape_, input_shape_, before_offsets(cropping_), false);
}

std::unique_ptr<Layer> Cropping::clone() const {
  auto copy = std::make_unique<Cropping>(name_, cropping_, data_format_);
  copy->copy_build_state(*this);
  return copy;
}

Json Cropping::config() const {
  Json c = Layer::config();
  c.set("cropping", pairs_to_json(cropping_));
  if (cropping_.size() == 2) c.set("data_format", data_format_);  // Keras's Cropping1D has none
  return c;
}

std::unique_ptr<Layer> Cropping::from_config_1d(const Json& c) {
  Json one = Json::array();
  one.push_back(Json(1));
  one.push_back(Json(1));
  return std::make_unique<Cropping>(c.at("name").as_string(), pairs_from_json(c.get("cropping", one), 1));
}

std::unique_ptr<Layer> Cropping::from_config_2d(const Json& c) {
  return std::make_unique<Cropping>(c.at("name").as_string(), pairs_from_json(c.get("cropping", 0), 2),
                                    c.get("data_format", "channels_last").as_string());
}

}  // namespace mdtrain
