#include "mdtrain/ops/strided_view.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <string>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cpu/strided_view_kernels.h"
#include "mdtrain/ops/cuda/strided_view_kernels.h"
#include "mdtrain/ops/device_checks.h"

namespace mdtrain::ops {

namespace {

std::string list(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The largest offset the iteration reaches (every extent > 0, strides >= 0).
std::int64_t last_offset(const std::vector<std::int64_t>& extent, const std::vector<std::int64_t>& stride) {
  std::int64_t last = 0;
  for (std::size_t d = 0; d < extent.size(); ++d) last += (extent[d] - 1) * stride[d];
  return last;
}

// A sufficient test that no two indices of extent land on one element: ordered by stride, each
// dimension's stride steps past everything the smaller ones reach (true of every layer's plan).
bool writes_each_once(const std::vector<std::int64_t>& extent, const std::vector<std::int64_t>& stride) {
  std::vector<std::size_t> dims;
  for (std::size_t d = 0; d < extent.size(); ++d)
    if (extent[d] > 1) dims.push_back(d);
  std::sort(dims.begin(), dims.end(), [&](std::size_t a, std::size_t b) { return stride[a] < stride[b]; });
  std::int64_t reach = 0;
  for (auto d : dims) {
    if (stride[d] <= reach) return false;
    reach += (extent[d] - 1) * stride[d];
  }
  return true;
}

[[noreturn]] void bad_plan(const Tensor& src, const Tensor& dst, const ViewPlan& plan, const char* why) {
  fail<std::invalid_argument>("[ops] strided_view: ", why, "; plan ", describe(plan), ", src ", to_string(src.shape()),
                              " ", name_of(src.dtype()), ", dst ", to_string(dst.shape()), " ", name_of(dst.dtype()));
}

}  // namespace

std::string describe(const ViewPlan& plan) {
  std::ostringstream os;
  os << "extent " << list(plan.extent) << " src_stride " << list(plan.src_stride) << " dst_stride "
     << list(plan.dst_stride) << " src_offset " << plan.src_offset << " dst_offset " << plan.dst_offset;
  if (!plan.reduce_extent.empty())
    os << " reduce_extent " << list(plan.reduce_extent) << " reduce_src_stride " << list(plan.reduce_src_stride);
  return os.str();
}

void strided_view(const Tensor& src, Tensor& dst, const ViewPlan& plan) {
  if (!is_floating(src.dtype()) || src.dtype() != dst.dtype())
    bad_plan(src, dst, plan, "src and dst must have one floating dtype");
  const std::size_t rank = plan.extent.size(), reduce_rank = plan.reduce_extent.size();
  if (plan.src_stride.size() != rank || plan.dst_stride.size() != rank || plan.reduce_src_stride.size() != reduce_rank)
    bad_plan(src, dst, plan, "every stride list must have one entry per extent");
  if (rank < 1 || rank > static_cast<std::size_t>(math::kMaxViewRank) ||
      reduce_rank > static_cast<std::size_t>(math::kMaxViewRank))
    bad_plan(src, dst, plan, "a plan has 1 to 8 dimensions (and at most 8 reduced)");
  const auto negative = [](const std::vector<std::int64_t>& v) {
    return std::any_of(v.begin(), v.end(), [](std::int64_t x) { return x < 0; });
  };
  if (negative(plan.extent) || negative(plan.reduce_extent) || negative(plan.src_stride) || negative(plan.dst_stride) ||
      negative(plan.reduce_src_stride) || plan.src_offset < 0 || plan.dst_offset < 0)
    bad_plan(src, dst, plan, "extents, strides and offsets must be >= 0");
  const auto product = [](const std::vector<std::int64_t>& v) {
    return std::accumulate(v.begin(), v.end(), std::int64_t{1}, std::multiplies<std::int64_t>());
  };
  const std::int64_t count = product(plan.extent), reduce_count = product(plan.reduce_extent);
  if (count > 0 && reduce_count == 0) bad_plan(src, dst, plan, "an empty reduction has no value to write");
  if (count > 0) {
    if (plan.dst_offset + last_offset(plan.extent, plan.dst_stride) >= dst.numel())
      bad_plan(src, dst, plan, "the plan writes past the end of dst");
    if (plan.src_offset + last_offset(plan.extent, plan.src_stride) +
            last_offset(plan.reduce_extent, plan.reduce_src_stride) >=
        src.numel())
      bad_plan(src, dst, plan, "the plan reads past the end of src");
    if (!writes_each_once(plan.extent, plan.dst_stride))
      bad_plan(src, dst, plan, "dst_stride writes some element more than once");
  }
  if (src.raw() != nullptr && src.raw() == dst.raw()) bad_plan(src, dst, plan, "src and dst must not be one storage");
  detail::require_usable_device("ops", "strided_view", "dst", dst);
  detail::require_same_memory("ops", "strided_view", "src", src, dst);
  if (count == 0) return;

  math::ViewArrays v;
  v.rank = static_cast<int>(rank);
  v.reduce_rank = static_cast<int>(reduce_rank);
  std::copy(plan.extent.begin(), plan.extent.end(), v.extent);
  std::copy(plan.src_stride.begin(), plan.src_stride.end(), v.src_stride);
  std::copy(plan.dst_stride.begin(), plan.dst_stride.end(), v.dst_stride);
  std::copy(plan.reduce_extent.begin(), plan.reduce_extent.end(), v.reduce_extent);
  std::copy(plan.reduce_src_stride.begin(), plan.reduce_src_stride.end(), v.reduce_stride);
  v.count = count;
  v.reduce_count = reduce_count;
  v.src_offset = plan.src_offset;
  v.dst_offset = plan.dst_offset;
  if (!dst.device().is_cpu()) return cuda::strided_view(src, dst, v);
  dispatch_floating(dst.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::strided_view<T>(src.data<T>(), dst.data<T>(), v);
  });
}

}  // namespace mdtrain::ops
