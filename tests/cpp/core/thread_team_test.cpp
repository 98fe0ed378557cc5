// cpu::ThreadTeam (replicas side by side, and one op split over the cores; more members than cores
// wait without spinning), the intra-op team, and GEMMs split over it: the same bits as one
// single-threaded BLAS call, whatever the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "mdtrain/core/threading/thread_team.h"
#include "mdtrain/core/rng.h"
#include "mdtrain/ops/elementwise_math.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {
namespace {

// Restores the process-wide intra-op thread count a test changes.
struct IntraOpThreads {
  int before = ops::cpu_thread_count();
  ~IntraOpThreads() { ops::set_cpu_threads(before); }
};

TEST(ThreadTeam, RunsEveryMemberOnceEachOnItsOwnThreadWithoutFurtherSplits) {
  IntraOpThreads restore;
  ops::set_cpu_threads(3);
  cpu::ThreadTeam team(3);
  EXPECT_EQ(team.size(), 3);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::thread::id> ids(3);
    std::vector<int> threads(3, 0);
    std::atomic<int> calls{0};
    team.run([&](int m) {
      ids[static_cast<std::size_t>(m)] = std::this_thread::get_id();
      threads[static_cast<std::size_t>(m)] = ops::cpu_thread_count();
      ++calls;
    });
    ASSERT_EQ(calls.load(), 3);
    EXPECT_EQ(ids[0], std::this_thread::get_id());  // member 0 is the caller
    EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), 3u);
    EXPECT_EQ(threads, (std::vector<int>{1, 1, 1}));  // members do not split their ops
    EXPECT_EQ(ops::cpu_thread_count(), 3);            // restored after the run
  }
}

TEST(ThreadTeam, MoreMembersThanCoresDoNotBurnTheCallersCoreWhileWaiting) {
  // Members outnumbering the cores (4 logical devices on 2 cores): member 0, done first, must not
  // spin for the others, or it takes the core a member still computing needs. It yields briefly,
  // then sleeps: a few ms of CPU over a 100 ms wait, where spinning takes all of it.
  const int members = static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) + 2;
  cpu::ThreadTeam team(members);
  team.run([](int) {});  // the workers started
  const auto wait = std::chrono::milliseconds(100);
  auto thread_cpu_seconds = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
  };
  const double before = thread_cpu_seconds();
  const auto started = std::chrono::steady_clock::now();
  team.run([&](int m) {
    if (m != 0) std::this_thread::sleep_for(wait);
  });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double cpu = thread_cpu_seconds() - before;
  EXPECT_GE(waited, 0.1);
  EXPECT_LT(cpu, 0.5 * waited) << "member 0 used " << cpu << " s of CPU in a " << waited << " s wait";
}

TEST(ThreadTeam, RethrowsTheFirstErrorAfterEveryMemberFinished) {
  cpu::ThreadTeam team(2);
  std::atomic<bool> other_finished{false};
  try {
    team.run([&](int m) {
      if (m == 0) throw std::runtime_error("member 0 failed");
      other_finished = true;
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "member 0 failed");
  }
  EXPECT_TRUE(other_finished.load());
  std::atomic<int> calls{0};  // still usable
  team.run([&](int) { ++calls; });
  EXPECT_EQ(calls.load(), 2);
  EXPECT_THROW(cpu::ThreadTeam(0), std::invalid_argument);
  EXPECT_THROW(ops::set_cpu_threads(0), std::invalid_argument);
}

TEST(IntraOpTeam, SizedByTheThreadCountOneUserAtATimeNoneWithOneThread) {
  IntraOpThreads restore;
  ops::set_cpu_threads(1);
  EXPECT_EQ(cpu::IntraOpTeam(true).get(), nullptr);  // nothing to split over
  ops::set_cpu_threads(2);
  {
    cpu::IntraOpTeam team(true);
    ASSERT_NE(team.get(), nullptr);
    EXPECT_EQ(team.get()->size(), 2);
    EXPECT_EQ(cpu::IntraOpTeam(true).get(), nullptr);  // taken: a second op runs serially
    EXPECT_EQ(cpu::IntraOpTeam(false).get(), nullptr);
  }
  ops::set_cpu_threads(3);
  cpu::IntraOpTeam resized(true);  // released above, and made again for the new thread count
  ASSERT_NE(resized.get(), nullptr);
  EXPECT_EQ(resized.get()->size(), 3);
}

template <class T>
Tensor random(const Shape& shape, DType dtype, unsigned seed) {
  Tensor t(shape, dtype);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<T>()[i] = static_cast<T>(u(gen));
  return t;
}

// Shapes above the split threshold, split by rows (m >= n) and by columns (m < n), uneven blocks,
// every transpose combination, alpha/beta, float32 and float64: the single-thread result up to
// the BLAS's kernel choice for smaller blocks, and the same bits on every run with one thread
// count.
TEST(SplitGemm, MatchesOneThreadAndRepeatsBitForBit) {
  IntraOpThreads restore;
  struct Shape3 {
    std::int64_t m, n, k;
  };
  for (const Shape3 s :
       {Shape3{784, 128, 32}, Shape3{32, 128, 784}, Shape3{32, 784, 128}, Shape3{203, 97, 131}, Shape3{61, 1013, 53}}) {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        SCOPED_TRACE(::testing::Message()
                     << s.m << "x" << s.n << "x" << s.k << " " << name_of(dtype) << " ta=" << ta << " tb=" << tb);
        const bool f32 = dtype == DType::Float32;
        const Shape sa = ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, sb = tb ? Shape{s.n, s.k} : Shape{s.k, s.n};
        const Tensor a = f32 ? random<float>(sa, dtype, 1) : random<double>(sa, dtype, 1);
        const Tensor b = f32 ? random<float>(sb, dtype, 2) : random<double>(sb, dtype, 2);
        const Tensor c0 = f32 ? random<float>({s.m, s.n}, dtype, 3) : random<double>({s.m, s.n}, dtype, 3);
        const auto at = [](const Tensor& x, std::int64_t i) {
          return x.dtype() == DType::Float32 ? static_cast<double>(x.data<float>()[i]) : x.data<double>()[i];
        };
        std::vector<Tensor> results;
        for (int threads : {1, 2, 3, 5}) {
          ops::set_cpu_threads(threads);
          Tensor c = c0.clone(), again = c0.clone();
          ops::gemm(a, ta, b, tb, c, 0.75, 0.5);
          ops::gemm(a, ta, b, tb, again, 0.75, 0.5);
          EXPECT_EQ(std::memcmp(c.raw(), again.raw(), c.nbytes()), 0) << threads << " threads, repeated";
          results.push_back(c);
        }
        for (std::size_t r = 1; r < results.size(); ++r)
          for (std::int64_t i = 0; i < results[0].numel(); ++i)
            ASSERT_NEAR(at(results[r], i), at(results[0], i), f32 ? 1e-4 : 1e-12) << "element " << i << ", run " << r;
        // And it is the GEMM: one element against a plain dot product.
        const std::int64_t i = s.m / 2, j = s.n - 1;
        double dot = 0;
        for (std::int64_t p = 0; p < s.k; ++p)
          dot += at(a, ta ? p * s.m + i : i * s.k + p) * at(b, tb ? j * s.k + p : p * s.n + j);
        EXPECT_NEAR(at(results[0], i * s.n + j), 0.75 * dot + 0.5 * at(c0, i * s.n + j), f32 ? 1e-3 : 1e-10);
      }
    }
  }
}

// Dropout over ranges on the intra-op threads, one Philox block per four elements: every element's
// multiplier is still the pure function of its global position (checked one by one, from odd
// starting positions), whatever the thread count.
TEST(SplitDropout, MaskIsThePureFunctionOfEachPositionForAnyThreadCount) {
  IntraOpThreads restore;
  const std::int64_t n = 100003;  // above the split threshold, not a multiple of 4
  const Tensor x = random<float>({n}, DType::Float32, 7);
  for (const std::uint64_t first : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{6}, std::uint64_t{1} << 40}) {
    for (int threads : {1, 2, 3}) {
      ops::set_cpu_threads(threads);
      Tensor mask({n}, DType::Float32), y({n}, DType::Float32);
      ops::dropout(x, 0.3, 11, 5, first, mask, y);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint64_t e = first + static_cast<std::uint64_t>(i);
        const float want = math::dropout_mask_from_block(philox4x32(11, 5, e >> 2), e, 0.3f, 1.0f / 0.7f);
        ASSERT_EQ(mask.data<float>()[i], want) << "element " << i << " from " << first << ", " << threads << " threads";
        ASSERT_EQ(y.data<float>()[i], x.data<float>()[i] * want);
      }
    }
  }
}

}  // namespace
}  // namespace mdtrain
