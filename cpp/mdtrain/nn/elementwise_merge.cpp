#include "mdtrain/nn/elementwise_merge.h"

#include "mdtrain/core/dtype_dispatch.h"

namespace mdtrain {

namespace {

// out = first, then folded with every x[j] (j != skip) in order: out += x[j] or out *= x[j].
void fold_into(Tensor& out, const Tensor& first, const std::vector<Tensor>& x, std::size_t skip,
               ElementwiseMerge::Fold fold) {
  dispatch_floating(out.dtype(), "layers", [&](auto tag) {
    using T = decltype(tag);
    T* y = out.data<T>();
    const std::int64_t n = out.numel();
    const T* f = first.data<T>();
    for (std::int64_t i = 0; i < n; ++i) y[i] = f[i];
    for (std::size_t j = 0; j < x.size(); ++j) {
      if (j == skip) continue;
      const T* xj = x[j].data<T>();
      if (fold == ElementwiseMerge::Fold::Sum) {
        for (std::int64_t i = 0; i < n; ++i) y[i] += xj[i];
      } else {
        for (std::int64_t i = 0; i < n; ++i) y[i] *= xj[i];
      }
    }
  });
}

}  // namespace

Shape ElementwiseMerge::merged_shape(const std::vector<Shape>& input_shapes) const {
  for (std::size_t k = 1; k < input_shapes.size(); ++k)
    MDTRAIN_CHECK(input_shapes[k] == input_shapes[0], std::invalid_argument, "[layers] ", class_name(), " layer \"",
                  name_, "\": inputs have incompatible shapes. Received shapes ", to_string(input_shapes[0]), " and ",
                  to_string(input_shapes[k]), " (batch axis excluded); all inputs must have the same shape");
  return input_shapes[0];
}

Tensor ElementwiseMerge::forward_inputs(const std::vector<Tensor>& x) {
  check_inputs(x);
  ensure_buffer(y_, x[0].shape(), dtype_);
  x_ = x;
  fold_into(y_, x[0], x, 0, fold_);
  return y_;
}

std::vector<Tensor> ElementwiseMerge::backward_inputs(const Tensor& dy) {
  if (fold_ == Fold::Sum) return std::vector<Tensor>(x_.size(), dy);
  std::vector<Tensor> dx;
  for (std::size_t k = 0; k < x_.size(); ++k) {
    Tensor g(dy.shape(), dtype_);
    fold_into(g, dy, x_, k, Fold::Product);
    dx.push_back(g);
  }
  return dx;
}

std::unique_ptr<Layer> Add::from_config(const Json& c) { return std::make_unique<Add>(c.at("name").as_string()); }

std::unique_ptr<Layer> Multiply::from_config(const Json& c) {
  return std::make_unique<Multiply>(c.at("name").as_string());
}

}  // namespace mdtrain
