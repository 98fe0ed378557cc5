#include "mdtrain/core/tensor.h"

#include <cstring>
#include <limits>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/allocator.h"
#include "mdtrain/core/cuda/device_memory.h"
#include "mdtrain/core/host_memory.h"

namespace mdtrain {

namespace {
std::int64_t checked_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    MDTRAIN_CHECK(d >= 0, std::invalid_argument, "[tensor] negative dimension in shape ", to_string(shape));
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d)
      fail<AllocationError>("[tensor] shape ", to_string(shape), " has too many elements");
    n *= d;
  }
  return n;
}
}  // namespace

Tensor::Tensor(Shape shape, DType dtype, Device device)
    : shape_(std::move(shape)), numel_(checked_numel(shape_)), dtype_(dtype), device_(device) {
  std::size_t elem = size_of(dtype);
  if (numel_ > 0 && static_cast<std::uint64_t>(numel_) > std::numeric_limits<std::size_t>::max() / elem)
    fail<AllocationError>("[tensor] shape ", to_string(shape_), " is too large to allocate");
  try {
    storage_ = allocate(device_, static_cast<std::size_t>(numel_) * elem);
  } catch (const HostMemoryExhausted& e) {
    // Named by what it is for: the caller (a layer building its weights) adds whose it is.
    throw HostMemoryExhausted(cat("[tensor] a ", name_of(dtype_), " tensor of shape ", to_string(shape_), " needs ",
                                  format_bytes(e.requested), " (", e.requested, " bytes), ", format_bytes(e.available),
                                  " available (", e.sources, ")"),
                              e.requested, e.available, e.sources);
  }
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t(std::move(shape), dtype, device);
  if (device.is_cpu()) std::memset(t.raw(), 0, t.nbytes());
  else cuda::zero(t.raw(), device, t.nbytes());
  return t;
}

Tensor Tensor::wrap(void* data, Shape shape, DType dtype, std::shared_ptr<void> owner, Device device) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.numel_ = checked_numel(t.shape_);
  t.dtype_ = dtype;
  t.device_ = device;
  // Aliasing constructor: keeps `owner` alive while pointing at `data`.
  t.storage_ = std::shared_ptr<void>(std::move(owner), data);
  return t;
}

std::int64_t Tensor::dim(int axis) const {
  int n = ndim();
  int a = axis < 0 ? axis + n : axis;
  MDTRAIN_CHECK(a >= 0 && a < n, std::out_of_range, "[tensor] axis ", axis, " out of range for shape ",
                to_string(shape_));
  return shape_[a];
}

std::int64_t Tensor::row_size() const {
  return ndim() == 0 ? 1
                     : (shape_[0] == 0 ? mdtrain::numel(Shape(shape_.begin() + 1, shape_.end())) : numel_ / shape_[0]);
}

Tensor Tensor::rows(std::int64_t begin, std::int64_t end) const {
  MDTRAIN_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], std::out_of_range, "[tensor] rows [",
                begin, ", ", end, ") out of range for shape ", to_string(shape_));
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.numel_ = mdtrain::numel(t.shape_);
  t.offset_ += static_cast<std::size_t>(begin * row_size()) * size_of(dtype_);
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  int infer = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      MDTRAIN_CHECK(infer < 0, std::invalid_argument, "[tensor] reshape to ", to_string(shape),
                    ": only one dimension may be -1");
      infer = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0 && known > 0) shape[infer] = numel_ / known;
  MDTRAIN_CHECK(mdtrain::numel(shape) == numel_, std::invalid_argument, "[tensor] cannot reshape ", to_string(shape_),
                " (", numel_, " elements) to ", to_string(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(shape_, dtype_, device_);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  MDTRAIN_CHECK(src.numel() == numel_ && src.dtype() == dtype_, std::invalid_argument, "[tensor] copy_from: source ",
                to_string(src.shape()), " ", name_of(src.dtype()), " does not match destination ", to_string(shape_),
                " ", name_of(dtype_));
  const bool both_host = device_.is_cpu() && src.device().is_cpu();  // logical CPUs share memory
  if (!nbytes() || (same_storage(src) && (both_host || device_ == src.device()))) return;
  // Host and GPU tensors copy into each other (ordered on the GPU's compute stream).
  if (both_host) std::memcpy(raw(), src.raw(), nbytes());
  else cuda::copy(raw(), device_, src.raw(), src.device(), nbytes());
}

void Tensor::fill(double value) {
  if (!device_.is_cpu()) {
    cuda::fill(raw(), device_, dtype_, numel_, value);
    return;
  }
  dispatch_any(dtype_, "tensor", [&](auto tag) {
    using T = decltype(tag);
    T* p = data<T>();
    for (std::int64_t i = 0; i < numel_; ++i) p[i] = static_cast<T>(value);
  });
}

void Tensor::check_dtype(DType requested) const {
  MDTRAIN_CHECK(requested == dtype_, std::invalid_argument, "[tensor] tensor of dtype ", name_of(dtype_),
                " accessed as ", name_of(requested));
}

}  // namespace mdtrain
