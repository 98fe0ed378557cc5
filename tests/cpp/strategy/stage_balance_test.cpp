// balance_stages: the contiguous cut of layer costs into pipeline stages whose costliest stage
// costs least, checked against every cut there is.
#include "mdtrain/strategy/stage_balance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <vector>

namespace mdtrain {
namespace {

struct Spread {
  std::int64_t bottleneck;
  long double squares;
};

Spread spread_of(const std::vector<std::int64_t>& costs, const std::vector<int>& starts) {
  std::vector<int> bounds{0};
  bounds.insert(bounds.end(), starts.begin(), starts.end());
  bounds.push_back(static_cast<int>(costs.size()));
  Spread s{0, 0};
  for (std::size_t k = 0; k + 1 < bounds.size(); ++k) {
    std::int64_t c = 0;
    for (int i = bounds[k]; i < bounds[k + 1]; ++i) c += costs[static_cast<std::size_t>(i)];
    s.bottleneck = std::max(s.bottleneck, c);
    s.squares += static_cast<long double>(c) * static_cast<long double>(c);
  }
  return s;
}

// Every way to pick stages - 1 increasing starts from 1..n-1.
void every_cut(int n, int stages, std::vector<int>& starts, const std::function<void(const std::vector<int>&)>& visit) {
  if (static_cast<int>(starts.size()) == stages - 1) {
    visit(starts);
    return;
  }
  for (int i = starts.empty() ? 1 : starts.back() + 1; i < n; ++i) {
    starts.push_back(i);
    every_cut(n, stages, starts, visit);
    starts.pop_back();
  }
}

TEST(StageBalance, SmallCases) {
  EXPECT_EQ(balance_stages({10, 10, 10, 10}, 2), (std::vector<int>{2}));
  EXPECT_EQ(balance_stages({100, 1, 1, 1}, 2), (std::vector<int>{1}));
  EXPECT_EQ(balance_stages({1, 1, 1, 100}, 4), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(balance_stages({5, 7}, 1), (std::vector<int>{}));
  EXPECT_EQ(balance_stages({0, 0, 0}, 3), (std::vector<int>{1, 2}));
}

TEST(StageBalance, HeavyMlpPutsTheBigLayerWithTheSmallOne) {
  // The 784-2048-2048-10 MLP's parameter counts (and, in the same proportions, its measured
  // times): the greedy cut on the running total made stages [d0 d1 | d2], 5.8 M against 20 k.
  const std::vector<std::int64_t> params{784 * 2048 + 2048, 2048 * 2048 + 2048, 2048 * 10 + 10};
  EXPECT_EQ(balance_stages(params, 2), (std::vector<int>{1}));
}

TEST(StageBalance, NoCutHasACheaperBottleneckOrAnEvenerSpread) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 9);
    const int stages = 1 + static_cast<int>(rng() % static_cast<unsigned>(n));
    std::vector<std::int64_t> costs(static_cast<std::size_t>(n));
    // Mixed magnitudes, and many equal costs (ties) in some trials.
    const std::int64_t range = trial % 3 == 0 ? 3 : 1000000;
    for (auto& c : costs) c = static_cast<std::int64_t>(rng() % static_cast<unsigned>(range));
    const std::vector<int> got = balance_stages(costs, stages);
    ASSERT_EQ(got.size(), static_cast<std::size_t>(stages - 1));
    for (std::size_t k = 0; k < got.size(); ++k) {
      ASSERT_GT(got[k], k == 0 ? 0 : got[k - 1]);  // every stage has a layer
      ASSERT_LT(got[k], n);
    }
    const Spread mine = spread_of(costs, got);
    std::vector<int> starts;
    every_cut(n, stages, starts, [&](const std::vector<int>& other) {
      const Spread theirs = spread_of(costs, other);
      ASSERT_GE(theirs.bottleneck, mine.bottleneck) << "trial " << trial;
      if (theirs.bottleneck == mine.bottleneck) ASSERT_GE(theirs.squares, mine.squares) << "trial " << trial;
    });
  }
}

TEST(StageBalance, RefusesTooFewLayersAndNegativeCosts) {
  EXPECT_THROW(balance_stages({1, 1}, 3), std::invalid_argument);
  EXPECT_THROW(balance_stages({1, 1}, 0), std::invalid_argument);
  EXPECT_THROW(balance_stages({1, -1, 1}, 2), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain
