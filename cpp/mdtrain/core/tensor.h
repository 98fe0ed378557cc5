#pragma once
#include <cstdint>
#include <memory>

#include "mdtrain/core/device.h"
#include "mdtrain/core/dtype.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/core/shape.h"

namespace mdtrain {

// A dense, row-major, contiguous n-dimensional array on one device. Copies of a Tensor share
// storage (like a NumPy view); clone() makes a deep copy. Views along the first axis
// (rows(begin, end)) and reshapes share storage too, which is how a batch is cut into
// per-replica slices without copying.
class Tensor {
 public:
  Tensor() = default;
  // Allocates uninitialised storage.
  Tensor(Shape shape, DType dtype = DType::Float32, Device device = {});

  static Tensor zeros(Shape shape, DType dtype = DType::Float32, Device device = {});
  // Wraps memory owned elsewhere (e.g. a NumPy array kept alive by `owner`); no copy.
  static Tensor wrap(void* data, Shape shape, DType dtype, std::shared_ptr<void> owner, Device device = {});

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t dim(int axis) const;
  std::int64_t numel() const { return numel_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * size_of(dtype_); }
  DType dtype() const { return dtype_; }
  const Device& device() const { return device_; }

  void* raw() { return static_cast<char*>(storage_.get()) + offset_; }
  const void* raw() const { return static_cast<const char*>(storage_.get()) + offset_; }

  template <class T>
  T* data() {
    check_dtype(dtype_of<T>::value);
    return static_cast<T*>(raw());
  }
  template <class T>
  const T* data() const {
    check_dtype(dtype_of<T>::value);
    return static_cast<const T*>(raw());
  }

  // View of rows [begin, end) along axis 0.
  Tensor rows(std::int64_t begin, std::int64_t end) const;
  // View with a new shape of the same element count; one dimension may be -1.
  Tensor reshape(Shape shape) const;

  Tensor clone() const;
  // Copies `src` (same shape and dtype) into this tensor's storage.
  void copy_from(const Tensor& src);
  void fill(double value);
  // Element count of trailing dimensions: the size of one row along axis 0.
  std::int64_t row_size() const;
  // The allocation this tensor views (shared by its copies and views).
  const std::shared_ptr<void>& storage() const { return storage_; }
  // True when both tensors refer to the very same elements.
  bool same_storage(const Tensor& other) const { return raw() == other.raw(); }

 private:
  void check_dtype(DType requested) const;

  std::shared_ptr<void> storage_;
  std::size_t offset_ = 0;  // bytes
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::Float32;
  Device device_;
};

}  // namespace mdtrain
