#include "mdtrain/nn/permute.h"

#include <algorithm>

#include "mdtrain/nn/window_args.h"
#include "mdtrain/ops/strided_view_math.h"

namespace mdtrain {

Permute::Permute(std::string name, std::vector<std::int64_t> dims)
    : StridedViewLayer(std::move(name)), dims_(std::move(dims)) {
  std::vector<std::int64_t> sorted = dims_;
  std::sort(sorted.begin(), sorted.end());
  bool ok = !sorted.empty() && sorted.size() < static_cast<std::size_t>(math::kMaxViewRank);
  for (std::size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == static_cast<std::int64_t>(i) + 1;
  MDTRAIN_CHECK(ok, std::invalid_argument, "[layers] Permute layer \"", name_,
                "\": Invalid permutation argument `dims` for Permute Layer. The set of indices in `dims` must be "
                "consecutive and start from 1 (at most ",
                math::kMaxViewRank - 1, " of them). Received dims=", tuple_string(dims_));
}

Shape Permute::compute_output_shape(const Shape& input_shape) const {
  check_input_ndim(name_, input_shape, dims_.size() + 1);
  Shape out;
  for (auto d : dims_) out.push_back(input_shape[static_cast<std::size_t>(d - 1)]);
  return out;
}

ops::ViewPlan Permute::forward_plan(std::int64_t batch) const {
  // Output element (b, i_1..i_k) is input element (b, ...) with axis dims[j] at i_j.
  const auto in = contiguous_strides(input_shape_);
  ops::ViewPlan plan;
  plan.extent = {batch};
  plan.extent.insert(plan.extent.end(), output_shape_.begin(), output_shape_.end());
  plan.dst_stride = contiguous_strides(output_shape_);
  plan.src_stride = {in[0]};
  for (auto d : dims_) plan.src_stride.push_back(in[static_cast<std::size_t>(d)]);
  return plan;
}

ops::ViewPlan Permute::backward_plan(std::int64_t batch) const {
  // The inverse permutation: input axis dims[j] reads output axis j.
  const auto out = contiguous_strides(output_shape_);
  ops::ViewPlan plan;
  plan.extent = {batch};
  plan.extent.insert(plan.extent.end(), input_shape_.begin(), input_shape_.end());
  plan.dst_stride = contiguous_strides(input_shape_);
  plan.src_stride.assign(dims_.size() + 1, 0);
  plan.src_stride[0] = out[0];
  for (std::size_t j = 0; j < dims_.size(); ++j) plan.src_stride[static_cast<std::size_t>(dims_[j])] = out[j + 1];
  return plan;
}

std::unique_ptr<Layer> Permute::clone() const {
  auto copy = std::make_unique<Permute>(name_, dims_);
  copy->copy_build_state(*this);
  return copy;
}

Json Permute::config() const {
  Json c = Layer::config();
  c.set("dims", pair_to_json(dims_));
  return c;
}

std::unique_ptr<Layer> Permute::from_config(const Json& c) {
  std::vector<std::int64_t> dims;
  for (const auto& d : c.at("dims").as_array()) dims.push_back(d.as_int());
  return std::make_unique<Permute>(c.at("name").as_string(), dims);
}

}  // namespace mdtrain
