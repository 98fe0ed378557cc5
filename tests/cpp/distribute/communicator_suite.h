#pragma once
// The communicator test suite, written once for every backend. A backend instantiates it with
// INSTANTIATE_TEST_SUITE_P(Name, CommunicatorSuite, ValuesIn(cases)) (see
// threads_communicator_test.cpp). Test bodies only use what this process drives: each local
// communicator runs on its own thread, inputs are a pure function of (seed, rank, index), and
// every rank checks itself against a serial reference, so an MPI backend (one local rank per
// process) can reuse the suite unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "mdtrain/distribute/communicator.h"

namespace mdtrain::testing {

struct BackendCase {
  std::string name;  // used in test names: letters, digits and '_' only
  int ranks;         // size of the group
  // The communicators this process drives (all of them for in-process backends).
  std::function<std::vector<std::unique_ptr<Communicator>>()> make;
  // Reductions add the ranks in order 0..N-1 exactly (compared bitwise with the reference);
  // otherwise compared with a tolerance.
  bool rank_order_reduction = true;
  // A rank can be made to skip a collective (the timeout test needs the others to wait).
  bool supports_timeout = true;
  // Non-empty: every test of this case is skipped with this reason (e.g. no GPU for "nccl").
  std::string skip_reason = {};
};

inline std::ostream& operator<<(std::ostream& os, const BackendCase& c) { return os << c.name; }

class CommunicatorSuite : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    if (!GetParam().skip_reason.empty()) GTEST_SKIP() << GetParam().skip_reason;
  }
};
// Tests about peers (a missing rank, an abort, mismatched calls): instantiate with groups of two
// or more ranks that support timeouts.
class CommunicatorPeerSuite : public CommunicatorSuite {};
// send / recv (point_to_point_suite.cpp), for backends that implement them.
class PointToPointSuite : public CommunicatorSuite {};
class PointToPointPeerSuite : public CommunicatorSuite {};

using Comms = std::vector<std::unique_ptr<Communicator>>;

// Runs fn(comm, local) for every local communicator (comms[local]) on its own thread. An
// exception escaping fn is a test failure naming the rank.
inline void run_on_ranks(Comms& comms, const std::function<void(Communicator&, std::size_t)>& fn) {
  std::vector<std::string> errors(comms.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < comms.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(*comms[i], i);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < comms.size(); ++i) {
    if (!errors[i].empty()) ADD_FAILURE() << "rank " << comms[i]->rank() << " threw: " << errors[i];
  }
}

// Splits a group this process drives wholly (comms[i] has rank i), every rank on its own thread as
// split is collective: returns the new communicator of every rank (nullptr for a negative
// color), by the parent's rank.
inline Comms split_on_threads(Comms& comms, const std::function<int(int)>& color, const std::function<int(int)>& key) {
  Comms children(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    children[local] = comm.split(color(comm.rank()), key(comm.rank()));
  });
  return children;
}

// The new group of color `wanted` among split_on_threads's result, in new-rank order; the
// others are dropped (split groups are independent of each other and of their parent).
inline Comms split_group(Comms parent, const std::function<int(int)>& color, const std::function<int(int)>& key,
                         int wanted) {
  Comms children = split_on_threads(parent, color, key);
  Comms group;
  for (std::size_t i = 0; i < children.size(); ++i) {
    if (color(static_cast<int>(i)) == wanted && children[i]) group.push_back(std::move(children[i]));
  }
  std::sort(group.begin(), group.end(), [](const auto& a, const auto& b) { return a->rank() < b->rank(); });
  return group;
}

inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Rank `rank`'s i-th input element: floats in [-1, 1) with all mantissa bits in use (so that
// summation order shows in the result), integers in [-1000, 1000].
template <class T>
T input_value(unsigned seed, int rank, std::size_t i) {
  const std::uint64_t h = mix(mix(mix(seed) ^ static_cast<std::uint64_t>(rank)) ^ i);
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(static_cast<double>(h >> 11) * 0x1.0p-52 - 1.0);
  } else {
    return static_cast<T>(static_cast<std::int64_t>(h % 2001) - 1000);
  }
}

template <class T>
std::vector<T> make_input(unsigned seed, int rank, std::size_t count) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = input_value<T>(seed, rank, i);
  return v;
}

// Serial reference of a reduction over ranks of elements [offset, offset + count), folding the
// ranks in order 0..n-1.
template <class T>
std::vector<T> reference_reduce(unsigned seed, int n, std::size_t offset, std::size_t count, ReduceOp op) {
  std::vector<T> acc(count);
  for (std::size_t i = 0; i < count; ++i) {
    T a = input_value<T>(seed, 0, offset + i);
    for (int r = 1; r < n; ++r) {
      const T x = input_value<T>(seed, r, offset + i);
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Mean: a = static_cast<T>(a + x); break;
        case ReduceOp::Max: a = x > a ? x : a; break;
        case ReduceOp::Min: a = x < a ? x : a; break;
      }
    }
    if (op == ReduceOp::Mean) a = a / static_cast<T>(n);
    acc[i] = a;
  }
  return acc;
}

// Empty when equal (bitwise, or within a relative tolerance), else a description of the first
// difference.
template <class T>
std::string compare(const std::vector<T>& got, const std::vector<T>& want, bool bitwise, int n_terms) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    bool same = std::memcmp(&got[i], &want[i], sizeof(T)) == 0;
    if (!same && !bitwise && std::is_floating_point_v<T>) {
      const double tol = (std::is_same_v<T, float> ? 1e-6 : 1e-14) * n_terms;
      same = std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])) <=
             tol * (1.0 + std::abs(static_cast<double>(want[i])));
    }
    if (!same) {
      std::ostringstream os;
      os.precision(17);
      os << "element " << i << ": got " << +got[i] << ", want " << +want[i];
      return os.str();
    }
  }
  return "";
}

}  // namespace mdtrain::testing
