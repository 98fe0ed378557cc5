// Prefetcher: every batch equals the rows it names, in order, for several queue depths; the end
// is reported, never waited for; destruction with a full queue and a waiting producer returns;
// a producer error reaches next() after the batches gathered before it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "mdtrain/data/prefetcher.h"

namespace mdtrain::data {
namespace {

constexpr std::int64_t kRows = 57;

// x[i, j] = 10 * i + j (float32, 3 columns), y[i] = 1000 + i (int32), z[i] = i % 256 (uint8, (2, 2) per row).
std::vector<Tensor> make_sources() {
  Tensor x({kRows, 3}, DType::Float32), y({kRows}, DType::Int32), z({kRows, 2, 2}, DType::UInt8);
  for (std::int64_t i = 0; i < kRows; ++i) {
    for (int j = 0; j < 3; ++j) x.data<float>()[i * 3 + j] = static_cast<float>(10 * i + j);
    y.data<std::int32_t>()[i] = static_cast<std::int32_t>(1000 + i);
    for (int j = 0; j < 4; ++j) z.data<std::uint8_t>()[i * 4 + j] = static_cast<std::uint8_t>(i % 256);
  }
  return {x, y, z};
}

struct Plan {
  std::vector<std::int64_t> indices;
  std::vector<std::int64_t> offsets{0};
  std::vector<std::vector<std::int64_t>> batches;
};

// Random batches of 0..9 rows (empty ones included) drawn with replacement.
Plan random_plan(std::uint64_t seed, int batches) {
  std::mt19937_64 rng(seed);
  Plan p;
  for (int b = 0; b < batches; ++b) {
    std::vector<std::int64_t> rows(static_cast<std::size_t>(rng() % 10));
    for (auto& r : rows) r = static_cast<std::int64_t>(rng() % kRows);
    p.indices.insert(p.indices.end(), rows.begin(), rows.end());
    p.offsets.push_back(static_cast<std::int64_t>(p.indices.size()));
    p.batches.push_back(rows);
  }
  return p;
}

void expect_batch(const std::vector<Tensor>& got, const std::vector<std::int64_t>& rows, const std::string& where) {
  ASSERT_EQ(got.size(), 3u) << where;
  const auto n = static_cast<std::int64_t>(rows.size());
  ASSERT_EQ(got[0].shape(), (Shape{n, 3})) << where;
  ASSERT_EQ(got[1].shape(), (Shape{n})) << where;
  ASSERT_EQ(got[2].shape(), (Shape{n, 2, 2})) << where;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = rows[static_cast<std::size_t>(i)];
    for (int j = 0; j < 3; ++j) EXPECT_EQ(got[0].data<float>()[i * 3 + j], static_cast<float>(10 * r + j)) << where;
    EXPECT_EQ(got[1].data<std::int32_t>()[i], 1000 + r) << where;
    for (int j = 0; j < 4; ++j) EXPECT_EQ(got[2].data<std::uint8_t>()[i * 4 + j], r % 256) << where;
  }
}

// Waits (bounded, as a hang guard only) until the producer has filled the queue.
bool wait_until_full(const Prefetcher& p) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (p.ready() < static_cast<std::size_t>(p.depth())) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(Prefetcher, ReturnsEveryBatchInOrderForSeveralDepths) {
  for (int depth : {1, 2, 3, 8, 64}) {
    Plan plan = random_plan(static_cast<std::uint64_t>(depth), 40);
    Prefetcher p(make_sources(), plan.indices, plan.offsets, depth);
    for (std::size_t b = 0; b < plan.batches.size(); ++b) {
      auto got = p.next();
      ASSERT_TRUE(got.has_value()) << "depth " << depth << " batch " << b;
      expect_batch(*got, plan.batches[b], "depth " + std::to_string(depth) + " batch " + std::to_string(b));
      EXPECT_LE(p.ready(), static_cast<std::size_t>(depth));
    }
    EXPECT_FALSE(p.next().has_value());
    EXPECT_FALSE(p.next().has_value()) << "the end is reported again, not waited for";
  }
}

TEST(Prefetcher, BatchesAreFreshTensors) {
  std::vector<Tensor> sources = make_sources();
  Prefetcher p(sources, {4, 4}, {0, 1, 2}, 2);
  auto a = p.next(), b = p.next();
  ASSERT_TRUE(a && b);
  EXPECT_FALSE((*a)[0].same_storage((*b)[0]));
  EXPECT_FALSE((*a)[0].same_storage(sources[0]));
  (*a)[0].data<float>()[0] = -1.0f;
  EXPECT_EQ((*b)[0].data<float>()[0], 40.0f);
  EXPECT_EQ(sources[0].data<float>()[4 * 3], 40.0f);
}

TEST(Prefetcher, WorkAddedInPiecesWhileConsuming) {
  Prefetcher p(make_sources(), 2);
  Plan first = random_plan(11, 5), second = random_plan(12, 7);
  p.add(first.indices, first.offsets);
  p.add({}, {0});  // no batches: nothing changes
  EXPECT_EQ(p.unconsumed(), 5);
  for (int b = 0; b < 3; ++b) expect_batch(*p.next(), first.batches[static_cast<std::size_t>(b)], "first");
  p.add(second.indices, second.offsets);
  EXPECT_EQ(p.unconsumed(), 9);
  p.close();
  for (int b = 3; b < 5; ++b) expect_batch(*p.next(), first.batches[static_cast<std::size_t>(b)], "first");
  for (std::size_t b = 0; b < second.batches.size(); ++b) expect_batch(*p.next(), second.batches[b], "second");
  EXPECT_EQ(p.unconsumed(), 0);
  EXPECT_FALSE(p.next().has_value());
}

TEST(Prefetcher, ClosedWithoutWorkEndsAtOnce) {
  Prefetcher p(make_sources(), 3);
  p.close();
  EXPECT_FALSE(p.next().has_value());
}

TEST(Prefetcher, NextWithNothingToComeThrowsInsteadOfHanging) {
  Prefetcher p(make_sources(), 2);
  EXPECT_THROW(p.next(), std::logic_error);
  p.add({1, 2}, {0, 2});
  expect_batch(*p.next(), {1, 2}, "after add");
  EXPECT_THROW(p.next(), std::logic_error);
}

TEST(Prefetcher, DestroyedWithFullQueueAndWaitingProducer) {
  for (int depth : {1, 2, 4, 7}) {
    for (int refills = 0; refills < 3; ++refills) {
      Plan plan = random_plan(99, 200);
      auto p = std::make_unique<Prefetcher>(make_sources(), plan.indices, plan.offsets, depth);
      std::size_t b = 0;
      ASSERT_TRUE(wait_until_full(*p)) << "the producer never filled a queue of " << depth;
      for (int r = 0; r < refills; ++r) {
        // Every batch taken frees a slot the producer fills again.
        for (int k = 0; k <= r; ++k, ++b) expect_batch(*p->next(), plan.batches[b], "refill");
        ASSERT_TRUE(wait_until_full(*p)) << "the producer did not refill a queue of " << depth << ": " << p->ready()
                                         << " ready after " << b;
      }
      p.reset();  // must join the producer blocked on the full queue
    }
  }
}

TEST(Prefetcher, CancelEndsIterationAndIsIdempotent) {
  Plan plan = random_plan(5, 50);
  Prefetcher p(make_sources(), plan.indices, plan.offsets, 2);
  ASSERT_TRUE(p.next().has_value());
  p.cancel();
  p.cancel();
  EXPECT_FALSE(p.next().has_value());
}

TEST(Prefetcher, CancelFromAnotherThreadEndsTheConsumer) {
  // Wherever cancel lands (consumer waiting in next(), producer gathering or waiting for a
  // slot), the consumer thread's loop must end and join.
  Plan plan = random_plan(3, 500);
  for (int round = 0; round < 50; ++round) {
    Prefetcher p(make_sources(), plan.indices, plan.offsets, 1 + round % 3);
    std::int64_t seen = 0;
    std::thread consumer([&] {
      while (p.next().has_value()) ++seen;
    });
    for (int spin = 0; spin < round * 10; ++spin) std::this_thread::yield();
    p.cancel();
    consumer.join();
    EXPECT_LE(seen, 500);
    EXPECT_FALSE(p.next().has_value());
  }
}

TEST(Prefetcher, ProducerErrorArrivesAfterEarlierBatches) {
  for (int depth : {1, 3}) {
    // Batch 2 names row kRows, one past the end.
    Prefetcher p(make_sources(), {0, 1, 2, 3, kRows, 5, 6}, {0, 2, 4, 6, 7}, depth);
    expect_batch(*p.next(), {0, 1}, "batch 0");
    expect_batch(*p.next(), {2, 3}, "batch 1");
    try {
      p.next();
      FAIL() << "expected std::out_of_range";
    } catch (const std::out_of_range& e) {
      EXPECT_NE(std::string(e.what()).find("[gather_rows]"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(kRows)), std::string::npos) << e.what();
    }
    EXPECT_THROW(p.next(), std::out_of_range) << "the error stays";
  }
}

TEST(Prefetcher, RejectsBadArguments) {
  auto sources = make_sources();
  EXPECT_THROW(Prefetcher({}, 2), std::invalid_argument);
  EXPECT_THROW(Prefetcher(sources, 0), std::invalid_argument);
  Tensor short_y({kRows - 1}, DType::Int32);
  try {
    Prefetcher p({sources[0], short_y}, 2);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("(57, 3)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(56,)"), std::string::npos) << e.what();
  }
  Tensor scalar({}, DType::Float32);
  EXPECT_THROW(Prefetcher({scalar}, 2), std::invalid_argument);

  Prefetcher p(sources, 2);
  EXPECT_THROW(p.add({1, 2}, {}), std::invalid_argument);
  EXPECT_THROW(p.add({1, 2}, {1, 2}), std::invalid_argument);
  EXPECT_THROW(p.add({1, 2}, {0, 1}), std::invalid_argument);
  EXPECT_THROW(p.add({1, 2}, {0, 2, 1, 2}), std::invalid_argument);
  EXPECT_EQ(p.unconsumed(), 0);
  p.close();
  EXPECT_THROW(p.add({1}, {0, 1}), std::logic_error);
  EXPECT_THROW(Prefetcher(sources, {1}, {0, 2}, 2), std::invalid_argument);
}

TEST(Prefetcher, ManyShortLivedPrefetchersNeverHang) {
  for (int round = 0; round < 300; ++round) {
    Plan plan = random_plan(static_cast<std::uint64_t>(round), 20);
    Prefetcher p(make_sources(), plan.indices, plan.offsets, 1 + round % 4);
    for (int b = 0; b < round % 5; ++b) expect_batch(*p.next(), plan.batches[static_cast<std::size_t>(b)], "round");
  }
}

}  // namespace
}  // namespace mdtrain::data
