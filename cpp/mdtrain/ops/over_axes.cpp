#include "mdtrain/ops/over_axes.h"

#include <algorithm>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cpu/activation_layer_kernels.h"
#include "mdtrain/ops/cuda/activation_layer_kernels.h"
#include "mdtrain/ops/device_checks.h"

namespace mdtrain::ops {

namespace {

std::string axes_text(const std::vector<int>& axes) {
  std::string s = "(";
  for (std::size_t i = 0; i < axes.size(); ++i) s += (i ? ", " : "") + std::to_string(axes[i]);
  return s + ")";
}

// `t` is a defined floating tensor of `like`'s shape and dtype, in its memory.
void check_like(const char* op, const char* what, const Tensor& t, const char* like_what, const Tensor& like) {
  MDTRAIN_CHECK(t.defined() && like.defined(), std::invalid_argument, "[ops] ", op, ": ", what, " and ", like_what,
                " must be defined");
  MDTRAIN_CHECK(is_floating(like.dtype()) && t.dtype() == like.dtype() && t.shape() == like.shape(),
                std::invalid_argument, "[ops] ", op, ": ", what, " must be ", like_what, "'s floating dtype and shape ",
                name_of(like.dtype()), " ", to_string(like.shape()), ", got ", name_of(t.dtype()), " ",
                to_string(t.shape()));
  detail::require_usable_device("ops", op, what, t);
  detail::require_same_memory("ops", op, what, t, like, like_what);
}

}  // namespace

math::AxesPlan axes_plan(const char* op, const Shape& shape, const std::vector<int>& axes) {
  const int rank = static_cast<int>(shape.size());
  std::vector<bool> reduced(shape.size(), false);
  MDTRAIN_CHECK(!axes.empty(), std::invalid_argument, "[ops] ", op, ": no axes given for a tensor of shape ",
                to_string(shape));
  for (int a : axes) {
    MDTRAIN_CHECK(a >= 0 && a < rank && !reduced[static_cast<std::size_t>(a)], std::invalid_argument, "[ops] ", op,
                  ": axes ", axes_text(axes), " must be distinct axes of a tensor of shape ", to_string(shape));
    reduced[static_cast<std::size_t>(a)] = true;
  }
  // Groups of adjacent axes of one kind, axes of extent 1 left out (they move no offset).
  struct Group {
    bool reduced;
    std::int64_t extent, stride;
  };
  std::vector<Group> groups;
  std::int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    const std::int64_t n = shape[static_cast<std::size_t>(d)];
    const bool r = reduced[static_cast<std::size_t>(d)];
    if (n != 1) {
      if (!groups.empty() && groups.back().reduced == r) groups.back().extent *= n;
      else groups.push_back({r, n, stride});
    }
    stride *= n;
  }
  std::reverse(groups.begin(), groups.end());
  math::AxesPlan p;
  for (const Group& g : groups) {
    int& k = g.reduced ? p.reduced_rank : p.kept_rank;
    MDTRAIN_CHECK(k < math::kMaxViewRank, std::invalid_argument, "[ops] ", op, ": axes ", axes_text(axes), " of shape ",
                  to_string(shape), " make more than ", math::kMaxViewRank, " groups of axes");
    (g.reduced ? p.reduced_extent : p.kept_extent)[k] = g.extent;
    (g.reduced ? p.reduced_stride : p.kept_stride)[k] = g.stride;
    (g.reduced ? p.row_length : p.rows) *= g.extent;
    ++k;
  }
  // row_of: the kept groups' row-major strides over the rows, 0 on the reduced ones.
  p.rank = static_cast<int>(groups.size());
  std::int64_t row_stride = 1;
  for (int g = p.rank - 1; g >= 0; --g) {
    p.extent[g] = groups[static_cast<std::size_t>(g)].extent;
    p.row_stride[g] = groups[static_cast<std::size_t>(g)].reduced ? 0 : row_stride;
    if (!groups[static_cast<std::size_t>(g)].reduced) row_stride *= p.extent[g];
  }
  return p;
}

void softmax_over_axes(const Tensor& x, const std::vector<int>& axes, Tensor& y) {
  check_like("softmax_over_axes", "y", y, "x", x);
  const math::AxesPlan plan = axes_plan("softmax_over_axes", x.shape(), axes);
  if (x.numel() == 0) return;
  if (!y.device().is_cpu()) return cuda::softmax_over_axes(x, plan, y);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::softmax_over_axes<T>(x.data<T>(), plan, y.data<T>());
  });
}

void softmax_over_axes_backward(const Tensor& y, const Tensor& dy, const std::vector<int>& axes, Tensor& dx) {
  check_like("softmax_over_axes_backward", "dy", dy, "y", y);
  check_like("softmax_over_axes_backward", "dx", dx, "y", y);
  const math::AxesPlan plan = axes_plan("softmax_over_axes_backward", y.shape(), axes);
  if (y.numel() == 0) return;
  if (!dx.device().is_cpu()) return cuda::softmax_over_axes_backward(y, dy, plan, dx);
  dispatch_floating(y.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::softmax_over_axes_backward<T>(y.data<T>(), dy.data<T>(), plan, dx.data<T>());
  });
}

void unit_normalize(const Tensor& x, const std::vector<int>& axes, Tensor& y) {
  check_like("unit_normalize", "y", y, "x", x);
  const math::AxesPlan plan = axes_plan("unit_normalize", x.shape(), axes);
  if (x.numel() == 0) return;
  if (!y.device().is_cpu()) return cuda::unit_normalize(x, plan, y);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::unit_normalize<T>(x.data<T>(), plan, y.data<T>());
  });
}

void unit_normalize_backward(const Tensor& x, const Tensor& dy, const std::vector<int>& axes, Tensor& dx) {
  check_like("unit_normalize_backward", "dy", dy, "x", x);
  check_like("unit_normalize_backward", "dx", dx, "x", x);
  const math::AxesPlan plan = axes_plan("unit_normalize_backward", x.shape(), axes);
  if (x.numel() == 0) return;
  if (!dx.device().is_cpu()) return cuda::unit_normalize_backward(x, dy, plan, dx);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::unit_normalize_backward<T>(x.data<T>(), dy.data<T>(), plan, dx.data<T>());
  });
}

}  // namespace mdtrain::ops
