#include "mdtrain/ops/masked_pooling.h"

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cpu/masked_pooling_kernels.h"

namespace mdtrain::ops {

namespace {
// Both tensors defined, floating, of one dtype (the devices are checked with the shapes).
void require_float_pair(const char* op, const Tensor& a, const char* what_a, const Tensor& b, const char* what_b) {
  MDTRAIN_CHECK(a.defined() && b.defined(), std::invalid_argument, "[ops] ", op, ": ", a.defined() ? what_b : what_a,
                " is undefined");
  MDTRAIN_CHECK(is_floating(a.dtype()) && a.dtype() == b.dtype(), std::invalid_argument, "[ops] ", op, ": ", what_a,
                " and ", what_b, " must be float tensors of one dtype, got ", name_of(a.dtype()), " and ",
                name_of(b.dtype()));
}

void check_masked_shapes(const char* op, const Tensor& seq, const char* seq_name, const Tensor& pooled,
                         const char* pooled_name, const std::vector<std::uint8_t>& mask) {
  MDTRAIN_CHECK(seq.ndim() == 3, std::invalid_argument, "[ops] ", op, ": ", seq_name,
                " must be (batch, steps, channels), got ", to_string(seq.shape()));
  const std::int64_t batch = seq.dim(0), steps = seq.dim(1), channels = seq.dim(2);
  MDTRAIN_CHECK(pooled.numel() == batch * channels, std::invalid_argument, "[ops] ", op, ": ", pooled_name, " ",
                to_string(pooled.shape()), " does not hold ", batch, " x ", channels, " values for ", seq_name, " ",
                to_string(seq.shape()));
  MDTRAIN_CHECK(static_cast<std::int64_t>(mask.size()) == batch * steps, std::invalid_argument, "[ops] ", op,
                ": the mask holds ", mask.size(), " steps, ", seq_name, " ", to_string(seq.shape()), " has ",
                batch * steps);
  MDTRAIN_CHECK(seq.device().is_cpu() && pooled.device().is_cpu(), std::invalid_argument, "[ops] ", op,
                ": masks are supported on CPU devices only, got tensors on ", seq.device().to_string(), " and ",
                pooled.device().to_string());
}
}  // namespace

void masked_mean_steps(const Tensor& x, const std::vector<std::uint8_t>& mask, Tensor& y) {
  require_float_pair("masked_mean_steps", x, "x", y, "y");
  check_masked_shapes("masked_mean_steps", x, "x", y, "y", mask);
  dispatch_floating(x.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::masked_mean_steps<T>(x.data<T>(), mask.data(), x.dim(0), x.dim(1), x.dim(2), y.data<T>());
  });
}

void masked_mean_steps_backward(const Tensor& dy, const std::vector<std::uint8_t>& mask, Tensor& dx) {
  require_float_pair("masked_mean_steps_backward", dy, "dy", dx, "dx");
  check_masked_shapes("masked_mean_steps_backward", dx, "dx", dy, "dy", mask);
  dispatch_floating(dy.dtype(), "ops", [&](auto tag) {
    using T = decltype(tag);
    cpu::masked_mean_steps_backward<T>(dy.data<T>(), mask.data(), dx.dim(0), dx.dim(1), dx.dim(2), dx.data<T>());
  });
}

}  // namespace mdtrain::ops
