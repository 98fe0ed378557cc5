#include "mdtrain/nn/elementwise_merge.h"

#include "mdtrain/core/dtype_dispatch.h"

namespace mdtrain {

Shape ElementwiseMerge::merged_shape(const std::vector<Shape>& input_shapes) const {
  for (std::size_t k = 1; k < input_shapes.size(); ++k)
    MDTRAIN_CHECK(input_shapes[k] == input_shapes[0], std::invalid_argument, "[layers] ", class_name(), " layer \"",
                  name_, "\": inputs have incompatible shapes. Received shapes ", to_string(input_shapes[0]), " and ",
                  to_string(input_shapes[k]), " (batch axis excluded); all inputs must have the same shape");
  return input_shapes[0];
}

Tensor Add::forward_inputs(const std::vector<Tensor>& x) {
  check_inputs(x);
  ensure_buffer(y_, x[0].shape(), dtype_);
  inputs_ = x.size();
  dispatch_floating(dtype_, "layers", [&](auto tag) {
    using T = decltype(tag);
    T* y = y_.data<T>();
    const std::int64_t n = y_.numel();
    const T* x0 = x[0].data<T>();
    for (std::int64_t i = 0; i < n; ++i) y[i] = x0[i];
    for (std::size_t k = 1; k < x.size(); ++k) {
      const T* xk = x[k].data<T>();
      for (std::int64_t i = 0; i < n; ++i) y[i] += xk[i];
    }
  });
  return y_;
}

std::vector<Tensor> Add::backward_inputs(const Tensor& dy) { return std::vector<Tensor>(inputs_, dy); }

std::unique_ptr<Layer> Add::clone() const {
  auto copy = std::make_unique<Add>(name_);
  copy->copy_merge_state(*this);
  return copy;
}

std::unique_ptr<Layer> Add::from_config(const Json& c) { return std::make_unique<Add>(c.at("name").as_string()); }

Tensor Multiply::forward_inputs(const std::vector<Tensor>& x) {
  check_inputs(x);
  ensure_buffer(y_, x[0].shape(), dtype_);
  x_ = x;
  dispatch_floating(dtype_, "layers", [&](auto tag) {
    using T = decltype(tag);
    T* y = y_.data<T>();
    const std::int64_t n = y_.numel();
    const T* x0 = x[0].data<T>();
    for (std::int64_t i = 0; i < n; ++i) y[i] = x0[i];
    for (std::size_t k = 1; k < x.size(); ++k) {
      const T* xk = x[k].data<T>();
      for (std::int64_t i = 0; i < n; ++i) y[i] *= xk[i];
    }
  });
  return y_;
}

std::vector<Tensor> Multiply::backward_inputs(const Tensor& dy) {
  std::vector<Tensor> dx;
  for (std::size_t k = 0; k < x_.size(); ++k) {
    Tensor g(dy.shape(), dtype_);
    dispatch_floating(dtype_, "layers", [&](auto tag) {
      using T = decltype(tag);
      T* out = g.data<T>();
      const T* d = dy.data<T>();
      const std::int64_t n = g.numel();
      for (std::int64_t i = 0; i < n; ++i) out[i] = d[i];
      for (std::size_t j = 0; j < x_.size(); ++j) {
        if (j == k) continue;
        const T* xj = x_[j].data<T>();
        for (std::int64_t i = 0; i < n; ++i) out[i] *= xj[i];
      }
    });
    dx.push_back(g);
  }
  return dx;
}

std::unique_ptr<Layer> Multiply::clone() const {
  auto copy = std::make_unique<Multiply>(name_);
  copy->copy_merge_state(*this);
  return copy;
}

std::unique_ptr<Layer> Multiply::from_config(const Json& c) {
  return std::make_unique<Multiply>(c.at("name").as_string());
}

}  // namespace mdtrain
