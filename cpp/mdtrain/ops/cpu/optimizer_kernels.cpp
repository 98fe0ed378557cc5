#include "mdtrain/ops/cpu/optimizer_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/denormals.h"
#include "mdtrain/core/threading/thread_team.h"
#include "mdtrain/ops/optimizer_math.h"

namespace mdtrain::cpu {

namespace {

// Below this many elements a whole update takes a few microseconds: waking the intra-op team
// would cost about as much as it saves.
constexpr std::int64_t kSplitElements = 1 << 14;

// The elements [lo, hi) of one segment, typed: what every loop below runs over.
template <class T>
struct Range {
  T* p;
  const T* g;
  T* s0;
  T* s1;
  T* s2;
  std::int64_t n;
  T scale;  // clipnorm factor
  T decay;  // weight_decay * lr
};

// Cuts the elements of all segments (laid end to end) into ranges over the intra-op threads and
// calls run(bool_constant clip, bool_constant decay, Range<T>) for each piece of each segment.
// clip and decay are decided per segment as the per-parameter loops before the ops decided them
// (grad_scale != 1 or a finite clip_value; decay != 0), and as the GPU kernels do.
template <class T, class Run>
void for_each_range(const std::vector<UpdateSegment>& segments, double clip_value, Run&& run) {
  std::int64_t total = 0;
  for (const UpdateSegment& s : segments) total += s.size;
  const bool clip_on = clip_value != HUGE_VAL;
  run_in_ranges(total, total >= kSplitElements, [&](std::int64_t begin, std::int64_t end) {
    const DenormalsFlushedToZero flushed;  // on every thread that updates (see denormals.h)
    std::int64_t offset = 0;
    for (const UpdateSegment& s : segments) {
      const std::int64_t lo = std::max(begin, offset), hi = std::min(end, offset + s.size);
      offset += s.size;
      if (lo >= hi) continue;
      const std::int64_t at = lo - (offset - s.size);
      auto slot = [&](int k) { return s.slots[k] ? static_cast<T*>(s.slots[k]) + at : nullptr; };
      const Range<T> r{static_cast<T*>(s.value) + at,
                       static_cast<const T*>(s.grad) + at,
                       slot(0),
                       slot(1),
                       slot(2),
                       hi - lo,
                       static_cast<T>(s.grad_scale),
                       static_cast<T>(s.decay)};
      const bool clip = s.grad_scale != 1.0 || clip_on, decay = s.decay != 0.0;
      if (clip) {
        if (decay) run(std::true_type{}, std::true_type{}, r);
        else run(std::true_type{}, std::false_type{}, r);
      } else {
        if (decay) run(std::false_type{}, std::true_type{}, r);
        else run(std::false_type{}, std::false_type{}, r);
      }
    }
  });
}

// The loops: straight-line T arithmetic over restrict pointers, which GCC vectorises
// (-fopt-info-vec). Each element's expression is exactly the one of ops/optimizer_math.h.

template <class T, bool kClip, bool kDecay>
void sgd_loop(T* __restrict p, const T* __restrict g, std::int64_t n, T lr, T scale, T limit, T decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if constexpr (kClip) gi = math::clip_gradient(gi, scale, limit);
    T pi = p[i];
    if constexpr (kDecay) pi = math::decay_weight(pi, decay);
    math::sgd_update(pi, gi, lr);
    p[i] = pi;
  }
}

template <class T, bool kClip, bool kDecay, bool kNesterov>
void sgd_momentum_loop(T* __restrict p, const T* __restrict g, T* __restrict m, std::int64_t n, T lr, T momentum,
                       T scale, T limit, T decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if constexpr (kClip) gi = math::clip_gradient(gi, scale, limit);
    T pi = p[i];
    if constexpr (kDecay) pi = math::decay_weight(pi, decay);
    math::sgd_momentum_update(pi, m[i], gi, lr, momentum, kNesterov);
    p[i] = pi;
  }
}

template <class T, bool kClip, bool kDecay, bool kAmsgrad>
void adam_loop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, T* __restrict v_hat,
               std::int64_t n, math::AdamScalars<T> s, T scale, T limit, T decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if constexpr (kClip) gi = math::clip_gradient(gi, scale, limit);
    T pi = p[i];
    if constexpr (kDecay) pi = math::decay_weight(pi, decay);
    if constexpr (kAmsgrad) math::adam_amsgrad_update(pi, m[i], v[i], v_hat[i], gi, s);
    else math::adam_update(pi, m[i], v[i], gi, s);
    p[i] = pi;
  }
}

template <class T, bool kClip, bool kDecay, bool kCentered, bool kMomentum>
void rmsprop_loop(T* __restrict p, const T* __restrict g, T* __restrict v, T* __restrict mom, T* __restrict avg,
                  std::int64_t n, math::RmspropScalars<T> s, T scale, T limit, T decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if constexpr (kClip) gi = math::clip_gradient(gi, scale, limit);
    T pi = p[i];
    if constexpr (kDecay) pi = math::decay_weight(pi, decay);
    T inc;
    if constexpr (kCentered) inc = math::rmsprop_centered_increment(v[i], avg[i], gi, s);
    else inc = math::rmsprop_increment(v[i], gi, s);
    if constexpr (kMomentum) math::rmsprop_momentum_apply(pi, mom[i], inc, s.momentum);
    else math::rmsprop_apply(pi, inc);
    p[i] = pi;
  }
}

template <class T, bool kClip, bool kDecay>
void adagrad_loop(T* __restrict p, const T* __restrict g, T* __restrict acc, std::int64_t n, T lr, T epsilon, T scale,
                  T limit, T decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if constexpr (kClip) gi = math::clip_gradient(gi, scale, limit);
    T pi = p[i];
    if constexpr (kDecay) pi = math::decay_weight(pi, decay);
    math::adagrad_update(pi, acc[i], gi, lr, epsilon);
    p[i] = pi;
  }
}

}  // namespace

void sgd_update(DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate, double momentum,
                bool nesterov, double clip_value) {
  dispatch_floating(dtype, "ops", [&](auto tag) {
    using T = decltype(tag);
    const T lr = static_cast<T>(learning_rate), mom = static_cast<T>(momentum), limit = static_cast<T>(clip_value);
    for_each_range<T>(segments, clip_value, [&](auto c, auto d, const Range<T>& r) {
      constexpr bool kClip = decltype(c)::value, kDecay = decltype(d)::value;
      if (momentum == 0.0) sgd_loop<T, kClip, kDecay>(r.p, r.g, r.n, lr, r.scale, limit, r.decay);
      else if (nesterov)
        sgd_momentum_loop<T, kClip, kDecay, true>(r.p, r.g, r.s0, r.n, lr, mom, r.scale, limit, r.decay);
      else sgd_momentum_loop<T, kClip, kDecay, false>(r.p, r.g, r.s0, r.n, lr, mom, r.scale, limit, r.decay);
    });
  });
}

void adam_update(DType dtype, const std::vector<UpdateSegment>& segments, double alpha, double beta_1, double beta_2,
                 double epsilon, bool amsgrad, double clip_value) {
  dispatch_floating(dtype, "ops", [&](auto tag) {
    using T = decltype(tag);
    const math::AdamScalars<T> s{static_cast<T>(alpha), static_cast<T>(1 - beta_1), static_cast<T>(1 - beta_2),
                                 static_cast<T>(epsilon)};
    const T limit = static_cast<T>(clip_value);
    for_each_range<T>(segments, clip_value, [&](auto c, auto d, const Range<T>& r) {
      constexpr bool kClip = decltype(c)::value, kDecay = decltype(d)::value;
      if (amsgrad) adam_loop<T, kClip, kDecay, true>(r.p, r.g, r.s0, r.s1, r.s2, r.n, s, r.scale, limit, r.decay);
      else adam_loop<T, kClip, kDecay, false>(r.p, r.g, r.s0, r.s1, r.s2, r.n, s, r.scale, limit, r.decay);
    });
  });
}

void rmsprop_update(DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate, double rho,
                    double momentum, double epsilon, bool centered, double clip_value) {
  dispatch_floating(dtype, "ops", [&](auto tag) {
    using T = decltype(tag);
    const math::RmspropScalars<T> s{static_cast<T>(learning_rate), static_cast<T>(rho), static_cast<T>(1 - rho),
                                    static_cast<T>(momentum), static_cast<T>(epsilon)};
    const T limit = static_cast<T>(clip_value);
    const bool has_momentum = momentum > 0;
    for_each_range<T>(segments, clip_value, [&](auto c, auto d, const Range<T>& r) {
      constexpr bool kClip = decltype(c)::value, kDecay = decltype(d)::value;
      // Slots: velocity[, momentum][, average_gradient].
      T* v = r.s0;
      T* mom = has_momentum ? r.s1 : nullptr;
      T* avg = centered ? (has_momentum ? r.s2 : r.s1) : nullptr;
      if (centered) {
        if (has_momentum)
          rmsprop_loop<T, kClip, kDecay, true, true>(r.p, r.g, v, mom, avg, r.n, s, r.scale, limit, r.decay);
        else rmsprop_loop<T, kClip, kDecay, true, false>(r.p, r.g, v, mom, avg, r.n, s, r.scale, limit, r.decay);
      } else {
        if (has_momentum)
          rmsprop_loop<T, kClip, kDecay, false, true>(r.p, r.g, v, mom, avg, r.n, s, r.scale, limit, r.decay);
        else rmsprop_loop<T, kClip, kDecay, false, false>(r.p, r.g, v, mom, avg, r.n, s, r.scale, limit, r.decay);
      }
    });
  });
}

void adagrad_update(DType dtype, const std::vector<UpdateSegment>& segments, double learning_rate, double epsilon,
                    double clip_value) {
  dispatch_floating(dtype, "ops", [&](auto tag) {
    using T = decltype(tag);
    const T lr = static_cast<T>(learning_rate), eps = static_cast<T>(epsilon), limit = static_cast<T>(clip_value);
    for_each_range<T>(segments, clip_value, [&](auto c, auto d, const Range<T>& r) {
      constexpr bool kClip = decltype(c)::value, kDecay = decltype(d)::value;
      adagrad_loop<T, kClip, kDecay>(r.p, r.g, r.s0, r.n, lr, eps, r.scale, limit, r.decay);
    });
  });
}

}  // namespace mdtrain::cpu
