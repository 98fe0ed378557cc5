#include "mdtrain/nn/concatenate.h"

#include <cstring>

namespace mdtrain {

std::size_t Concatenate::feature_axis(std::size_t rank_without_batch) const {
  const auto rank = static_cast<int>(rank_without_batch) + 1;
  const int axis = axis_ < 0 ? axis_ + rank : axis_;
  MDTRAIN_CHECK(axis >= 1 && axis < rank, std::invalid_argument, "[layers] Concatenate layer \"", name_,
                "\": axis=", axis_, " is out of range for inputs of rank ", rank,
                " (batch axis included); the batch axis 0 cannot be concatenated");
  return static_cast<std::size_t>(axis - 1);
}

Shape Concatenate::merged_shape(const std::vector<Shape>& input_shapes) const {
  const Shape& first = input_shapes.front();
  const std::size_t a = feature_axis(first.size());
  Shape out = first;
  for (std::size_t k = 1; k < input_shapes.size(); ++k) {
    const Shape& s = input_shapes[k];
    bool fits = s.size() == first.size();
    for (std::size_t d = 0; fits && d < s.size(); ++d)
      if (d != a && s[d] != first[d]) fits = false;
    MDTRAIN_CHECK(fits, std::invalid_argument, "[layers] Concatenate layer \"", name_,
                  "\" requires inputs with matching shapes except for the concatenation axis ", axis_,
                  ". Received: input_shape=[", to_string(first), ", ", to_string(s), "] (batch axis excluded)");
    out[a] += s[a];
  }
  return out;
}

std::int64_t Concatenate::outer(const Shape& batched) const {
  const std::size_t a = feature_axis(batched.size() - 1) + 1;
  std::int64_t n = 1;
  for (std::size_t d = 0; d < a; ++d) n *= batched[d];
  return n;
}

Tensor Concatenate::forward_inputs(const std::vector<Tensor>& x) {
  check_inputs(x);
  Shape shape{x[0].dim(0)};
  for (auto d : output_shape_) shape.push_back(d);
  ensure_buffer(y_, shape, dtype_);
  const std::int64_t rows = outer(shape);
  const std::size_t elem = size_of(dtype_);
  const std::int64_t out_inner = rows == 0 ? 0 : y_.numel() / rows;
  auto* dst = static_cast<char*>(y_.raw());
  std::int64_t offset = 0;
  for (const auto& xk : x) {
    const std::int64_t inner = rows == 0 ? 0 : xk.numel() / rows;
    const auto* src = static_cast<const char*>(xk.raw());
    for (std::int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + (r * out_inner + offset) * static_cast<std::int64_t>(elem),
                  src + r * inner * static_cast<std::int64_t>(elem), static_cast<std::size_t>(inner) * elem);
    offset += inner;
  }
  return y_;
}

std::vector<Tensor> Concatenate::backward_inputs(const Tensor& dy) {
  const std::int64_t rows = outer(dy.shape());
  const std::size_t elem = size_of(dtype_);
  const std::int64_t out_inner = rows == 0 ? 0 : dy.numel() / rows;
  const auto* src = static_cast<const char*>(dy.raw());
  std::vector<Tensor> dx;
  std::int64_t offset = 0;
  for (const auto& s : input_shapes_) {
    Shape shape{dy.dim(0)};
    for (auto d : s) shape.push_back(d);
    Tensor g(shape, dtype_);
    const std::int64_t inner = rows == 0 ? 0 : g.numel() / rows;
    auto* dst = static_cast<char*>(g.raw());
    for (std::int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + r * inner * static_cast<std::int64_t>(elem),
                  src + (r * out_inner + offset) * static_cast<std::int64_t>(elem),
                  static_cast<std::size_t>(inner) * elem);
    offset += inner;
    dx.push_back(g);
  }
  return dx;
}

std::unique_ptr<Layer> Concatenate::clone() const {
  auto copy = std::make_unique<Concatenate>(name_, axis_);
  copy->copy_merge_state(*this);
  return copy;
}

Json Concatenate::config() const {
  Json c = Layer::config();
  c.set("axis", Json(static_cast<std::int64_t>(axis_)));
  return c;
}

std::unique_ptr<Layer> Concatenate::from_config(const Json& c) {
  return std::make_unique<Concatenate>(c.at("name").as_string(),
                                       static_cast<int>(c.get("axis", Json(std::int64_t{-1})).as_int()));
}

}  // namespace mdtrain
