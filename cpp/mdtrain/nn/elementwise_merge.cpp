#include "mdtrain/nn/elementwise_merge.h"

#include <algorithm>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/ops/merge_math.h"

namespace mdtrain {

namespace {

using Fold = ElementwiseMerge::Fold;

// Keras's Merge._compute_elemwise_op_output_shape: right-aligned, an axis of 1 takes the other's.
bool broadcast_pair(const Shape& a, const Shape& b, Shape& out) {
  const Shape& longer = a.size() >= b.size() ? a : b;
  const Shape& shorter = a.size() >= b.size() ? b : a;
  const std::size_t lead = longer.size() - shorter.size();
  out.assign(longer.begin(), longer.begin() + static_cast<std::ptrdiff_t>(lead));
  for (std::size_t d = 0; d < shorter.size(); ++d) {
    const std::int64_t i = longer[lead + d], j = shorter[d];
    if (i != j && i != 1 && j != 1) return false;
    out.push_back(i == 1 ? j : i);
  }
  return true;
}

// The offset in a row of `in` (right-aligned to `out`, broadcast along its axes of 1 and the
// axes it lacks) of every element of a row of `out`, in row-major order.
std::vector<std::int64_t> broadcast_offsets(const Shape& in, const Shape& out) {
  const std::size_t rank = out.size(), lead = rank - in.size();
  std::vector<std::int64_t> stride(rank, 0);
  std::int64_t s = 1;
  for (std::size_t d = rank; d-- > lead;) {
    const std::int64_t size = in[d - lead];
    stride[d] = size == 1 ? 0 : s;
    s *= size;
  }
  std::int64_t n = 1;
  for (auto d : out) n *= d;
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(n));
  std::vector<std::int64_t> index(rank, 0);
  std::int64_t at = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    offsets[static_cast<std::size_t>(j)] = at;
    for (std::size_t d = rank; d-- > 0;) {  // the next index, carrying
      if (++index[d] < out[d]) {
        at += stride[d];
        break;
      }
      at -= stride[d] * (out[d] - 1);
      index[d] = 0;
    }
  }
  return offsets;
}

// Reads element j of an output row from input k's row r (broadcast when offsets exist).
struct RowReader {
  const std::vector<std::vector<std::int64_t>>& offsets;
  std::int64_t at(std::size_t k, std::int64_t j) const {
    return offsets.empty() ? j : offsets[k][static_cast<std::size_t>(j)];
  }
};

}  // namespace

std::string ElementwiseMerge::class_name() const {
  switch (fold_) {
    case Fold::Sum: return "Add";
    case Fold::Product: return "Multiply";
    case Fold::Difference: return "Subtract";
    case Fold::Mean: return "Average";
    case Fold::Maximum: return "Maximum";
    case Fold::Minimum: return "Minimum";
  }
  return "Add";
}

Shape ElementwiseMerge::merged_shape(const std::vector<Shape>& input_shapes) const {
  MDTRAIN_CHECK(fold_ != Fold::Difference || input_shapes.size() == 2, std::invalid_argument,
                "[layers] A `Subtract` layer should be called on exactly 2 inputs. Layer \"", name_, "\" got ",
                input_shapes.size());
  Shape out = input_shapes.empty() ? Shape{} : input_shapes[0];
  for (std::size_t k = 1; k < input_shapes.size(); ++k) {
    Shape next;
    MDTRAIN_CHECK(broadcast_pair(out, input_shapes[k], next), std::invalid_argument, "[layers] ", class_name(),
                  " layer \"", name_, "\": Inputs have incompatible shapes. Received shapes ", to_string(out), " and ",
                  to_string(input_shapes[k]),
                  " (batch axis excluded); each axis must be equal or 1, as Keras broadcasts merges");
    out = next;
  }
  return out;
}

void ElementwiseMerge::after_build() {
  offsets_.clear();
  const bool broadcast =
      std::any_of(input_shapes_.begin(), input_shapes_.end(), [&](const Shape& s) { return s != output_shape_; });
  if (!broadcast) return;
  for (const Shape& s : input_shapes_) offsets_.push_back(broadcast_offsets(s, output_shape_));
}

Tensor ElementwiseMerge::forward_inputs(const std::vector<Tensor>& x) {
  check_inputs(x);
  const std::int64_t batch = x[0].dim(0);
  Shape shape{batch};
  for (auto d : output_shape_) shape.push_back(d);
  ensure_buffer(y_, shape, dtype_);
  const bool pick = fold_ == Fold::Maximum || fold_ == Fold::Minimum;
  if (pick) ensure_buffer(winner_, shape, DType::Int32);
  x_ = x;
  const std::int64_t row = batch == 0 ? 0 : y_.numel() / batch;
  const RowReader read{offsets_};
  dispatch_floating(dtype_, "layers", [&](auto tag) {
    using T = decltype(tag);
    T* y = y_.data<T>();
    std::int32_t* w = pick ? winner_.data<std::int32_t>() : nullptr;
    for (std::int64_t b = 0; b < batch; ++b) {
      T* yr = y + b * row;
      const T* x0 = x[0].data<T>() + b * x[0].row_size();
      for (std::int64_t j = 0; j < row; ++j) yr[j] = x0[read.at(0, j)];
      if (pick) std::fill(w + b * row, w + (b + 1) * row, 0);
      for (std::size_t k = 1; k < x.size(); ++k) {
        const T* xk = x[k].data<T>() + b * x[k].row_size();
        const auto kk = static_cast<std::int32_t>(k);
        for (std::int64_t j = 0; j < row; ++j) {
          const T v = xk[read.at(k, j)];
          switch (fold_) {
            case Fold::Sum:
            case Fold::Mean: yr[j] += v; break;
            case Fold::Product: yr[j] *= v; break;
            case Fold::Difference: yr[j] -= v; break;
            case Fold::Maximum:
              if (!math::max_keeps_first(yr[j], v)) w[b * row + j] = kk;
              yr[j] = math::maximum_propagating_nan(yr[j], v);
              break;
            case Fold::Minimum:
              if (!math::min_keeps_first(yr[j], v)) w[b * row + j] = kk;
              yr[j] = math::minimum_propagating_nan(yr[j], v);
              break;
          }
        }
      }
      if (fold_ == Fold::Mean) {
        const T n = static_cast<T>(x.size());
        for (std::int64_t j = 0; j < row; ++j) yr[j] /= n;  // Keras divides (not a product by 1/n)
      }
    }
  });
  return y_;
}

std::vector<Tensor> ElementwiseMerge::backward_inputs(const Tensor& dy) {
  const std::int64_t batch = dy.dim(0);
  const std::int64_t row = batch == 0 ? 0 : dy.numel() / batch;
  if (offsets_.empty() && fold_ == Fold::Sum) return std::vector<Tensor>(x_.size(), dy);
  const RowReader read{offsets_};
  std::vector<Tensor> dx;
  for (std::size_t k = 0; k < x_.size(); ++k) {
    Tensor g(x_[k].shape(), dtype_);
    g.fill(0.0);
    dx.push_back(g);
  }
  dispatch_floating(dtype_, "layers", [&](auto tag) {
    using T = decltype(tag);
    const T n = static_cast<T>(x_.size());
    const std::int32_t* w = winner_.defined() ? winner_.data<std::int32_t>() : nullptr;
    for (std::int64_t b = 0; b < batch; ++b) {
      const T* g = dy.data<T>() + b * row;
      for (std::size_t k = 0; k < x_.size(); ++k) {
        T* d = dx[k].data<T>() + b * dx[k].row_size();
        for (std::int64_t j = 0; j < row; ++j) {
          T v = g[j];
          switch (fold_) {
            case Fold::Sum: break;
            case Fold::Difference: v = k == 0 ? v : -v; break;
            case Fold::Mean: v = v / n; break;
            case Fold::Product:
              for (std::size_t m = 0; m < x_.size(); ++m)
                if (m != k) v *= x_[m].data<T>()[b * x_[m].row_size() + read.at(m, j)];
              break;
            case Fold::Maximum:
            case Fold::Minimum:
              if (w[b * row + j] != static_cast<std::int32_t>(k)) v = T(0);
              break;
          }
          d[read.at(k, j)] += v;
        }
      }
    }
  });
  return dx;
}

std::unique_ptr<Layer> Add::from_config(const Json& c) { return std::make_unique<Add>(c.at("name").as_string()); }

std::unique_ptr<Layer> Multiply::from_config(const Json& c) {
  return std::make_unique<Multiply>(c.at("name").as_string());
}

std::unique_ptr<Layer> Subtract::from_config(const Json& c) {
  return std::make_unique<Subtract>(c.at("name").as_string());
}

std::unique_ptr<Layer> Average::from_config(const Json& c) {
  return std::make_unique<Average>(c.at("name").as_string());
}

std::unique_ptr<Layer> Maximum::from_config(const Json& c) {
  return std::make_unique<Maximum>(c.at("name").as_string());
}

std::unique_ptr<Layer> Minimum::from_config(const Json& c) {
  return std::make_unique<Minimum>(c.at("name").as_string());
}

}  // namespace mdtrain
