#include "mdtrain/nn/strided_view_layer.h"

#include "mdtrain/nn/window_args.h"

namespace mdtrain {

Tensor StridedViewLayer::forward(const Tensor& x, const ForwardContext&) {
  check_input(x);
  last_batch_ = x.dim(0);
  Shape out{last_batch_};
  out.insert(out.end(), output_shape_.begin(), output_shape_.end());
  ensure_buffer(y_, out, dtype_, x.device());
  if (forward_fills_zeros()) y_.fill(0.0);
  ops::strided_view(x, y_, forward_plan(last_batch_));
  return y_;
}

Tensor StridedViewLayer::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  Shape in{last_batch_};
  in.insert(in.end(), input_shape_.begin(), input_shape_.end());
  ensure_buffer(dx_, in, dtype_, dy.device());
  if (backward_fills_zeros()) dx_.fill(0.0);
  ops::strided_view(dy, dx_, backward_plan(last_batch_));
  return dx_;
}

void check_input_ndim(const std::string& layer, const Shape& input_shape, std::size_t ndim) {
  if (input_shape.size() + 1 == ndim) return;
  Shape full{-1};
  full.insert(full.end(), input_shape.begin(), input_shape.end());
  fail<std::invalid_argument>("[layers] Input 0 of layer \"", layer,
                              "\" is incompatible with the layer: expected ndim=", ndim, ", found ndim=", full.size(),
                              ". Full shape received: ", to_string(full));
}

std::vector<std::vector<std::int64_t>> pairs_from_json(const Json& value, std::size_t dims) {
  if (dims == 1) return {pair_from_json(value)};
  if (value.is_number()) return {pair_from_json(value), pair_from_json(value)};
  std::vector<std::vector<std::int64_t>> pairs;
  for (const auto& v : value.as_array()) pairs.push_back(pair_from_json(v));
  return pairs;
}

void check_pairs_arg(const char* cls, const std::string& layer, const char* arg,
                     const std::vector<std::vector<std::int64_t>>& pairs) {
  bool ok = pairs.size() == 1 || pairs.size() == 2;
  for (const auto& p : pairs) ok = ok && p.size() == 2 && p[0] >= 0 && p[1] >= 0;
  MDTRAIN_CHECK(ok, std::invalid_argument, "[layers] ", cls, " layer \"", layer, "\": `", arg,
                "` must be one (before, after) pair of integers >= 0 per spatial dimension. Received: ", arg, "=",
                pairs_string(pairs));
}

Shape before_offsets(const std::vector<std::vector<std::int64_t>>& pairs) {
  Shape offset;
  for (const auto& p : pairs) offset.push_back(p[0]);
  return offset;
}

std::string pairs_string(const std::vector<std::vector<std::int64_t>>& pairs) {
  if (pairs.size() == 1) return tuple_string(pairs[0]);
  std::string s = "(";
  for (std::size_t i = 0; i < pairs.size(); ++i) s += (i ? ", " : "") + tuple_string(pairs[i]);
  return s + ")";
}

Json pairs_to_json(const std::vector<std::vector<std::int64_t>>& pairs) {
  if (pairs.size() == 1) return pair_to_json(pairs[0]);
  Json a = Json::array();
  for (const auto& p : pairs) a.push_back(pair_to_json(p));
  return a;
}

std::vector<std::int64_t> contiguous_strides(const Shape& shape) {
  std::vector<std::int64_t> strides(shape.size() + 1);
  std::int64_t s = 1;
  for (std::size_t d = shape.size(); d > 0; --d) {
    strides[d] = s;
    s *= shape[d - 1];
  }
  strides[0] = s;
  return strides;
}

ops::ViewPlan window_plan(std::int64_t batch, const Shape& small, const Shape& big, const Shape& offset,
                          bool from_big) {
  const auto small_strides = contiguous_strides(small), big_strides = contiguous_strides(big);
  std::int64_t big_offset = 0;
  for (std::size_t d = 0; d < offset.size(); ++d) big_offset += offset[d] * big_strides[d + 1];
  ops::ViewPlan plan;
  plan.extent = {batch};
  plan.extent.insert(plan.extent.end(), small.begin(), small.end());
  plan.src_stride = from_big ? big_strides : small_strides;
  plan.dst_stride = from_big ? small_strides : big_strides;
  (from_big ? plan.src_offset : plan.dst_offset) = big_offset;
  return plan;
}

ops::ViewPlan repeat_plan(std::int64_t batch, const Shape& input_shape, const Shape& size, bool backward) {
  // The output as (batch, s0, size0, s1, size1, ..., channels): each input element's repeats are
  // the size dimensions, read at stride 0 forward and summed over backward.
  Shape expanded;
  for (std::size_t d = 0; d < size.size(); ++d) {
    expanded.push_back(input_shape[d]);
    expanded.push_back(size[d]);
  }
  expanded.push_back(input_shape.back());
  const auto in_strides = contiguous_strides(input_shape), out_strides = contiguous_strides(expanded);
  ops::ViewPlan plan;
  if (!backward) {
    plan.extent = {batch};
    plan.extent.insert(plan.extent.end(), expanded.begin(), expanded.end());
    plan.dst_stride = out_strides;
    plan.src_stride = {in_strides[0]};
    for (std::size_t d = 0; d < size.size(); ++d) {
      plan.src_stride.push_back(in_strides[d + 1]);
      plan.src_stride.push_back(0);
    }
    plan.src_stride.push_back(1);
    return plan;
  }
  plan.extent = {batch};
  plan.extent.insert(plan.extent.end(), input_shape.begin(), input_shape.end());
  plan.dst_stride = in_strides;
  plan.src_stride = {out_strides[0]};
  for (std::size_t d = 0; d < size.size(); ++d) {
    plan.src_stride.push_back(out_strides[2 * d + 1]);
    plan.reduce_extent.push_back(size[d]);
    plan.reduce_src_stride.push_back(out_strides[2 * d + 2]);
  }
  plan.src_stride.push_back(1);
  return plan;
}

}  // namespace mdtrain
