#include "mdtrain/ops/optimizer_ops.h"

#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/ops/cpu/optimizer_kernels.h"
#include "mdtrain/ops/cuda/optimizer_kernels.h"

namespace mdtrain::ops {

namespace {

void check(const char* op, const Device& device, DType dtype, const std::vector<UpdateSegment>& segments,
           int slot_count) {
  MDTRAIN_CHECK(is_floating(dtype), std::invalid_argument, "[ops] ", op,
                ": parameters must be float32 or float64, got ", name_of(dtype));
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const UpdateSegment& s = segments[i];
    MDTRAIN_CHECK(s.size >= 0, std::invalid_argument, "[ops] ", op, ": segment ", i, " has size ", s.size);
    if (s.size == 0) continue;
    MDTRAIN_CHECK(s.value && s.grad, std::invalid_argument, "[ops] ", op, ": segment ", i,
                  " has a null value or gradient");
    for (int k = 0; k < slot_count; ++k)
      MDTRAIN_CHECK(s.slots[k], std::invalid_argument, "[ops] ", op, ": segment ", i, " needs ", slot_count,
                    " slots but slot ", k, " is null");
  }
  if (!device.is_cpu()) {
    MDTRAIN_CHECK(device.index >= 0 && device.index < cuda::device_count(), std::invalid_argument, "[ops] ", op, ": ",
                  device.to_string(), " is not a usable GPU", cuda::unavailable_reason().empty() ? "" : ": ",
                  cuda::unavailable_reason());
  }
}

}  // namespace

void sgd_update(const Device& device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                double momentum, bool nesterov, double clip_value) {
  check("sgd_update", device, dtype, segments, momentum == 0.0 ? 0 : 1);
  if (device.is_cpu()) cpu::sgd_update(dtype, segments, learning_rate, momentum, nesterov, clip_value);
  else cuda::sgd_update(device.index, dtype, segments, learning_rate, momentum, nesterov, clip_value);
}

void adam_update(const Device& device, DType dtype, const std::vector<UpdateSegment>& segments, double alpha,
                 double beta_1, double beta_2, double epsilon, bool amsgrad, double clip_value) {
  check("adam_update", device, dtype, segments, amsgrad ? 3 : 2);
  if (device.is_cpu()) cpu::adam_update(dtype, segments, alpha, beta_1, beta_2, epsilon, amsgrad, clip_value);
  else cuda::adam_update(device.index, dtype, segments, alpha, beta_1, beta_2, epsilon, amsgrad, clip_value);
}

void rmsprop_update(const Device& device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                    double rho, double momentum, double epsilon, bool centered, double clip_value) {
  check("rmsprop_update", device, dtype, segments, 1 + (momentum > 0 ? 1 : 0) + (centered ? 1 : 0));
  if (device.is_cpu())
    cpu::rmsprop_update(dtype, segments, learning_rate, rho, momentum, epsilon, centered, clip_value);
  else cuda::rmsprop_update(device.index, dtype, segments, learning_rate, rho, momentum, epsilon, centered, clip_value);
}

void adagrad_update(const Device& device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                    double epsilon, double clip_value) {
  check("adagrad_update", device, dtype, segments, 1);
  if (device.is_cpu()) cpu::adagrad_update(dtype, segments, learning_rate, epsilon, clip_value);
  else cuda::adagrad_update(device.index, dtype, segments, learning_rate, epsilon, clip_value);
}

}  // namespace mdtrain::ops
