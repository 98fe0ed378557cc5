// GradientReducer: bucket boundaries, blocking and overlapped forms, both algorithms.
#include <gtest/gtest.h>

#include <thread>
#include <utility>
#include <vector>

#include "mdtrain/core/tensor.h"
#include "mdtrain/distribute/gradient_reducer.h"
#include "mdtrain/distribute/threads/threads_communicator.h"

namespace mdtrain {
namespace {

// A rank of a group of two whose peer holds the same values: an all-reduce doubles the buffer.
// It records every collective as (first element, count), so the tests see which buckets ran and
// when.
class RecordingCommunicator final : public Communicator {
 public:
  explicit RecordingCommunicator(const float* base) : base_(base) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "recording"; }
  void abort(const std::string&) override {}
  std::vector<std::pair<std::ptrdiff_t, std::size_t>> calls;
  std::vector<char> kinds;  // 'a' all-reduce, 'r' reduce, 'b' broadcast

  // Makes the communicator enqueue all-reduces of any memory (as NCCL does GPU memory): they are
  // recorded as 'e' when enqueued and only take effect at wait_enqueued().
  bool defers = false;
  bool enqueues_all_reduce(const Device&) const override { return defers; }

 protected:
  void do_all_reduce(void* data, std::size_t count, DType, ReduceOp) override {
    record(data, count, 'a');
    for (std::size_t i = 0; i < count; ++i) static_cast<float*>(data)[i] *= 2;
  }
  void do_reduce(void* data, std::size_t count, DType, ReduceOp, int) override {
    record(data, count, 'r');
    for (std::size_t i = 0; i < count; ++i) static_cast<float*>(data)[i] *= 2;
  }
  void do_broadcast(void* data, std::size_t count, DType, int) override { record(data, count, 'b'); }
  void do_all_gather(const void*, void*, std::size_t, DType) override { FAIL() << "unexpected all_gather"; }
  void do_reduce_scatter(const void*, void*, std::size_t, DType, ReduceOp) override {
    FAIL() << "unexpected reduce_scatter";
  }
  void do_barrier() override {}
  void do_enqueue_all_reduce(void* data, std::size_t count, DType, ReduceOp) override {
    if (!defers) FAIL() << "enqueued on a communicator that does not enqueue";
    record(data, count, 'e');
    pending_.emplace_back(static_cast<float*>(data), count);
  }
  void do_wait_enqueued() override {
    for (auto [data, count] : pending_)
      for (std::size_t i = 0; i < count; ++i) data[i] *= 2;
    pending_.clear();
  }

 private:
  void record(void* data, std::size_t count, char kind) {
    calls.emplace_back(static_cast<const float*>(data) - base_, count);
    kinds.push_back(kind);
  }
  const float* base_;
  std::vector<std::pair<float*, std::size_t>> pending_;
};

Tensor iota(std::int64_t n) {
  Tensor t({n}, DType::Float32);
  for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(i + 1);
  return t;
}

using Calls = std::vector<std::pair<std::ptrdiff_t, std::size_t>>;

TEST(GradientReducer, CutsTheBufferIntoBucketsOfAtMostBucketBytes) {
  Tensor g = iota(23);
  RecordingCommunicator comm(g.data<float>());
  GradientReducer reducer(comm, 10 * sizeof(float));
  EXPECT_EQ(reducer.bucket_count(g), 3u);
  reducer.reduce(g);
  EXPECT_EQ(comm.calls, (Calls{{20, 3}, {10, 10}, {0, 10}}));  // last bucket first, as backward frees them
  for (std::int64_t i = 0; i < 23; ++i) EXPECT_EQ(g.data<float>()[i], 2.0f * static_cast<float>(i + 1));
  EXPECT_FALSE(reducer.enqueues(g));  // the communicator does not enqueue: buckets run at once
}

// The reducer asks the communicator, never its backend's name: one that enqueues gets every
// bucket enqueued as it becomes final, and the sums land at finish().
TEST(GradientReducer, BucketsAreEnqueuedWhenTheCommunicatorEnqueues) {
  Tensor g = iota(23);
  RecordingCommunicator comm(g.data<float>());
  comm.defers = true;
  GradientReducer reducer(comm, 10 * sizeof(float));
  EXPECT_TRUE(reducer.enqueues(g));
  EXPECT_FALSE(GradientReducer(comm, 10 * sizeof(float), GradientReducer::Algorithm::ReduceToOne).enqueues(g));
  reducer.begin(g);
  reducer.gradients_final_from(10);
  EXPECT_EQ(comm.calls, (Calls{{20, 3}, {10, 10}}));
  EXPECT_EQ(g.data<float>()[22], 23.0f);  // enqueued, not yet done
  reducer.finish();
  EXPECT_EQ(comm.calls, (Calls{{20, 3}, {10, 10}, {0, 10}}));
  EXPECT_EQ(comm.kinds, (std::vector<char>{'e', 'e', 'e'}));
  for (std::int64_t i = 0; i < 23; ++i) EXPECT_EQ(g.data<float>()[i], 2.0f * static_cast<float>(i + 1));
}

// The default enqueue_all_reduce runs the all-reduce at once: the same bits as all_reduce.
TEST(GradientReducer, DefaultEnqueueIsTheBlockingAllReduce) {
  constexpr int kRanks = 3;
  constexpr std::size_t kCount = 1001;
  auto comms = ThreadsCommunicator::create_group(kRanks);
  std::vector<std::vector<float>> enqueued(kRanks), blocking(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      Communicator& comm = *comms[static_cast<std::size_t>(r)];
      auto& e = enqueued[static_cast<std::size_t>(r)];
      auto& b = blocking[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < kCount; ++i) e.push_back(0.1f * static_cast<float>(i) / static_cast<float>(r + 1));
      b = e;
      comm.enqueue_all_reduce(e.data(), kCount, DType::Float32, ReduceOp::Mean);
      comm.wait_enqueued();
      comm.all_reduce(b.data(), kCount, DType::Float32, ReduceOp::Mean);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(comms[0]->enqueues_all_reduce(Device{}));
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(enqueued[static_cast<std::size_t>(r)], blocking[0]) << "rank " << r;
    EXPECT_EQ(blocking[static_cast<std::size_t>(r)], blocking[0]) << "rank " << r;
  }
  EXPECT_THROW(comms[0]->enqueue_all_reduce(nullptr, 3, DType::Float32), std::invalid_argument);
}

TEST(GradientReducer, OverlappedFormStartsABucketOnceAllOfItIsFinal) {
  Tensor g = iota(23);
  RecordingCommunicator comm(g.data<float>());
  GradientReducer reducer(comm, 10 * sizeof(float));
  reducer.begin(g);
  reducer.gradients_final_from(21);  // [21, 23): bucket [20, 23) is not all final yet
  EXPECT_TRUE(comm.calls.empty());
  reducer.gradients_final_from(20);
  EXPECT_EQ(comm.calls, (Calls{{20, 3}}));
  reducer.gradients_final_from(20);  // nothing new
  reducer.gradients_final_from(5);   // bucket [10, 20) is final, [0, 10) not
  EXPECT_EQ(comm.calls, (Calls{{20, 3}, {10, 10}}));
  reducer.finish();
  EXPECT_EQ(comm.calls, (Calls{{20, 3}, {10, 10}, {0, 10}}));
  for (std::int64_t i = 0; i < 23; ++i) EXPECT_EQ(g.data<float>()[i], 2.0f * static_cast<float>(i + 1));
  // A new step starts afresh.
  comm.calls.clear();
  reducer.begin(g);
  reducer.gradients_final_from(0);
  EXPECT_EQ(comm.calls, (Calls{{20, 3}, {10, 10}, {0, 10}}));
  reducer.finish();
  EXPECT_EQ(comm.calls.size(), 3u);
}

TEST(GradientReducer, ReductionToOneDeviceReducesThenBroadcastsEachBucket) {
  Tensor g = iota(12);
  RecordingCommunicator comm(g.data<float>());
  GradientReducer reducer(comm, 8 * sizeof(float), GradientReducer::Algorithm::ReduceToOne);
  reducer.reduce(g);
  EXPECT_EQ(comm.calls, (Calls{{8, 4}, {8, 4}, {0, 8}, {0, 8}}));
  EXPECT_EQ(comm.kinds, (std::vector<char>{'r', 'b', 'r', 'b'}));
}

TEST(GradientReducer, AnEmptyBufferStillJoinsOneCollective) {
  Tensor g({0}, DType::Float32);
  RecordingCommunicator comm(g.data<float>());
  GradientReducer reducer(comm);
  EXPECT_EQ(reducer.bucket_count(g), 1u);
  reducer.reduce(g);
  EXPECT_EQ(comm.calls, (Calls{{0, 0}}));
}

TEST(GradientReducer, MisuseIsALogicError) {
  Tensor g = iota(4);
  RecordingCommunicator comm(g.data<float>());
  GradientReducer reducer(comm);
  EXPECT_THROW(reducer.gradients_final_from(0), std::logic_error);
  EXPECT_THROW(reducer.finish(), std::logic_error);
  reducer.begin(g);
  EXPECT_THROW(reducer.begin(g), std::logic_error);
  EXPECT_THROW(GradientReducer(comm, 0), std::invalid_argument);
}

// Three threads reducing different data, overlapped, with uneven "layers": every rank gets the
// sum, bucket by bucket, whichever order the layers finish in.
TEST(GradientReducer, OverlappedSumsOverThreadsEqualTheBlockingSums) {
  constexpr int kRanks = 3;
  constexpr std::int64_t kTotal = 101;
  auto comms = ThreadsCommunicator::create_group(kRanks);
  std::vector<Tensor> overlapped, blocking;
  for (int r = 0; r < kRanks; ++r) {
    overlapped.push_back(iota(kTotal));
    for (std::int64_t i = 0; i < kTotal; ++i) overlapped.back().data<float>()[i] *= static_cast<float>(r + 1) * 0.1f;
    blocking.push_back(overlapped.back().clone());
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      GradientReducer reducer(*comms[static_cast<std::size_t>(r)], 16 * sizeof(float));
      reducer.reduce(blocking[static_cast<std::size_t>(r)]);
      reducer.begin(overlapped[static_cast<std::size_t>(r)]);
      for (std::int64_t layer_start : {90, 71, 70, 33, 2, 0}) reducer.gradients_final_from(layer_start);
      reducer.finish();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    for (std::int64_t i = 0; i < kTotal; ++i) {
      const float expected =
          static_cast<float>(i + 1) * 0.1f + static_cast<float>(i + 1) * 0.2f + static_cast<float>(i + 1) * 0.3f;
      EXPECT_NEAR(blocking[static_cast<std::size_t>(r)].data<float>()[i], expected, 1e-4f * expected);
      EXPECT_EQ(overlapped[static_cast<std::size_t>(r)].data<float>()[i], blocking[0].data<float>()[i]);
    }
  }
}

}  // namespace
}  // namespace mdtrain
