#include "mdtrain/strategy/stage_balance.h"

#include <algorithm>
#include <cstddef>
#include <limits>

#include "mdtrain/core/errors.h"

namespace mdtrain {

std::vector<int> balance_stages(const std::vector<std::int64_t>& layer_costs, int stages) {
  const std::size_t n = layer_costs.size();
  MDTRAIN_CHECK(stages >= 1 && n >= static_cast<std::size_t>(stages), std::invalid_argument, "[pipeline] ", n,
                " layers cannot fill ", stages, " stages (each stage needs at least one layer)");
  const auto p = static_cast<std::size_t>(stages);
  std::vector<std::int64_t> prefix(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    MDTRAIN_CHECK(layer_costs[i] >= 0, std::invalid_argument, "[pipeline] layer ", i, " has a negative cost ",
                  layer_costs[i]);
    prefix[i + 1] = prefix[i] + layer_costs[i];
  }
  auto cost = [&](std::size_t from, std::size_t to) { return prefix[to] - prefix[from]; };

  // Two passes, as the tie-break does not decompose: a prefix's least bottleneck does not come with
  // that prefix's least spread under the whole model's bottleneck. First, bottleneck[s][i]: the
  // least costliest stage of layers [0, i) cut into s + 1 stages. Its last stage is [j, i), the
  // first s stages fill [0, j).
  std::vector<std::vector<std::int64_t>> bottleneck(
      p, std::vector<std::int64_t>(n + 1, std::numeric_limits<std::int64_t>::max()));
  for (std::size_t i = 1; i <= n; ++i) bottleneck[0][i] = cost(0, i);
  for (std::size_t s = 1; s < p; ++s)
    for (std::size_t i = s + 1; i <= n; ++i)
      for (std::size_t j = s; j < i; ++j)
        bottleneck[s][i] = std::min(bottleneck[s][i], std::max(bottleneck[s - 1][j], cost(j, i)));
  const std::int64_t limit = bottleneck[p - 1][n];

  // Then, among cuts whose every stage is within that, the least sum of squared stage costs (which
  // adds up over stages); long double: squares of stage costs of up to billions of parameters.
  constexpr long double kInfeasible = std::numeric_limits<long double>::infinity();
  auto squared = [](std::int64_t c) { return static_cast<long double>(c) * static_cast<long double>(c); };
  std::vector<std::vector<long double>> squares(p, std::vector<long double>(n + 1, kInfeasible));
  std::vector<std::vector<std::size_t>> last_start(p, std::vector<std::size_t>(n + 1, 0));
  for (std::size_t i = 1; i <= n; ++i)
    if (cost(0, i) <= limit) squares[0][i] = squared(cost(0, i));
  for (std::size_t s = 1; s < p; ++s) {
    for (std::size_t i = s + 1; i <= n; ++i) {
      for (std::size_t j = s; j < i; ++j) {
        if (cost(j, i) > limit || squares[s - 1][j] == kInfeasible) continue;
        const long double candidate = squares[s - 1][j] + squared(cost(j, i));
        if (candidate < squares[s][i]) {  // strictly: on equal spreads the earlier start stays
          squares[s][i] = candidate;
          last_start[s][i] = j;
        }
      }
    }
  }
  std::vector<int> starts(p - 1);
  std::size_t end = n;
  for (std::size_t s = p - 1; s >= 1; --s) {
    end = last_start[s][end];
    starts[s - 1] = static_cast<int>(end);
  }
  return starts;
}

}  // namespace mdtrain
