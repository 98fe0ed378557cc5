#pragma once
// The CPU body of ops::add_into (ops/accumulate.h). Arguments are already validated.
#include <cstdint>

namespace mdtrain::cpu {

// acc[i] = math::accumulate(acc[i], x[i]) for i in [0, n), in order, on the calling thread.
template <class T>
void add_into(T* acc, const T* x, std::int64_t n);

}  // namespace mdtrain::cpu
