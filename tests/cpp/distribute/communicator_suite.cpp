// The backend-independent communicator tests (instantiated per backend elsewhere).
#include "communicator_suite.h"

#include <atomic>
#include <chrono>
#include <limits>

#include "mdtrain/core/errors.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain::testing {
namespace {

const std::vector<std::size_t> kCounts = {1, 7, 1023, 100003};
const std::vector<ReduceOp> kOps = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min};

// Each rank runs every (count, op) all-reduce in the same order; results are checked on the
// main thread against the reference (and so against each other).
template <class T>
void check_all_reduce(const BackendCase& c, const std::vector<std::size_t>& counts, const std::vector<ReduceOp>& ops) {
  Comms comms = c.make();
  struct Case {
    std::size_t count;
    ReduceOp op;
    unsigned seed;
  };
  std::vector<Case> cases;
  unsigned seed = 100;
  for (auto count : counts)
    for (auto op : ops) cases.push_back({count, op, seed++});

  std::vector<std::vector<std::vector<T>>> got(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    for (const auto& k : cases) {
      std::vector<T> data = make_input<T>(k.seed, comm.rank(), k.count);
      comm.all_reduce(data.data(), data.size(), dtype_of<T>::value, k.op);
      got[local].push_back(std::move(data));
    }
  });
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& k = cases[i];
    const auto want = reference_reduce<T>(k.seed, c.ranks, 0, k.count, k.op);
    for (std::size_t local = 0; local < comms.size(); ++local) {
      ASSERT_EQ(got[local].size(), cases.size());
      EXPECT_EQ(compare(got[local][i], want, c.rank_order_reduction, c.ranks), "")
          << name_of(dtype_of<T>::value) << " all_reduce " << name_of(k.op) << " of " << k.count << " elements on rank "
          << comms[local]->rank();
    }
  }
}

TEST_P(CommunicatorSuite, RanksAreDistinctAndSizeIsTheGroupSize) {
  const auto& c = GetParam();
  Comms comms = c.make();
  std::vector<bool> seen(static_cast<std::size_t>(c.ranks), false);
  for (auto& comm : comms) {
    EXPECT_EQ(comm->size(), c.ranks);
    ASSERT_GE(comm->rank(), 0);
    ASSERT_LT(comm->rank(), c.ranks);
    EXPECT_FALSE(seen[static_cast<std::size_t>(comm->rank())]) << "rank " << comm->rank() << " twice";
    seen[static_cast<std::size_t>(comm->rank())] = true;
    EXPECT_FALSE(comm->backend().empty());
    EXPECT_EQ(comm->timeout(), Communicator::kDefaultTimeout);
  }
}

TEST_P(CommunicatorSuite, AllReduceFloat32MatchesSerialReference) {
  check_all_reduce<float>(GetParam(), kCounts, kOps);
}

TEST_P(CommunicatorSuite, AllReduceFloat64MatchesSerialReference) {
  check_all_reduce<double>(GetParam(), kCounts, kOps);
}

TEST_P(CommunicatorSuite, AllReduceIntegersMatchSerialReference) {
  check_all_reduce<std::int32_t>(GetParam(), {1, 1023}, {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min});
  check_all_reduce<std::int64_t>(GetParam(), {7, 1023}, {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min});
}

TEST_P(CommunicatorSuite, AllReduceOfATensor) {
  const auto& c = GetParam();
  Comms comms = c.make();
  std::vector<std::vector<float>> got(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    Tensor t({3, 5}, DType::Float32);
    const auto in = make_input<float>(7, comm.rank(), 15);
    std::memcpy(t.raw(), in.data(), in.size() * sizeof(float));
    comm.all_reduce(t, ReduceOp::Mean);
    got[local].assign(t.data<float>(), t.data<float>() + 15);
  });
  const auto want = reference_reduce<float>(7, c.ranks, 0, 15, ReduceOp::Mean);
  for (auto& g : got) EXPECT_EQ(compare(g, want, c.rank_order_reduction, c.ranks), "");
}

TEST_P(CommunicatorSuite, MaxAndMinAndSumPropagateNaN) {
  const auto& c = GetParam();
  Comms comms = c.make();
  const int last = c.ranks - 1;
  std::vector<std::vector<double>> got(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min, ReduceOp::Sum}) {
      std::vector<double> v = {1.0, -2.0, static_cast<double>(comm.rank())};
      if (comm.rank() == last) v[0] = std::numeric_limits<double>::quiet_NaN();
      comm.all_reduce(v.data(), v.size(), DType::Float64, op);
      got[local].insert(got[local].end(), v.begin(), v.end());
    }
  });
  for (std::size_t local = 0; local < comms.size(); ++local) {
    ASSERT_EQ(got[local].size(), 9u);
    for (int k = 0; k < 3; ++k) {
      EXPECT_TRUE(std::isnan(got[local][3 * k])) << "op " << k << " rank " << comms[local]->rank();
    }
    EXPECT_EQ(got[local][1], -2.0);            // max
    EXPECT_EQ(got[local][2], c.ranks - 1.0);   // max
    EXPECT_EQ(got[local][4], -2.0);            // min
    EXPECT_EQ(got[local][5], 0.0);             // min
    EXPECT_EQ(got[local][7], -2.0 * c.ranks);  // sum
  }
}

TEST_P(CommunicatorSuite, BroadcastFromEveryRoot) {
  const auto& c = GetParam();
  Comms comms = c.make();
  for (int root = 0; root < c.ranks; ++root) {
    std::vector<std::vector<float>> got32(comms.size());
    std::vector<std::vector<double>> got64(comms.size());
    run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
      for (auto count : kCounts) {
        // Non-roots start from their own (different) data, which must be overwritten.
        auto f = make_input<float>(300 + root, comm.rank(), count);
        comm.broadcast(f.data(), count, DType::Float32, root);
        got32[local].insert(got32[local].end(), f.begin(), f.end());
        auto d = make_input<double>(400 + root, comm.rank(), count);
        comm.broadcast(d.data(), count, DType::Float64, root);
        got64[local].insert(got64[local].end(), d.begin(), d.end());
      }
    });
    std::vector<float> want32;
    std::vector<double> want64;
    for (auto count : kCounts) {
      auto f = make_input<float>(300 + root, root, count);
      want32.insert(want32.end(), f.begin(), f.end());
      auto d = make_input<double>(400 + root, root, count);
      want64.insert(want64.end(), d.begin(), d.end());
    }
    for (std::size_t local = 0; local < comms.size(); ++local) {
      EXPECT_EQ(compare(got32[local], want32, true, 1), "") << "root " << root;
      EXPECT_EQ(compare(got64[local], want64, true, 1), "") << "root " << root;
    }
  }
}

template <class T>
void check_all_gather(const BackendCase& c, bool in_place) {
  Comms comms = c.make();
  const std::vector<std::size_t> counts = {1, 7, 1023, 10007};
  std::vector<std::vector<std::vector<T>>> got(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    for (auto count : counts) {
      const auto send = make_input<T>(500, comm.rank(), count);
      std::vector<T> recv(count * static_cast<std::size_t>(comm.size()), T(-7));
      if (in_place) {
        T* mine = recv.data() + count * static_cast<std::size_t>(comm.rank());
        std::copy(send.begin(), send.end(), mine);
        comm.all_gather(mine, recv.data(), count, dtype_of<T>::value);
      } else {
        comm.all_gather(send.data(), recv.data(), count, dtype_of<T>::value);
      }
      got[local].push_back(std::move(recv));
    }
  });
  for (std::size_t i = 0; i < counts.size(); ++i) {
    std::vector<T> want;
    for (int r = 0; r < c.ranks; ++r) {
      auto part = make_input<T>(500, r, counts[i]);
      want.insert(want.end(), part.begin(), part.end());
    }
    for (std::size_t local = 0; local < comms.size(); ++local) {
      ASSERT_EQ(got[local].size(), counts.size());
      EXPECT_EQ(compare(got[local][i], want, true, 1), "") << "count " << counts[i] << (in_place ? " in place" : "");
    }
  }
}

TEST_P(CommunicatorSuite, AllGatherConcatenatesInRankOrder) {
  check_all_gather<float>(GetParam(), false);
  check_all_gather<double>(GetParam(), false);
}

TEST_P(CommunicatorSuite, AllGatherInPlace) { check_all_gather<float>(GetParam(), true); }

TEST_P(CommunicatorSuite, AllGatherOfTensors) {
  const auto& c = GetParam();
  Comms comms = c.make();
  std::vector<std::vector<double>> got(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    Tensor send({2, 3}, DType::Float64);
    send.fill(comm.rank());
    Tensor recv({2 * comm.size(), 3}, DType::Float64);
    comm.all_gather(send, recv);
    got[local].assign(recv.data<double>(), recv.data<double>() + recv.numel());
  });
  for (auto& g : got) {
    ASSERT_EQ(g.size(), 6u * c.ranks);
    for (std::size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], static_cast<double>(i / 6));
  }
}

template <class T>
void check_reduce_scatter(const BackendCase& c, bool in_place) {
  Comms comms = c.make();
  const std::vector<std::size_t> counts = {1, 7, 1023, 10007};
  struct Case {
    std::size_t count;
    ReduceOp op;
    unsigned seed;
  };
  std::vector<Case> cases;
  unsigned seed = 600;
  for (auto count : counts)
    for (auto op : kOps) cases.push_back({count, op, seed++});
  std::vector<std::vector<std::vector<T>>> got(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    const std::size_t n = static_cast<std::size_t>(comm.size());
    for (const auto& k : cases) {
      auto send = make_input<T>(k.seed, comm.rank(), k.count * n);
      if (in_place) {
        T* mine = send.data() + k.count * static_cast<std::size_t>(comm.rank());
        comm.reduce_scatter(send.data(), mine, k.count, dtype_of<T>::value, k.op);
        got[local].emplace_back(mine, mine + k.count);
      } else {
        std::vector<T> recv(k.count, T(-7));
        comm.reduce_scatter(send.data(), recv.data(), k.count, dtype_of<T>::value, k.op);
        got[local].push_back(std::move(recv));
      }
    }
  });
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& k = cases[i];
    for (std::size_t local = 0; local < comms.size(); ++local) {
      const int r = comms[local]->rank();
      const auto want = reference_reduce<T>(k.seed, c.ranks, k.count * static_cast<std::size_t>(r), k.count, k.op);
      ASSERT_EQ(got[local].size(), cases.size());
      EXPECT_EQ(compare(got[local][i], want, c.rank_order_reduction, c.ranks), "")
          << name_of(dtype_of<T>::value) << " reduce_scatter " << name_of(k.op) << " of " << k.count
          << " per rank on rank " << r << (in_place ? " in place" : "");
    }
  }
}

TEST_P(CommunicatorSuite, ReduceScatterMatchesSerialReference) {
  check_reduce_scatter<float>(GetParam(), false);
  check_reduce_scatter<double>(GetParam(), false);
}

TEST_P(CommunicatorSuite, ReduceScatterInPlace) { check_reduce_scatter<double>(GetParam(), true); }

TEST_P(CommunicatorSuite, ReduceScatterOfTensors) {
  const auto& c = GetParam();
  Comms comms = c.make();
  std::vector<std::vector<float>> got(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    Tensor send({comm.size(), 4}, DType::Float32);
    send.fill(comm.rank() + 1);
    Tensor recv({4}, DType::Float32);
    comm.reduce_scatter(send, recv, ReduceOp::Max);
    got[local].assign(recv.data<float>(), recv.data<float>() + 4);
  });
  for (auto& g : got) EXPECT_EQ(g, std::vector<float>(4, static_cast<float>(c.ranks)));
}

TEST_P(CommunicatorSuite, ZeroCountCollectivesStillSynchronise) {
  const auto& c = GetParam();
  Comms comms = c.make();
  run_on_ranks(comms, [&](Communicator& comm, std::size_t) {
    comm.all_reduce(nullptr, 0, DType::Float32, ReduceOp::Mean);
    comm.broadcast(nullptr, 0, DType::Float64, comm.size() - 1);
    comm.all_gather(nullptr, nullptr, 0, DType::Float32);
    comm.reduce_scatter(nullptr, nullptr, 0, DType::Float32, ReduceOp::Sum);
    comm.barrier();
  });
}

TEST_P(CommunicatorSuite, BarrierOrdersWritesBeforeReads) {
  const auto& c = GetParam();
  Comms comms = c.make();
  // Plain (non-atomic) writes before the barrier must be visible to every rank after it; the
  // staggered start makes a barrier that does not wait fail.
  std::vector<int> marks(static_cast<std::size_t>(c.ranks) * 50, 0);
  std::vector<int> missing(comms.size(), 0);
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    const std::size_t r = static_cast<std::size_t>(comm.rank());
    const std::size_t n = static_cast<std::size_t>(comm.size());
    for (std::size_t round = 0; round < 50; ++round) {
      if (round % 10 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200 * r));
      marks[round * n + r] = static_cast<int>(round + 1);
      comm.barrier();
      for (std::size_t s = 0; s < n; ++s) missing[local] += marks[round * n + s] != static_cast<int>(round + 1);
    }
  });
  for (auto m : missing) EXPECT_EQ(m, 0);
}

TEST_P(CommunicatorSuite, RepeatedAllReducesAreBitwiseIdenticalAcrossRunsAndRanks) {
  const auto& c = GetParam();
  Comms comms = c.make();
  constexpr int kRuns = 8;
  constexpr std::size_t kCount = 30011;
  std::vector<std::vector<std::vector<float>>> got(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    for (int run = 0; run < kRuns; ++run) {
      // Perturb the arrival order from run to run.
      if ((run + comm.rank()) % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
      auto data = make_input<float>(900, comm.rank(), kCount);
      comm.all_reduce(data.data(), kCount, DType::Float32, ReduceOp::Sum);
      got[local].push_back(std::move(data));
    }
  });
  ASSERT_EQ(got[0].size(), static_cast<std::size_t>(kRuns));
  for (std::size_t local = 0; local < comms.size(); ++local) {
    for (int run = 0; run < kRuns; ++run) {
      EXPECT_EQ(compare(got[local][run], got[0][0], true, 1), "")
          << "run " << run << " on rank " << comms[local]->rank();
    }
  }
}

TEST_P(CommunicatorSuite, InvalidArgumentsAreRejectedBeforeWaiting) {
  const auto& c = GetParam();
  Comms comms = c.make();
  float x[4] = {1, 2, 3, 4};
  // Argument checks run before any synchronisation, so one thread can probe every rank.
  for (auto& comm : comms) {
    const int n = comm->size();
    EXPECT_THROW(comm->broadcast(x, 1, DType::Float32, -1), std::invalid_argument);
    EXPECT_THROW(comm->broadcast(x, 1, DType::Float32, n), std::invalid_argument);
    EXPECT_THROW(comm->broadcast(nullptr, 1, DType::Float32, 0), std::invalid_argument);
    EXPECT_THROW(comm->all_reduce(nullptr, 3, DType::Float32), std::invalid_argument);
    EXPECT_THROW(comm->all_gather(nullptr, x, 1, DType::Float32), std::invalid_argument);
    EXPECT_THROW(comm->all_gather(x, nullptr, 1, DType::Float32), std::invalid_argument);
    EXPECT_THROW(comm->reduce_scatter(nullptr, x, 1, DType::Float32), std::invalid_argument);
    EXPECT_THROW(comm->reduce_scatter(x, nullptr, 1, DType::Float32), std::invalid_argument);
    std::int32_t ints[2] = {1, 2};
    EXPECT_THROW(comm->all_reduce(ints, 2, DType::Int32, ReduceOp::Mean), std::invalid_argument);
    EXPECT_THROW(comm->all_reduce(x, 1, DType::Float32, static_cast<ReduceOp>(42)), std::invalid_argument);
    EXPECT_THROW(comm->set_timeout(0), std::invalid_argument);
    EXPECT_THROW(comm->set_timeout(-1), std::invalid_argument);
    EXPECT_THROW(comm->set_timeout(std::nan("")), std::invalid_argument);

    std::vector<float> big(4 * static_cast<std::size_t>(n) + 8);
    // send overlapping recv somewhere other than recv + rank * count.
    const std::size_t wrong = comm->rank() == 0 ? 1 : 0;
    EXPECT_THROW(comm->all_gather(big.data() + wrong, big.data(), 2, DType::Float32), std::invalid_argument);
    EXPECT_THROW(comm->reduce_scatter(big.data(), big.data() + wrong, 2, DType::Float32), std::invalid_argument);

    Tensor t32({2, 2}, DType::Float32), t64({2, 2}, DType::Float64);
    Tensor wrong_size({3}, DType::Float32);
    EXPECT_THROW(comm->all_gather(t32, wrong_size), std::invalid_argument);
    EXPECT_THROW(comm->all_gather(t32, t64), std::invalid_argument);
    EXPECT_THROW(comm->reduce_scatter(wrong_size, t32), std::invalid_argument);
    Tensor undefined;
    EXPECT_THROW(comm->all_reduce(undefined), std::invalid_argument);
    try {
      comm->broadcast(x, 1, DType::Float32, n + 3);
      ADD_FAILURE() << "no exception";
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("[" + comm->backend() + "] broadcast", 0), 0u) << msg;
      EXPECT_NE(msg.find("root"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::to_string(n + 3)), std::string::npos) << msg;
    }
  }
  // The rejected calls left the group usable.
  std::vector<float> got(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    float v = 1.0f;
    comm.all_reduce(&v, 1, DType::Float32, ReduceOp::Sum);
    got[local] = v;
  });
  for (float v : got) EXPECT_EQ(v, static_cast<float>(c.ranks));
}

TEST_P(CommunicatorPeerSuite, SkippedCollectiveTimesOutNamingTheMissingRank) {
  const auto& c = GetParam();
  ASSERT_TRUE(c.ranks >= 2 && c.supports_timeout) << "instantiate CommunicatorPeerSuite with peer groups only";
  Comms comms = c.make();
  const int skipper = c.ranks - 1;
  std::vector<std::string> errors(comms.size());
  std::vector<int> timeouts(comms.size(), 0);
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    comm.set_timeout(0.2);
    comm.barrier();  // collective #1
    if (comm.rank() == skipper) return;
    float v = 1.0f;
    try {
      comm.all_reduce(&v, 1, DType::Float32);  // collective #2, never joined by the skipper
    } catch (const TimeoutError& e) {
      timeouts[local] = 1;
      errors[local] = e.what();
    }
  });
  for (std::size_t local = 0; local < comms.size(); ++local) {
    if (comms[local]->rank() == skipper) continue;
    const std::string& msg = errors[local];
    EXPECT_EQ(timeouts[local], 1) << "rank " << comms[local]->rank() << " did not time out";
    EXPECT_EQ(msg.rfind("[" + comms[local]->backend() + "]", 0), 0u) << msg;
    EXPECT_NE(msg.find("all_reduce #2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(skipper) + " did not arrive"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(skipper) + " last entered barrier #1"), std::string::npos) << msg;
  }
  // The late rank does not wait for peers that gave up: it fails at once.
  for (auto& comm : comms) {
    if (comm->rank() != skipper) continue;
    try {
      comm->barrier();
      ADD_FAILURE() << "barrier after a timeout did not throw";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("did not arrive"), std::string::npos) << e.what();
    }
  }
}

TEST_P(CommunicatorPeerSuite, AbortStopsPeersWaitingInACollective) {
  const auto& c = GetParam();
  ASSERT_GE(c.ranks, 2) << "instantiate CommunicatorPeerSuite with peer groups only";
  Comms comms = c.make();
  std::vector<std::string> errors(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    comm.set_timeout(60);  // a broken abort fails the test by timing out, not by hanging
    if (comm.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      comm.abort("replica 0 hit a shape error");
      return;
    }
    try {
      comm.barrier();
    } catch (const TimeoutError& e) {
      errors[local] = std::string("TimeoutError instead of an abort: ") + e.what();
    } catch (const std::runtime_error& e) {
      errors[local] = e.what();
    }
  });
  for (std::size_t local = 0; local < comms.size(); ++local) {
    if (comms[local]->rank() == 0) continue;
    EXPECT_EQ(errors[local].rfind("[", 0), 0u) << errors[local];
    EXPECT_NE(errors[local].find("rank 0 aborted the group: replica 0 hit a shape error"), std::string::npos)
        << errors[local];
  }
}

TEST_P(CommunicatorPeerSuite, MismatchedCollectivesFailOnEveryRank) {
  const auto& c = GetParam();
  ASSERT_GE(c.ranks, 2) << "instantiate CommunicatorPeerSuite with peer groups only";
  Comms comms = c.make();
  std::vector<std::string> errors(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    comm.set_timeout(60);
    std::vector<float> v(8, 1.0f);
    try {
      // Rank 0 reduces 5 elements, the others 6: a program bug that must not corrupt memory.
      comm.all_reduce(v.data(), comm.rank() == 0 ? 5 : 6, DType::Float32);
    } catch (const std::runtime_error& e) {
      errors[local] = e.what();
    }
  });
  for (auto& e : errors) {
    EXPECT_NE(e.find("mismatch"), std::string::npos) << e;
    EXPECT_NE(e.find("count 5"), std::string::npos) << e;
    EXPECT_NE(e.find("count 6"), std::string::npos) << e;
  }
}

}  // namespace
// reduce: the root ends with the all-reduce's bits (same rank order); other ranks keep their data.
TEST_P(CommunicatorSuite, ReduceToEveryRootMatchesAllReduce) {
  const auto& c = GetParam();
  Comms comms = c.make();
  for (int root = 0; root < c.ranks; ++root) {
    std::vector<std::vector<float>> reduced(comms.size()), all(comms.size()), own(comms.size());
    run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
      for (auto count : kCounts) {
        auto r = make_input<float>(500 + root, comm.rank(), count);
        const auto before = r;
        comm.reduce(r.data(), count, DType::Float32, ReduceOp::Sum, root);
        auto a = make_input<float>(500 + root, comm.rank(), count);
        comm.all_reduce(a.data(), count, DType::Float32, ReduceOp::Sum);
        if (comm.rank() == root) {
          reduced[local].insert(reduced[local].end(), r.begin(), r.end());
          all[local].insert(all[local].end(), a.begin(), a.end());
        } else {
          own[local].insert(own[local].end(), r.begin(), r.end());
          all[local].insert(all[local].end(), before.begin(), before.end());
        }
      }
    });
    for (std::size_t local = 0; local < comms.size(); ++local) {
      if (!reduced[local].empty()) EXPECT_EQ(compare(reduced[local], all[local], true, 1), "") << "root " << root;
      if (!own[local].empty()) EXPECT_EQ(compare(own[local], all[local], true, 1), "") << "non-root changed";
    }
  }
  run_on_ranks(comms, [&](Communicator& comm, std::size_t) {
    float x = 1;
    EXPECT_THROW(comm.reduce(&x, 1, DType::Float32, ReduceOp::Sum, c.ranks), std::invalid_argument);
  });
}

}  // namespace mdtrain::testing
