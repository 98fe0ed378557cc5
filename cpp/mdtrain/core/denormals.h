#pragma once
// Denormal (subnormal) floats flushed to zero on this thread for a scope.
//
// An x86 core takes a microcode assist, ~100 cycles, for every arithmetic operation that reads or
// produces a subnormal. Training makes them: Adam's first moment of a weight whose gradient is
// always zero (a pixel that is blank in every image, a dead ReLU unit) decays by beta_1 each step
// and spends ~150 steps below 1.2e-38 on its way to 0. On the seed model that tripled the
// update's time. TensorFlow runs every CPU op with denormals flushed; mdtrain does it where they
// arise and cost: inside the optimizer update loops. A flushed value is one below 1.2e-38, so the
// weights it updates (|w| >> 1e-30) get the same bits either way.
#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace mdtrain {

class DenormalsFlushedToZero {
 public:
#if defined(__SSE__) || defined(__x86_64__)
  // FTZ (bit 15): subnormal results become 0; DAZ (bit 6): subnormal inputs read as 0.
  DenormalsFlushedToZero() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~DenormalsFlushedToZero() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#else
  // Elsewhere (AArch64 handles subnormals at full speed) the arithmetic stays IEEE.
  DenormalsFlushedToZero() = default;
#endif

 public:
  DenormalsFlushedToZero(const DenormalsFlushedToZero&) = delete;
  DenormalsFlushedToZero& operator=(const DenormalsFlushedToZero&) = delete;
};

}  // namespace mdtrain
