#pragma once
// Helpers of the GPU tests (label "gpu"). Every test that needs a GPU starts with
// MDTRAIN_REQUIRE_GPU(), which skips it, printing why, when this process sees no CUDA device (a
// CPU-only build, no driver, or no GPU): that is what CI prints on a machine without one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>

#include "mdtrain/core/tensor.h"
#include "mdtrain/core/cuda/runtime.h"

#define MDTRAIN_REQUIRE_GPU()                                                              \
  do {                                                                                     \
    if (::mdtrain::cuda::device_count() == 0 && !::mdtrain::gpu_testing::harness_on_cpu()) \
      GTEST_SKIP() << "no CUDA device: " << ::mdtrain::cuda::unavailable_reason();         \
  } while (0)

// For tests that call cuda:: functions directly (no host stand-in exists for them).
#define MDTRAIN_REQUIRE_REAL_GPU()                                                 \
  do {                                                                             \
    if (::mdtrain::cuda::device_count() == 0)                                      \
      GTEST_SKIP() << "no CUDA device: " << ::mdtrain::cuda::unavailable_reason(); \
  } while (0)

namespace mdtrain::gpu_testing {

// MDTRAIN_GPU_TESTS_ON_CPU=1 runs the GPU tests that go through the ops API with host tensors in
// place of GPU ones: a check of the tests themselves (inputs, tolerances, bookkeeping) where there
// is no GPU. It says nothing about the CUDA kernels.
inline bool harness_on_cpu() {
  const char* e = std::getenv("MDTRAIN_GPU_TESTS_ON_CPU");
  return e && std::string(e) == "1";
}

inline const Device kGpu = harness_on_cpu() ? Device{} : Device{DeviceKind::CUDA, 0};

// Uniform values in [lo, hi) (integers: whole numbers in that range), reproducible by seed.
inline Tensor random_tensor(const Shape& shape, DType dtype, unsigned seed, double lo = -1.0, double hi = 1.0) {
  Tensor t(shape, dtype);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const double v = u(gen);
    switch (dtype) {
      case DType::Float32: t.data<float>()[i] = static_cast<float>(v); break;
      case DType::Float64: t.data<double>()[i] = v; break;
      case DType::Int32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(std::floor(v)); break;
      case DType::Int64: t.data<std::int64_t>()[i] = static_cast<std::int64_t>(std::floor(v)); break;
      case DType::UInt8: t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(std::floor(v)); break;
    }
  }
  return t;
}

// Whole numbers in [0, classes) of any dtype: class ids (float labels too).
inline Tensor random_labels(const Shape& shape, DType dtype, unsigned seed, std::int64_t classes) {
  Tensor t = random_tensor(shape, dtype, seed, 0, static_cast<double>(classes));
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::Float32) t.data<float>()[i] = std::floor(t.data<float>()[i]);
    if (dtype == DType::Float64) t.data<double>()[i] = std::floor(t.data<double>()[i]);
  }
  return t;
}

inline Tensor to_gpu(const Tensor& host) {
  Tensor d(host.shape(), host.dtype(), kGpu);
  d.copy_from(host);
  return d;
}

inline Tensor to_host(const Tensor& t) {
  Tensor h(t.shape(), t.dtype());
  h.copy_from(t);
  return h;
}

inline double at(const Tensor& t, std::int64_t i) {
  return t.dtype() == DType::Float32 ? static_cast<double>(t.data<float>()[i]) : t.data<double>()[i];
}

// Empty when every element of got (any device) is within atol + rtol * |want| of want (a host
// tensor), NaN matching NaN; else the first difference.
inline std::string compare(const Tensor& got_any, const Tensor& want, double rtol, double atol) {
  const Tensor got = got_any.device().is_cpu() ? got_any : to_host(got_any);
  if (got.numel() != want.numel()) return "element counts differ";
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const double g = at(got, i), w = at(want, i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    if (!(std::abs(g - w) <= atol + rtol * std::abs(w))) {
      std::ostringstream os;
      os.precision(17);
      os << "element " << i << ": gpu " << g << ", cpu " << w;
      return os.str();
    }
  }
  return "";
}

// Bitwise equality of the raw bytes.
inline bool same_bytes(const Tensor& got_any, const Tensor& want) {
  const Tensor got = got_any.device().is_cpu() ? got_any : to_host(got_any);
  return got.nbytes() == want.nbytes() && std::memcmp(got.raw(), want.raw(), want.nbytes()) == 0;
}

// Tolerances of one float32 / float64 operation chain against the CPU (different exp/erf, FMA).
inline double rtol_of(DType d) { return d == DType::Float32 ? 2e-5 : 1e-12; }

}  // namespace mdtrain::gpu_testing
