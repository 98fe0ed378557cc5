// Fused optimizer updates: one launch per bucket of parameter ranges (blockIdx.y picks the range),
// each element updated by the rule of ops/optimizer_math.h that the host loops of
// ops/cpu/optimizer_kernels.cpp run,
// in the same order (clip, decay, update), with kernels compiled per combination of features so
// that a feature that is off costs nothing, as on the CPU.
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/core/cuda/check.h"
#include "mdtrain/ops/cuda/grid.cuh"
#include "mdtrain/ops/cuda/launch.h"
#include "mdtrain/ops/cuda/optimizer_kernels.h"
#include "mdtrain/ops/optimizer_math.h"

namespace mdtrain::cuda {

using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;

namespace {

template <class T>
struct Segment {
  T* p;
  const T* g;
  T* s0;
  T* s1;
  T* s2;
  std::int64_t n;
  T scale;  // clipnorm factor
  T decay;  // weight_decay * lr
};

// Passed by value as a kernel parameter (no host-to-device copy per step): 24 segments of at most
// 64 bytes stay far below the 4 KB parameter limit.
constexpr int kMaxSegments = 24;
template <class T>
struct Bucket {
  Segment<T> seg[kMaxSegments];
};

// The clip-then-decay prologue every CPU loop starts with.
template <class T, bool kClip, bool kDecay>
__device__ inline void prologue(const Segment<T>& s, std::int64_t i, T limit, T& g, T& p) {
  g = s.g[i];
  if constexpr (kClip) g = math::clip_gradient(g, s.scale, limit);
  p = s.p[i];
  if constexpr (kDecay) p = math::decay_weight(p, s.decay);
}

template <class T, bool kClip, bool kDecay, bool kMomentum, bool kNesterov>
__global__ void sgd_kernel(Bucket<T> b, T lr, T momentum, T limit) {
  const Segment<T>& s = b.seg[blockIdx.y];
  for (std::int64_t i = first_index(); i < s.n; i += grid_stride()) {
    T g, p;
    prologue<T, kClip, kDecay>(s, i, limit, g, p);
    if constexpr (kMomentum) math::sgd_momentum_update(p, s.s0[i], g, lr, momentum, kNesterov);
    else math::sgd_update(p, g, lr);
    s.p[i] = p;
  }
}

template <class T, bool kClip, bool kDecay, bool kAmsgrad>
__global__ void adam_kernel(Bucket<T> b, math::AdamScalars<T> sc, T limit) {
  const Segment<T>& s = b.seg[blockIdx.y];
  for (std::int64_t i = first_index(); i < s.n; i += grid_stride()) {
    T g, p;
    prologue<T, kClip, kDecay>(s, i, limit, g, p);
    if constexpr (kAmsgrad) math::adam_amsgrad_update(p, s.s0[i], s.s1[i], s.s2[i], g, sc);
    else math::adam_update(p, s.s0[i], s.s1[i], g, sc);
    s.p[i] = p;
  }
}

// Slots: s0 = velocity, s1 = momentum (kMomentum), s2 = average gradient (kCentered).
template <class T, bool kClip, bool kDecay, bool kCentered, bool kMomentum>
__global__ void rmsprop_kernel(Bucket<T> b, math::RmspropScalars<T> sc, T limit) {
  const Segment<T>& s = b.seg[blockIdx.y];
  for (std::int64_t i = first_index(); i < s.n; i += grid_stride()) {
    T g, p;
    prologue<T, kClip, kDecay>(s, i, limit, g, p);
    T inc;
    if constexpr (kCentered) inc = math::rmsprop_centered_increment(s.s0[i], s.s2[i], g, sc);
    else inc = math::rmsprop_increment(s.s0[i], g, sc);
    if constexpr (kMomentum) math::rmsprop_momentum_apply(p, s.s1[i], inc, sc.momentum);
    else math::rmsprop_apply(p, inc);
    s.p[i] = p;
  }
}

template <class T, bool kClip, bool kDecay>
__global__ void adagrad_kernel(Bucket<T> b, T lr, T epsilon, T limit) {
  const Segment<T>& s = b.seg[blockIdx.y];
  for (std::int64_t i = first_index(); i < s.n; i += grid_stride()) {
    T g, p;
    prologue<T, kClip, kDecay>(s, i, limit, g, p);
    math::adagrad_update(p, s.s0[i], g, lr, epsilon);
    s.p[i] = p;
  }
}

// Groups the segments by (clip, decay) exactly as the host kernels decide per segment, cuts each group
// into buckets of kMaxSegments, and calls launch(bool_constant clip, bool_constant decay, bucket,
// grid, stream) for each.
template <class T, class Launch>
void for_each_bucket(int device, const std::vector<UpdateSegment>& segments, double clip_value, Launch&& launch) {
  if (segments.empty()) return;
  detail::OnDevice on(device);
  const bool clip_on = clip_value != HUGE_VAL;
  for (int flags = 0; flags < 4; ++flags) {
    const bool clip = flags & 1, decay = flags & 2;
    Bucket<T> bucket{};
    int count = 0;
    std::int64_t largest = 0;
    auto flush = [&] {
      if (count == 0) return;
      const dim3 grid(blocks_for(largest), static_cast<unsigned>(count));
      auto go = [&](auto c, auto d) { launch(c, d, bucket, grid, on.stream); };
      if (clip) {
        if (decay) go(std::true_type{}, std::true_type{});
        else go(std::true_type{}, std::false_type{});
      } else {
        if (decay) go(std::false_type{}, std::true_type{});
        else go(std::false_type{}, std::false_type{});
      }
      MDTRAIN_CUDA_CHECK_LAUNCH("optimizer update kernel");
      bucket = Bucket<T>{};
      count = 0;
      largest = 0;
    };
    for (const UpdateSegment& u : segments) {
      // As the host kernels decide per segment.
      const bool seg_clip = u.grad_scale != 1.0 || clip_on;
      const bool seg_decay = u.decay != 0.0;
      if (seg_clip != clip || seg_decay != decay || u.size == 0) continue;
      bucket.seg[count] =
          Segment<T>{static_cast<T*>(u.value),     static_cast<const T*>(u.grad), static_cast<T*>(u.slots[0]),
                     static_cast<T*>(u.slots[1]),  static_cast<T*>(u.slots[2]),   u.size,
                     static_cast<T>(u.grad_scale), static_cast<T>(u.decay)};
      largest = u.size > largest ? u.size : largest;
      if (++count == kMaxSegments) flush();
    }
    flush();
  }
}

}  // namespace

void sgd_update(int device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                double momentum, bool nesterov, double clip_value) {
  dispatch_floating(dtype, "cuda", [&](auto tag) {
    using T = decltype(tag);
    const T lr = static_cast<T>(learning_rate), mom = static_cast<T>(momentum), limit = static_cast<T>(clip_value);
    for_each_bucket<T>(device, segments, clip_value,
                       [&](auto c, auto d, const Bucket<T>& b, dim3 grid, cudaStream_t s) {
                         constexpr bool kClip = decltype(c)::value, kDecay = decltype(d)::value;
                         if (momentum == 0.0)
                           sgd_kernel<T, kClip, kDecay, false, false><<<grid, kThreads, 0, s>>>(b, lr, mom, limit);
                         else if (nesterov)
                           sgd_kernel<T, kClip, kDecay, true, true><<<grid, kThreads, 0, s>>>(b, lr, mom, limit);
                         else sgd_kernel<T, kClip, kDecay, true, false><<<grid, kThreads, 0, s>>>(b, lr, mom, limit);
                       });
  });
}

void adam_update(int device, DType dtype, const std::vector<UpdateSegment>& segments, double alpha, double beta_1,
                 double beta_2, double epsilon, bool amsgrad, double clip_value) {
  dispatch_floating(dtype, "cuda", [&](auto tag) {
    using T = decltype(tag);
    // As the host kernels: the scalars in double, then cast.
    const math::AdamScalars<T> sc{static_cast<T>(alpha), static_cast<T>(1 - beta_1), static_cast<T>(1 - beta_2),
                                  static_cast<T>(epsilon)};
    const T limit = static_cast<T>(clip_value);
    for_each_bucket<T>(device, segments, clip_value,
                       [&](auto c, auto d, const Bucket<T>& b, dim3 grid, cudaStream_t s) {
                         constexpr bool kClip = decltype(c)::value, kDecay = decltype(d)::value;
                         if (amsgrad) adam_kernel<T, kClip, kDecay, true><<<grid, kThreads, 0, s>>>(b, sc, limit);
                         else adam_kernel<T, kClip, kDecay, false><<<grid, kThreads, 0, s>>>(b, sc, limit);
                       });
  });
}

void rmsprop_update(int device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                    double rho, double momentum, double epsilon, bool centered, double clip_value) {
  dispatch_floating(dtype, "cuda", [&](auto tag) {
    using T = decltype(tag);
    const math::RmspropScalars<T> sc{static_cast<T>(learning_rate), static_cast<T>(rho), static_cast<T>(1 - rho),
                                     static_cast<T>(momentum), static_cast<T>(epsilon)};
    const T limit = static_cast<T>(clip_value);
    const bool has_momentum = momentum > 0;
    // The optimizer's slot order is velocity[, momentum][, average_gradient]; the kernel
    // wants velocity, momentum, average: move the average to s2 when there is no momentum slot.
    std::vector<UpdateSegment> segs = segments;
    if (centered && !has_momentum)
      for (auto& u : segs) {
        u.slots[2] = u.slots[1];
        u.slots[1] = nullptr;
      }
    for_each_bucket<T>(device, segs, clip_value, [&](auto c, auto d, const Bucket<T>& b, dim3 grid, cudaStream_t s) {
      constexpr bool kClip = decltype(c)::value, kDecay = decltype(d)::value;
      if (centered) {
        if (has_momentum) rmsprop_kernel<T, kClip, kDecay, true, true><<<grid, kThreads, 0, s>>>(b, sc, limit);
        else rmsprop_kernel<T, kClip, kDecay, true, false><<<grid, kThreads, 0, s>>>(b, sc, limit);
      } else {
        if (has_momentum) rmsprop_kernel<T, kClip, kDecay, false, true><<<grid, kThreads, 0, s>>>(b, sc, limit);
        else rmsprop_kernel<T, kClip, kDecay, false, false><<<grid, kThreads, 0, s>>>(b, sc, limit);
      }
    });
  });
}

void adagrad_update(int device, DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate,
                    double epsilon, double clip_value) {
  dispatch_floating(dtype, "cuda", [&](auto tag) {
    using T = decltype(tag);
    const T lr = static_cast<T>(learning_rate), eps = static_cast<T>(epsilon), limit = static_cast<T>(clip_value);
    for_each_bucket<T>(device, segments, clip_value,
                       [&](auto c, auto d, const Bucket<T>& b, dim3 grid, cudaStream_t s) {
                         constexpr bool kClip = decltype(c)::value, kDecay = decltype(d)::value;
                         adagrad_kernel<T, kClip, kDecay><<<grid, kThreads, 0, s>>>(b, lr, eps, limit);
                       });
  });
}

}  // namespace mdtrain::cuda
