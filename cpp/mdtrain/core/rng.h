#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11). A value depends only on
// (seed, stream, counter), never on call order or thread timing: that is what makes dropout and
// initialisation reproducible across runs, replica counts and devices (the same functions run in
// CUDA kernels).
#include <cmath>
#include <cstdint>

#include "mdtrain/core/hd.h"

namespace mdtrain {

// Seeds are stored in model files as JSON numbers (doubles): they must stay below 2^53 to read
// back exactly.
constexpr std::uint64_t kMaxSeed = (1ull << 53) - 1;

struct Philox4 {
  std::uint32_t v[4];
};

MDTRAIN_HD Philox4 philox4x32(std::uint64_t seed, std::uint64_t stream, std::uint64_t counter) {
  std::uint32_t c0 = static_cast<std::uint32_t>(counter), c1 = static_cast<std::uint32_t>(counter >> 32);
  std::uint32_t c2 = static_cast<std::uint32_t>(stream), c3 = static_cast<std::uint32_t>(stream >> 32);
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c0;
    std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c2;
    std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
    std::uint32_t n1 = static_cast<std::uint32_t>(p1);
    std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
    std::uint32_t n3 = static_cast<std::uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 24 random bits (exactly representable in float32).
MDTRAIN_HD float uniform_from_bits(std::uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

// Deterministic generator: element i of stream s under seed k is philox(k, s, i / 4)[i % 4].
class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0, std::uint64_t stream = 0) : seed_(seed), stream_(stream) {}
  std::uint32_t next_u32() {
    if (lane_ == 4) {
      block_ = philox4x32(seed_, stream_, counter_++);
      lane_ = 0;
    }
    return block_.v[lane_++];
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() {
    std::uint64_t hi = next_u32() >> 5, lo = next_u32() >> 6;
    return (static_cast<double>(hi) * 67108864.0 + static_cast<double>(lo)) * (1.0 / 9007199254740992.0);
  }
  double normal() {  // Box-Muller
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Uniform integer in [0, n) without modulo bias worth noticing (n << 2^64).
  std::uint64_t below(std::uint64_t n) {
    std::uint64_t r = (static_cast<std::uint64_t>(next_u32()) << 32) | next_u32();
    return r % n;
  }
  std::uint64_t seed() const { return seed_; }
  std::uint64_t stream() const { return stream_; }

 private:
  std::uint64_t seed_, stream_, counter_ = 0;
  Philox4 block_{};
  int lane_ = 4;
};

}  // namespace mdtrain
