#include "mdtrain/nn/reshape.h"

#include "mdtrain/nn/window_args.h"

namespace mdtrain {

Reshape::Reshape(std::string name, Shape target_shape)
    : Layer(std::move(name)), target_shape_(std::move(target_shape)) {
  int unknown = 0;
  for (auto d : target_shape_) {
    MDTRAIN_CHECK(d > 0 || d == -1, std::invalid_argument, "[reshape] layer \"", name_,
                  "\": every entry of target_shape must be a positive integer or -1. Received: target_shape=",
                  tuple_string(target_shape_));
    unknown += d == -1;
  }
  MDTRAIN_CHECK(unknown <= 1, std::invalid_argument, "[reshape] layer \"", name_,
                "\": There must be at most one unknown dimension (-1) in target_shape. Received: target_shape=",
                tuple_string(target_shape_), ".");
}

Shape Reshape::compute_output_shape(const Shape& input_shape) const {
  const std::int64_t size = numel(input_shape);
  std::int64_t known = 1;
  int unknown_at = -1;
  for (std::size_t i = 0; i < target_shape_.size(); ++i) {
    if (target_shape_[i] == -1) unknown_at = static_cast<int>(i);
    else known *= target_shape_[i];
  }
  Shape out = target_shape_;
  if (unknown_at < 0) {
    MDTRAIN_CHECK(known == size, std::invalid_argument, "[reshape] layer \"", name_,
                  "\": The total size of the tensor must be unchanged. Received: input_shape=",
                  tuple_string(input_shape), ", target_shape=", tuple_string(target_shape_));
  } else {
    MDTRAIN_CHECK(size % known == 0, std::invalid_argument, "[reshape] layer \"", name_,
                  "\": The total size of the tensor must be unchanged, however, the input size cannot be divided by "
                  "the specified dimensions in target_shape. Received: input_shape=",
                  tuple_string(input_shape), ", target_shape=", tuple_string(target_shape_));
    out[static_cast<std::size_t>(unknown_at)] = size / known;
  }
  return out;
}

Tensor Reshape::forward(const Tensor& x, const ForwardContext&) {
  check_input(x);
  last_input_shape_ = x.shape();
  Shape out{x.dim(0)};
  out.insert(out.end(), output_shape_.begin(), output_shape_.end());
  return x.reshape(out);
}

Tensor Reshape::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  return dy.reshape(last_input_shape_);
}

std::unique_ptr<Layer> Reshape::clone() const {
  auto copy = std::make_unique<Reshape>(name_, target_shape_);
  copy->copy_build_state(*this);
  return copy;
}

Json Reshape::config() const {
  Json c = Layer::config();
  Json t = Json::array();
  for (auto d : target_shape_) t.push_back(Json(d));
  c.set("target_shape", t);
  return c;
}

std::unique_ptr<Layer> Reshape::from_config(const Json& c) {
  Shape target;
  for (const auto& d : c.at("target_shape").as_array()) target.push_back(d.as_int());
  return std::make_unique<Reshape>(c.at("name").as_string(), target);
}

}  // namespace mdtrain
