#include "mdtrain/nn/dot.h"

#include <cmath>

#include "mdtrain/core/dtype_dispatch.h"

namespace mdtrain {

namespace {

// Keras's keras.ops.normalize(order=2): the inverse norm rsqrt(sum x^2), at most 1 / epsilon.
constexpr double kInverseNormCap = 1e7;

// Offsets of the elements of `shape` without axis `skip`, in row-major order of the others.
std::vector<std::int64_t> offsets_without(const Shape& shape, std::size_t skip) {
  std::vector<std::int64_t> stride(shape.size());
  std::int64_t s = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    stride[d] = s;
    s *= shape[d];
  }
  std::vector<std::int64_t> out{0};
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (d == skip) continue;
    std::vector<std::int64_t> next;
    next.reserve(out.size() * static_cast<std::size_t>(shape[d]));
    for (std::int64_t base : out)
      for (std::int64_t i = 0; i < shape[d]; ++i) next.push_back(base + i * stride[d]);
    out = std::move(next);
  }
  return out;
}

std::string axes_text(const std::vector<int>& axes) {
  return axes.size() == 1 ? std::to_string(axes[0])
                          : "(" + std::to_string(axes[0]) + ", " + std::to_string(axes[1]) + ")";
}

}  // namespace

Dot::Dot(std::string name, std::vector<int> axes, bool normalize)
    : MergeLayer(std::move(name)), axes_(std::move(axes)), normalize_(normalize) {
  MDTRAIN_CHECK(axes_.size() == 1 || axes_.size() == 2, std::invalid_argument, "[layers] Dot layer \"", name_,
                "\": Invalid format for argument `axes`: it should be an integer or contain two elements, got ",
                axes_.size());
}

std::pair<std::size_t, std::size_t> Dot::feature_axes(const Shape& a, const Shape& b) const {
  const int ranks[2] = {static_cast<int>(a.size()) + 1, static_cast<int>(b.size()) + 1};
  int resolved[2];
  for (int k = 0; k < 2; ++k) {
    const int axis = axes_.size() == 1 ? axes_[0] : axes_[static_cast<std::size_t>(k)];
    // Keras: axis % rank for a negative axis (Python's modulo), the axis itself otherwise.
    resolved[k] = axis < 0 ? ((axis % ranks[k]) + ranks[k]) % ranks[k] : axis;
    MDTRAIN_CHECK(resolved[k] < ranks[k], std::invalid_argument, "[layers] Dot layer \"", name_,
                  "\": axes=", axes_text(axes_), " is out of range for input ", k, " of rank ", ranks[k],
                  " (batch axis included)");
    MDTRAIN_CHECK(resolved[k] != 0, std::invalid_argument, "[layers] Dot layer \"", name_,
                  "\": Cannot perform batch_dot over axis 0 (axes=", axes_text(axes_),
                  "): the batch axis cannot be one of the dot axes");
  }
  return {static_cast<std::size_t>(resolved[0] - 1), static_cast<std::size_t>(resolved[1] - 1)};
}

Shape Dot::merged_shape(const std::vector<Shape>& input_shapes) const {
  MDTRAIN_CHECK(input_shapes.size() == 2, std::invalid_argument,
                "[layers] A `Dot` layer should be called on a list of ", "2 inputs. Layer \"", name_, "\" got ",
                input_shapes.size());
  const Shape &a = input_shapes[0], &b = input_shapes[1];
  MDTRAIN_CHECK(!a.empty() && !b.empty(), std::invalid_argument, "[layers] Dot layer \"", name_,
                "\": Cannot do batch_dot on inputs with rank < 2. Received inputs with shapes (None, ",
                "...) of ranks ", a.size() + 1, " and ", b.size() + 1);
  const auto [ca, cb] = feature_axes(a, b);
  MDTRAIN_CHECK(a[ca] == b[cb], std::invalid_argument, "[layers] Dot layer \"", name_,
                "\": Incompatible input shapes: axis values ", a[ca], " (at axis ", ca + 1, ") != ", b[cb],
                " (at axis ", cb + 1, "). Full input shapes: ", to_string(a), ", ", to_string(b),
                " (batch axis excluded)");
  Shape out;
  for (std::size_t d = 0; d < a.size(); ++d)
    if (d != ca) out.push_back(a[d]);
  for (std::size_t d = 0; d < b.size(); ++d)
    if (d != cb) out.push_back(b[d]);
  if (out.empty()) out.push_back(1);
  return out;
}

void Dot::after_build() {
  const auto [ca, cb] = feature_axes(input_shapes_[0], input_shapes_[1]);
  const std::size_t axis[2] = {ca, cb};
  for (int k = 0; k < 2; ++k) {
    const Shape& s = input_shapes_[static_cast<std::size_t>(k)];
    Operand& op = in_[k];
    op.offsets = offsets_without(s, axis[k]);
    op.size = s[axis[k]];
    op.stride = 1;
    for (std::size_t d = axis[k] + 1; d < s.size(); ++d) op.stride *= s[d];
  }
}

Tensor Dot::forward_inputs(const std::vector<Tensor>& x) {
  check_inputs(x);
  const std::int64_t batch = x[0].dim(0);
  Shape shape{batch};
  for (auto d : output_shape_) shape.push_back(d);
  ensure_buffer(y_, shape, dtype_);
  x_ = x;
  const auto I = static_cast<std::int64_t>(in_[0].offsets.size());
  const auto J = static_cast<std::int64_t>(in_[1].offsets.size());
  const std::int64_t K = in_[0].size;
  dispatch_floating(dtype_, "layers", [&](auto tag) {
    using T = decltype(tag);
    const T* rows[2];
    for (int k = 0; k < 2; ++k) {
      if (!normalize_) {
        rows[k] = x[static_cast<std::size_t>(k)].data<T>();
        continue;
      }
      // x * min(rsqrt(sum over the axis of x^2), 1e7), per (example, other axes).
      const Tensor& in = x[static_cast<std::size_t>(k)];
      const Operand& op = in_[k];
      const auto n = static_cast<std::int64_t>(op.offsets.size());
      ensure_buffer(xn_[k], in.shape(), dtype_);
      ensure_buffer(inv_[k], {batch, n}, dtype_);
      const T* src = in.data<T>();
      T* dst = xn_[k].data<T>();
      T* inv = inv_[k].data<T>();
      const std::int64_t row = in.row_size();
      for (std::int64_t b = 0; b < batch; ++b)
        for (std::int64_t i = 0; i < n; ++i) {
          const std::int64_t base = b * row + op.offsets[static_cast<std::size_t>(i)];
          T s = T(0);
          for (std::int64_t t = 0; t < op.size; ++t) s += src[base + t * op.stride] * src[base + t * op.stride];
          const T r = T(1) / std::sqrt(s);
          const T cap = static_cast<T>(kInverseNormCap);
          inv[b * n + i] = r <= cap ? r : cap;  // rsqrt(0) = inf: capped
          for (std::int64_t t = 0; t < op.size; ++t)
            dst[base + t * op.stride] = src[base + t * op.stride] * inv[b * n + i];
        }
      rows[k] = dst;
    }
    T* y = y_.data<T>();
    const std::int64_t ra = x[0].row_size(), rb = x[1].row_size();
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t i = 0; i < I; ++i) {
        const T* xa = rows[0] + b * ra + in_[0].offsets[static_cast<std::size_t>(i)];
        for (std::int64_t j = 0; j < J; ++j) {
          const T* xb = rows[1] + b * rb + in_[1].offsets[static_cast<std::size_t>(j)];
          T acc = T(0);
          for (std::int64_t t = 0; t < K; ++t) acc += xa[t * in_[0].stride] * xb[t * in_[1].stride];
          y[(b * I + i) * J + j] = acc;
        }
      }
  });
  return y_;
}

std::vector<Tensor> Dot::backward_inputs(const Tensor& dy) {
  const std::int64_t batch = dy.dim(0);
  const auto I = static_cast<std::int64_t>(in_[0].offsets.size());
  const auto J = static_cast<std::int64_t>(in_[1].offsets.size());
  const std::int64_t K = in_[0].size;
  std::vector<Tensor> dx;
  for (int k = 0; k < 2; ++k) {
    Tensor g(x_[static_cast<std::size_t>(k)].shape(), dtype_);
    g.fill(0.0);
    dx.push_back(g);
  }
  dispatch_floating(dtype_, "layers", [&](auto tag) {
    using T = decltype(tag);
    const T* rows[2];
    for (int k = 0; k < 2; ++k) rows[k] = (normalize_ ? xn_[k] : x_[static_cast<std::size_t>(k)]).data<T>();
    const std::int64_t ra = x_[0].row_size(), rb = x_[1].row_size();
    const T* g = dy.data<T>();
    T* da = dx[0].data<T>();
    T* db = dx[1].data<T>();
    // d(x_a)[b, i, t] = sum_j dy[b, i, j] x_b[b, j, t]; d(x_b)[b, j, t] = sum_i dy[b, i, j] x_a[b, i, t].
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t i = 0; i < I; ++i) {
        const std::int64_t oa = b * ra + in_[0].offsets[static_cast<std::size_t>(i)];
        for (std::int64_t j = 0; j < J; ++j) {
          const std::int64_t ob = b * rb + in_[1].offsets[static_cast<std::size_t>(j)];
          const T gij = g[(b * I + i) * J + j];
          for (std::int64_t t = 0; t < K; ++t) {
            da[oa + t * in_[0].stride] += gij * rows[1][ob + t * in_[1].stride];
            db[ob + t * in_[1].stride] += gij * rows[0][oa + t * in_[0].stride];
          }
        }
      }
    if (!normalize_) return;
    // Through x * r, r = min(rsqrt(s), 1e7): dx = r g - x r^3 <g, x> where r is the rsqrt, and
    // r g where the cap holds (TF's minimum sends the gradient to the cap for rsqrt > 1e7).
    for (int k = 0; k < 2; ++k) {
      const Tensor& in = x_[static_cast<std::size_t>(k)];
      const Operand& op = in_[k];
      const auto n = static_cast<std::int64_t>(op.offsets.size());
      const T* src = in.data<T>();
      const T* inv = inv_[k].data<T>();
      T* d = dx[static_cast<std::size_t>(k)].data<T>();
      const std::int64_t row = in.row_size();
      const T cap = static_cast<T>(kInverseNormCap);
      for (std::int64_t b = 0; b < batch; ++b)
        for (std::int64_t i = 0; i < n; ++i) {
          const std::int64_t base = b * row + op.offsets[static_cast<std::size_t>(i)];
          const T r = inv[b * n + i];
          T s = T(0), gx = T(0);
          for (std::int64_t t = 0; t < op.size; ++t) {
            const T v = src[base + t * op.stride];
            s += v * v;
            gx += d[base + t * op.stride] * v;
          }
          const bool capped = !(T(1) / std::sqrt(s) <= cap);
          for (std::int64_t t = 0; t < op.size; ++t) {
            T& e = d[base + t * op.stride];
            e = capped ? e * r : r * e - src[base + t * op.stride] * r * r * r * gx;
          }
        }
    }
  });
  return dx;
}

std::unique_ptr<Layer> Dot::clone() const {
  auto copy = std::make_unique<Dot>(name_, axes_, normalize_);
  copy->copy_merge_state(*this);
  if (built_) copy->after_build();
  return copy;
}

Json Dot::config() const {
  Json c = Layer::config();
  if (axes_.size() == 1) {
    c.set("axes", Json(static_cast<std::int64_t>(axes_[0])));
  } else {
    Json pair = Json::array();
    for (int a : axes_) pair.push_back(Json(static_cast<std::int64_t>(a)));
    c.set("axes", pair);
  }
  c.set("normalize", normalize_);
  return c;
}

std::unique_ptr<Layer> Dot::from_config(const Json& c) {
  const std::string name = c.at("name").as_string();
  const Json& axes = c.at("axes");
  std::vector<int> list;
  const auto as_axis = [&](const Json& v) {
    MDTRAIN_CHECK(v.is_number() && std::trunc(v.as_number()) == v.as_number(), std::invalid_argument,
                  "[layers] Dot layer \"", name, "\": Invalid format for argument `axes`: list elements should be ",
                  "integers. Received: axes=", axes.dump());
    return static_cast<int>(v.as_number());
  };
  if (axes.is_array()) {
    MDTRAIN_CHECK(axes.size() == 2, std::invalid_argument, "[layers] Dot layer \"", name,
                  "\": Invalid format for argument `axes`: it should contain two elements. Received: axes=",
                  axes.dump());
    for (std::size_t k = 0; k < 2; ++k) list.push_back(as_axis(axes.as_array()[k]));
  } else {
    list.push_back(as_axis(axes));
  }
  return std::make_unique<Dot>(name, list, c.get("normalize", false).as_bool());
}

}  // namespace mdtrain
