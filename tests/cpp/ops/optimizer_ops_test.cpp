// The optimizer ops' validation and segment merging (their arithmetic is checked bit for bit
// against the old loops in tests/cpp/optim/test_update_bitwise.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mdtrain/ops/optimizer_ops.h"

namespace mdtrain {
namespace {

void expect_ops_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning '" << fragment << "'";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("[ops]", 0), 0u) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << what;
  }
}

struct Buffers {
  std::vector<float> p, g, m, v;
  explicit Buffers(std::size_t n) : p(n, 1.0f), g(n, 0.5f), m(n, 0.0f), v(n, 0.0f) {}
  ops::UpdateSegment segment(std::size_t at, std::int64_t size) {
    ops::UpdateSegment s;
    s.value = p.data() + at;
    s.grad = g.data() + at;
    s.slots[0] = m.data() + at;
    s.slots[1] = v.data() + at;
    s.size = size;
    return s;
  }
};

TEST(OptimizerOps, RejectsNonFloatDtypes) {
  Buffers b(4);
  expect_ops_error([&] { ops::sgd_update(Device{}, DType::Int32, {b.segment(0, 4)}, 0.1, 0.0, false, HUGE_VAL); },
                   "float32 or float64");
}

TEST(OptimizerOps, RejectsMissingSlotsAndNegativeSizes) {
  Buffers b(4);
  ops::UpdateSegment s = b.segment(0, 4);
  s.slots[1] = nullptr;  // Adam needs momentum and velocity
  expect_ops_error([&] { ops::adam_update(Device{}, DType::Float32, {s}, 0.1, 0.9, 0.999, 1e-7, false, HUGE_VAL); },
                   "slot 1 is null");
  ops::UpdateSegment amsgrad = b.segment(0, 4);  // AMSGrad needs a third slot
  expect_ops_error(
      [&] { ops::adam_update(Device{}, DType::Float32, {amsgrad}, 0.1, 0.9, 0.999, 1e-7, true, HUGE_VAL); },
      "needs 3 slots");
  ops::UpdateSegment negative = b.segment(0, -1);
  expect_ops_error([&] { ops::adagrad_update(Device{}, DType::Float32, {negative}, 0.1, 1e-7, HUGE_VAL); }, "size -1");
  EXPECT_EQ(b.p, std::vector<float>(4, 1.0f));  // nothing was written
}

TEST(OptimizerOps, EmptySegmentsNeedNoPointers) {
  ops::UpdateSegment empty;
  EXPECT_NO_THROW(ops::rmsprop_update(Device{}, DType::Float64, {empty}, 0.1, 0.9, 0.9, 1e-7, true, HUGE_VAL));
}

TEST(OptimizerOps, GpuDeviceNeedsAUsableGpu) {
  Buffers b(4);
  Device gpu{DeviceKind::CUDA, 99};
  expect_ops_error([&] { ops::sgd_update(gpu, DType::Float32, {b.segment(0, 4)}, 0.1, 0.0, false, HUGE_VAL); },
                   "not a usable GPU");
}

TEST(OptimizerOps, UpdatesEverySegment) {
  Buffers b(6);
  // Two disjoint segments, plain SGD: p -= g * lr on exactly their elements.
  ops::sgd_update(Device{}, DType::Float32, {b.segment(0, 2), b.segment(4, 2)}, 0.5, 0.0, false, HUGE_VAL);
  EXPECT_EQ(b.p, (std::vector<float>{0.75f, 0.75f, 1.0f, 1.0f, 0.75f, 0.75f}));
}

// Adam's moments of a weight whose gradient stays zero decay through the subnormal range; the
// update flushes them to zero (core/denormals.h) on every thread it runs on, and leaves the
// caller's floating-point environment as it was.
TEST(OptimizerOps, SubnormalMomentsFlushToZeroOnEveryThreadAndOnlyInsideTheUpdate) {
#if !defined(__x86_64__) && !defined(__SSE__)
  GTEST_SKIP() << "denormals are flushed on x86 only (elsewhere they cost no more than normal numbers)";
#endif
  const std::size_t n = std::size_t{1} << 16;  // large enough to be split over the intra-op team
  Buffers b(n);
  const float subnormal = 1e-39f;
  ASSERT_EQ(std::fpclassify(subnormal), FP_SUBNORMAL);
  std::fill(b.g.begin(), b.g.end(), 0.0f);
  std::fill(b.m.begin(), b.m.end(), subnormal);
  std::fill(b.v.begin(), b.v.end(), 1e-20f);  // normal: the weight's step is (0 * alpha) / ...
  ops::adam_update(Device{}, DType::Float32, {b.segment(0, static_cast<std::int64_t>(n))}, 0.001, 0.9, 0.999, 1e-7,
                   false, HUGE_VAL);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(b.m[i], 0.0f) << "element " << i << " kept a subnormal momentum";
    ASSERT_EQ(b.p[i], 1.0f) << "element " << i;  // a zero step leaves the weight's bits alone
  }
  volatile float small = 1e-30f, factor = 1e-9f;  // volatile: computed at run time, on this thread
  EXPECT_EQ(std::fpclassify(small * factor), FP_SUBNORMAL) << "the update left denormals flushed for its caller";
}

TEST(MergeContiguous, JoinsNeighboursThatContinueEachOtherWithTheSameScalars) {
  Buffers b(10);
  std::vector<ops::UpdateSegment> segs{b.segment(0, 3), b.segment(3, 2), b.segment(5, 0), b.segment(5, 5)};
  auto merged = ops::merge_contiguous(segs, DType::Float32, 2);
  ASSERT_EQ(merged.size(), 1u);
  EXPECT_EQ(merged[0].size, 10);
  EXPECT_EQ(merged[0].value, b.p.data());
}

TEST(MergeContiguous, KeepsApartWhatDiffers) {
  Buffers b(10);
  ops::UpdateSegment a = b.segment(0, 3), scaled = b.segment(3, 3), decayed = b.segment(6, 2), gap = b.segment(9, 1);
  scaled.grad_scale = 0.5;  // another clipnorm factor
  decayed.grad_scale = 0.5;
  decayed.decay = 0.01;  // weight decay on, the previous one off
  auto merged = ops::merge_contiguous({a, scaled, decayed, gap}, DType::Float32, 2);
  EXPECT_EQ(merged.size(), 4u);
  // A slot that does not continue (slots of separate tensors) also keeps segments apart.
  std::vector<float> other(3);
  ops::UpdateSegment moved = b.segment(3, 3);
  moved.slots[1] = other.data();
  EXPECT_EQ(ops::merge_contiguous({b.segment(0, 3), moved}, DType::Float32, 2).size(), 2u);
  // Slots beyond slot_count are not compared.
  EXPECT_EQ(ops::merge_contiguous({b.segment(0, 3), moved}, DType::Float32, 1).size(), 1u);
}

}  // namespace
}  // namespace mdtrain
