#pragma once
// Turns a runtime DType into a compile-time element type: the one place every kernel family
// (ops/cpu, ops/cuda host code, optim, core) switches on DType, so an unsupported dtype fails the
// same way everywhere.
//
//   dispatch_floating(t.dtype(), "ops", [&](auto tag) { using T = decltype(tag); ... });
//
// f is called with a value-initialised T (the tag) and its result is returned. An unsupported
// dtype throws std::invalid_argument("[<area>] ...") naming it, before f runs.
#include <cstdint>
#include <stdexcept>
#include <utility>

#include "mdtrain/core/dtype.h"
#include "mdtrain/core/errors.h"

namespace mdtrain {

// T = float or double.
template <class F>
decltype(auto) dispatch_floating(DType dtype, const char* area, F&& f) {
  switch (dtype) {
    case DType::Float32: return std::forward<F>(f)(float{});
    case DType::Float64: return std::forward<F>(f)(double{});
    default: break;
  }
  throw std::invalid_argument(cat("[", area, "] expected a float32 or float64 tensor, got ", name_of(dtype)));
}

// T = any element type of DType (float, double, int32, int64, uint8).
template <class F>
decltype(auto) dispatch_any(DType dtype, const char* area, F&& f) {
  switch (dtype) {
    case DType::Float32: return std::forward<F>(f)(float{});
    case DType::Float64: return std::forward<F>(f)(double{});
    case DType::Int32: return std::forward<F>(f)(std::int32_t{});
    case DType::Int64: return std::forward<F>(f)(std::int64_t{});
    case DType::UInt8: return std::forward<F>(f)(std::uint8_t{});
  }
  throw std::invalid_argument(cat("[", area, "] unknown dtype ", static_cast<int>(dtype)));
}

}  // namespace mdtrain
