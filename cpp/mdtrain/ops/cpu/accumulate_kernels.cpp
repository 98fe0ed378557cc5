#include "mdtrain/ops/cpu/accumulate_kernels.h"

#include "mdtrain/ops/accumulate_math.h"

namespace mdtrain::cpu {

template <class T>
void add_into(T* acc, const T* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] = math::accumulate(acc[i], x[i]);
}

template void add_into<float>(float*, const float*, std::int64_t);
template void add_into<double>(double*, const double*, std::int64_t);

}  // namespace mdtrain::cpu
