#pragma once
// How a batch of `count` rows is cut among `parts` (replicas, or micro-batches): contiguous
// slices, part p taking count/parts rows plus one more for the first count%parts parts, so sizes
// differ by at most one and a part may be empty when count < parts. Every strategy cuts batches
// this way, so a row lands at the same global offset whatever the strategy (dropout masks and
// other per-row randomness are keyed by that offset).
#include <algorithm>
#include <cstdint>

namespace mdtrain {

struct RowSlice {
  std::int64_t first = 0;  // offset of the slice's first row in the batch
  std::int64_t rows = 0;
};

inline RowSlice slice_of(std::int64_t count, std::int64_t parts, std::int64_t part) {
  const std::int64_t base = count / parts, extra = count % parts;
  return {part * base + std::min(part, extra), base + (part < extra ? 1 : 0)};
}

}  // namespace mdtrain
