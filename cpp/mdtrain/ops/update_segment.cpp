#include "mdtrain/ops/update_segment.h"

namespace mdtrain::ops {

namespace {
const char* end_of(const void* p, std::int64_t size, std::size_t element) {
  return static_cast<const char*>(p) + static_cast<std::size_t>(size) * element;
}
}  // namespace

std::vector<UpdateSegment> merge_contiguous(const std::vector<UpdateSegment>& segments, DType dtype, int slot_count) {
  const std::size_t element = size_of(dtype);
  std::vector<UpdateSegment> merged;
  merged.reserve(segments.size());
  for (const UpdateSegment& s : segments) {
    if (s.size == 0) continue;
    if (!merged.empty()) {
      UpdateSegment& last = merged.back();
      bool continues = last.grad_scale == s.grad_scale && last.decay == s.decay &&
                       end_of(last.value, last.size, element) == s.value &&
                       end_of(last.grad, last.size, element) == s.grad;
      for (int k = 0; k < slot_count && continues; ++k)
        continues = end_of(last.slots[k], last.size, element) == s.slots[k];
      if (continues) {
        last.size += s.size;
        continue;
      }
    }
    merged.push_back(s);
  }
  return merged;
}

}  // namespace mdtrain::ops
