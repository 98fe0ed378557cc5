#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace mdtrain {

// Element types. Training runs in Float32; Float64 exists so gradient checks can run the same
// layers in double precision; integer types carry labels.
enum class DType : std::uint8_t { Float32, Float64, Int32, Int64, UInt8 };

std::size_t size_of(DType dtype);
const char* name_of(DType dtype);

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr DType value = DType::UInt8;
};

inline bool is_floating(DType dtype) { return dtype == DType::Float32 || dtype == DType::Float64; }

}  // namespace mdtrain
