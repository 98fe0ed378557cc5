#include "mdtrain/nn/masking.h"

#include "mdtrain/core/dtype_dispatch.h"

namespace mdtrain {

Masking::Masking(std::string name, double mask_value) : Layer(std::move(name)), mask_value_(mask_value) {}

Shape Masking::compute_output_shape(const Shape& s) const {
  MDTRAIN_CHECK(!s.empty(), std::invalid_argument, "[masking] layer \"", name_,
                "\" needs inputs (batch, timesteps, ...), got input shape (None", (s.empty() ? ",)" : ")"));
  return s;
}

namespace {

// Columns per step: the product of the dimensions after timesteps.
std::int64_t step_width(const Tensor& x) { return x.dim(1) == 0 ? 0 : x.numel() / (x.dim(0) * x.dim(1)); }

}  // namespace

Tensor Masking::forward(const Tensor& x, const ForwardContext& /*ctx*/) {
  check_input(x);
  MDTRAIN_CHECK(x.device().is_cpu(), std::invalid_argument, "[masking] layer \"", name_,
                "\" runs on CPU devices only for now");
  const std::int64_t rows = x.dim(0) * x.dim(1), width = step_width(x);
  ensure_buffer(mask_, {x.dim(0), x.dim(1)}, dtype_, x.device());
  ensure_buffer(y_, x.shape(), dtype_, x.device());
  dispatch_floating(dtype_, "masking", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* out = y_.data<T>();
    T* m = mask_.data<T>();
    const T value = static_cast<T>(mask_value_);
    for (std::int64_t r = 0; r < rows; ++r) {
      bool keep = false;
      for (std::int64_t j = 0; j < width && !keep; ++j) keep = in[r * width + j] != value;
      m[r] = keep ? T(1) : T(0);
      for (std::int64_t j = 0; j < width; ++j) out[r * width + j] = keep ? in[r * width + j] : T(0);
    }
  });
  return y_;
}

Tensor Masking::backward(const Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return Tensor();
  const std::int64_t rows = dy.dim(0) * dy.dim(1), width = step_width(dy);
  ensure_buffer(dx_, dy.shape(), dtype_, dy.device());
  dispatch_floating(dtype_, "masking", [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();
    const T* m = mask_.data<T>();
    T* out = dx_.data<T>();
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < width; ++j) out[r * width + j] = m[r] != T(0) ? g[r * width + j] : T(0);
  });
  return dx_;
}

std::unique_ptr<Layer> Masking::clone() const {
  auto copy = std::make_unique<Masking>(name_, mask_value_);
  copy->copy_build_state(*this);
  return copy;
}

Json Masking::config() const {
  Json c = Layer::config();
  c.set("mask_value", mask_value_);
  return c;
}

std::unique_ptr<Layer> Masking::from_config(const Json& c) {
  const Json v = c.get("mask_value", 0.0);
  MDTRAIN_CHECK(v.is_number(), std::invalid_argument, "[masking] layer \"", c.at("name").as_string(),
                "\": mask_value must be a number, got ", v.dump());
  return std::make_unique<Masking>(c.at("name").as_string(), v.as_number());
}

}  // namespace mdtrain
