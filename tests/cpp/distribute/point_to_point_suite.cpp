// send / recv, written once for every backend that implements them (threads, mpi): instantiated
// by threads_communicator_test.cpp and the MPI test binary. As in communicator_suite.cpp, each
// local communicator runs on its own thread and checks only what it received.
#include <chrono>
#include <thread>

#include "communicator_suite.h"
#include "mdtrain/core/errors.h"

namespace mdtrain::testing {
namespace {

// Every rank sends three messages to the next rank before it receives from the previous one: a
// send never waits for its receiver, so a ring (or two pipeline stages sending to each other)
// cannot deadlock. Messages arrive in order, bit for bit.
TEST_P(PointToPointSuite, RingOfMessagesArrivesInOrder) {
  const auto& c = GetParam();
  if (c.ranks < 2) GTEST_SKIP() << "no peer in a group of one";
  Comms comms = c.make();
  constexpr std::size_t kCounts[] = {1, 1000, 70000};  // one small, one larger than MPI's eager limit
  std::vector<std::string> errors(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    comm.set_timeout(60);
    const int n = comm.size();
    const int next = (comm.rank() + 1) % n, prev = (comm.rank() + n - 1) % n;
    for (unsigned m = 0; m < 3; ++m) {
      auto data = make_input<float>(100 + m, comm.rank(), kCounts[m]);
      comm.send(data.data(), kCounts[m], DType::Float32, next);
      data.assign(data.size(), 0.0f);  // the buffer may be reused at once
    }
    for (unsigned m = 0; m < 3; ++m) {
      std::vector<float> got(kCounts[m], -1.0f);
      comm.recv(got.data(), kCounts[m], DType::Float32, prev);
      const std::string diff = compare(got, make_input<float>(100 + m, prev, kCounts[m]), true, 1);
      if (!diff.empty()) errors[local] += "message " + std::to_string(m) + ": " + diff + "; ";
    }
    comm.barrier();  // collectives and messages do not disturb each other
  });
  for (std::size_t local = 0; local < comms.size(); ++local) EXPECT_EQ(errors[local], "") << "rank " << local;
}

// A ping-pong between ranks 0 and 1 (the others idle), with a zero-count message among them.
TEST_P(PointToPointSuite, PingPongAndEmptyMessages) {
  const auto& c = GetParam();
  if (c.ranks < 2) GTEST_SKIP() << "no peer in a group of one";
  Comms comms = c.make();
  std::vector<double> final_value(comms.size(), 0.0);
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    comm.set_timeout(60);
    if (comm.rank() > 1) return;
    const int peer = 1 - comm.rank();
    double v = 0.0;
    for (int round = 0; round < 10; ++round) {
      if ((round % 2) == comm.rank()) {
        v += 1.0;
        comm.send(&v, 1, DType::Float64, peer);
        comm.send(nullptr, 0, DType::Float64, peer);
      } else {
        comm.recv(&v, 1, DType::Float64, peer);
        comm.recv(nullptr, 0, DType::Float64, peer);
      }
    }
    final_value[local] = v;
  });
  for (std::size_t local = 0; local < comms.size(); ++local) {
    if (comms[local]->rank() <= 1) EXPECT_EQ(final_value[local], 10.0);  // the last message was 10
  }
}

// send_recv: every rank sends to the next and receives from the previous in one call, as two
// pipeline stages exchange activations and gradients (on NCCL one group; here send, then recv);
// an empty message pairs with an empty recv.
TEST_P(PointToPointSuite, SendRecvExchangesWithNeighbours) {
  const auto& c = GetParam();
  if (c.ranks < 2) GTEST_SKIP() << "no peer in a group of one";
  Comms comms = c.make();
  constexpr std::size_t kCount = 5000;
  std::vector<std::string> errors(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    comm.set_timeout(60);
    const int n = comm.size();
    const int next = (comm.rank() + 1) % n, prev = (comm.rank() + n - 1) % n;
    for (unsigned m = 0; m < 2; ++m) {
      const auto data = make_input<float>(200 + m, comm.rank(), kCount);
      std::vector<float> got(kCount, -1.0f);
      comm.send_recv(data.data(), kCount, next, got.data(), kCount, prev, DType::Float32);
      const std::string diff = compare(got, make_input<float>(200 + m, prev, kCount), true, 1);
      if (!diff.empty()) errors[local] += "message " + std::to_string(m) + ": " + diff + "; ";
    }
    comm.send_recv(nullptr, 0, next, nullptr, 0, prev, DType::Float32);
    float x = 0;
    EXPECT_THROW(comm.send_recv(&x, 1, comm.rank(), &x, 1, prev, DType::Float32), std::invalid_argument);
  });
  for (std::size_t local = 0; local < comms.size(); ++local) EXPECT_EQ(errors[local], "") << "rank " << local;
}

TEST_P(PointToPointSuite, InvalidPeersAreRejected) {
  const auto& c = GetParam();
  Comms comms = c.make();
  run_on_ranks(comms, [&](Communicator& comm, std::size_t) {
    float x = 0;
    EXPECT_THROW(comm.send(&x, 1, DType::Float32, comm.rank()), std::invalid_argument);
    EXPECT_THROW(comm.recv(&x, 1, DType::Float32, comm.size()), std::invalid_argument);
    EXPECT_THROW(comm.recv(&x, 1, DType::Float32, -1), std::invalid_argument);
    EXPECT_THROW(comm.send(nullptr, 1, DType::Float32, (comm.rank() + 1) % comm.size()), std::invalid_argument);
  });
}

// A recv whose peer never sends times out naming the peer (never a hang), and the group fails.
TEST_P(PointToPointPeerSuite, RecvFromASilentPeerTimesOut) {
  const auto& c = GetParam();
  Comms comms = c.make();
  std::vector<std::string> errors(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    comm.set_timeout(0.3);
    if (comm.rank() != 0) return;
    float x = 0;
    try {
      comm.recv(&x, 1, DType::Float32, 1);
    } catch (const TimeoutError& e) {
      errors[local] = e.what();
    }
  });
  for (std::size_t local = 0; local < comms.size(); ++local) {
    if (comms[local]->rank() != 0) continue;
    const std::string& msg = errors[local];
    EXPECT_EQ(msg.rfind("[" + comms[local]->backend() + "]", 0), 0u) << msg;
    EXPECT_NE(msg.find("recv #1 from rank 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("timed out"), std::string::npos) << msg;
  }
}

// A rank that fails aborts the group: its peer waiting in recv stops at once.
TEST_P(PointToPointPeerSuite, AbortStopsAPeerWaitingInRecv) {
  const auto& c = GetParam();
  Comms comms = c.make();
  std::vector<std::string> errors(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    comm.set_timeout(60);  // a broken abort fails the test by timing out, not by hanging
    if (comm.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      comm.abort("stage 0 hit a shape error");
      return;
    }
    if (comm.rank() != 1) return;
    float x = 0;
    try {
      comm.recv(&x, 1, DType::Float32, 0);
    } catch (const TimeoutError& e) {
      errors[local] = std::string("TimeoutError instead of an abort: ") + e.what();
    } catch (const std::runtime_error& e) {
      errors[local] = e.what();
    }
  });
  for (std::size_t local = 0; local < comms.size(); ++local) {
    if (comms[local]->rank() != 1) continue;
    EXPECT_NE(errors[local].find("rank 0 aborted the group: stage 0 hit a shape error"), std::string::npos)
        << errors[local];
  }
}

// A recv expecting another count than was sent is a mismatch, not a silent overrun.
TEST_P(PointToPointPeerSuite, CountMismatchIsAnError) {
  const auto& c = GetParam();
  Comms comms = c.make();
  std::vector<std::string> errors(comms.size());
  run_on_ranks(comms, [&](Communicator& comm, std::size_t local) {
    comm.set_timeout(60);
    std::vector<float> v(8, 1.0f);
    try {
      if (comm.rank() == 0) comm.send(v.data(), 6, DType::Float32, 1);
      if (comm.rank() == 1) comm.recv(v.data(), 5, DType::Float32, 0);
    } catch (const std::runtime_error& e) {
      errors[local] = e.what();
    }
  });
  for (std::size_t local = 0; local < comms.size(); ++local) {
    if (comms[local]->rank() != 1) continue;
    EXPECT_NE(errors[local].find("mismatch"), std::string::npos) << errors[local];
  }
}

}  // namespace
}  // namespace mdtrain::testing
