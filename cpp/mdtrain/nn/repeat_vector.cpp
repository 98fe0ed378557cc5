#include "mdtrain/nn/repeat_vector.h"

namespace mdtrain {

RepeatVector::RepeatVector(std::string name, std::int64_t n) : StridedViewLayer(std::move(name)), n_(n) {
  MDTRAIN_CHECK(n_ > 0, std::invalid_argument, "[layers] RepeatVector layer \"", name_,
                "\": Argument `n` should be a positive integer. Received: n=", n_);
}

Shape RepeatVector::compute_output_shape(const Shape& input_shape) const {
  check_input_ndim(name_, input_shape, 2);
  return {n_, input_shape[0]};
}

ops::ViewPlan RepeatVector::forward_plan(std::int64_t batch) const {
  const std::int64_t f = input_shape_[0];
  ops::ViewPlan plan;
  plan.extent = {batch, n_, f};
  plan.src_stride = {f, 0, 1};
  plan.dst_stride = {n_ * f, f, 1};
  return plan;
}

ops::ViewPlan RepeatVector::backward_plan(std::int64_t batch) const {
  const std::int64_t f = input_shape_[0];
  ops::ViewPlan plan;
  plan.extent = {batch, f};
  plan.src_stride = {n_ * f, 1};
  plan.dst_stride = {f, 1};
  plan.reduce_extent = {n_};
  plan.reduce_src_stride = {f};
  return plan;
}

std::unique_ptr<Layer> RepeatVector::clone() const {
  auto copy = std::make_unique<RepeatVector>(name_, n_);
  copy->copy_build_state(*this);
  return copy;
}

Json RepeatVector::config() const {
  Json c = Layer::config();
  c.set("n", Json(n_));
  return c;
}

std::unique_ptr<Layer> RepeatVector::from_config(const Json& c) {
  return std::make_unique<RepeatVector>(c.at("name").as_string(), c.at("n").as_int());
}

}  // namespace mdtrain
