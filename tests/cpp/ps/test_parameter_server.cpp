// In-process parameter servers on loopback TCP (ports picked by the OS and read back), with
// workers as ParameterServerClients. Every expected weight is computed by the optimizer itself
// on the whole (unsharded) variables, and compared bitwise.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/message_socket.h"
#include "mdtrain/optim/adam.h"
#include "mdtrain/optim/sgd.h"
#include "mdtrain/strategy/parameter_server/parameter_server_client.h"
#include "mdtrain/strategy/parameter_server/parameter_shard_server.h"
#include "mdtrain/strategy/parameter_server/ps_checkpoint.h"
#include "ps/socket_bytes.h"

namespace mdtrain {
namespace {

std::vector<PsVariableSpec> specs() {
  return {{"dense/kernel", {5, 3}, DType::Float32},
          {"dense/bias", {3}, DType::Float32},
          {"out/kernel", {4, 2}, DType::Float32}};
}

// kernel: 2 shards (servers 0, 1); bias: 2 shards (servers 0, 1); out: 1 shard (server 0), so
// server 1 holds no row of one variable.
ShardLayout layout_for(int servers) {
  std::vector<int> shards;
  for (const auto& s : specs()) shards.push_back(s.name == "out/kernel" ? 1 : std::min<int>(servers, s.shape[0]));
  return ShardLayout::make(servers, specs(), shards);
}

Tensor random_tensor(const Shape& shape, std::mt19937& rng) {
  Tensor t(shape, DType::Float32);
  std::normal_distribution<float> d;
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

std::vector<Tensor> random_tensors(std::mt19937& rng) {
  std::vector<Tensor> out;
  for (const auto& s : specs()) out.push_back(random_tensor(s.shape, rng));
  return out;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// The whole model in one process: the reference every sharded result must equal bitwise.
struct Reference {
  std::vector<Parameter> params;
  std::unique_ptr<Optimizer> optimizer;
  Reference(const std::vector<Tensor>& initial, const Optimizer& opt) : optimizer(opt.clone()) {
    for (std::size_t v = 0; v < initial.size(); ++v) params.emplace_back(specs()[v].name, initial[v].clone());
  }
  void step(const std::vector<Tensor>& grads) {
    ParameterList list;
    for (std::size_t v = 0; v < params.size(); ++v) {
      params[v].grad.copy_from(grads[v]);
      list.push_back(&params[v]);
    }
    optimizer->apply(list);
  }
};

struct Job {
  std::vector<std::unique_ptr<ParameterShardServer>> servers;
  std::vector<std::string> endpoints;
  Job(int n, const std::vector<Tensor>& initial, const Optimizer& opt, ParameterServerOptions options = {}) {
    for (int s = 0; s < n; ++s) {
      servers.push_back(
          std::make_unique<ParameterShardServer>(layout_for(n), s, initial, opt, "tcp://127.0.0.1:*", options));
      endpoints.push_back(servers.back()->endpoint());
    }
  }
  ParameterServerClient client(int worker, double timeout = 30) const {
    return ParameterServerClient(servers[0]->layout(), endpoints, worker, timeout);
  }
};

void expect_values(ParameterServerClient& client, const std::vector<Parameter>& expected) {
  std::vector<Tensor> pulled;
  client.pull(pulled);
  ASSERT_EQ(pulled.size(), expected.size());
  for (std::size_t v = 0; v < expected.size(); ++v)
    EXPECT_TRUE(bitwise_equal(pulled[v], expected[v].value)) << expected[v].name;
}

TEST(ParameterServer, PullReturnsTheInitialValuesToEveryWorker) {
  SKIP_WITHOUT_ZMQ();
  std::mt19937 rng(1);
  const auto initial = random_tensors(rng);
  Job job(2, initial, Adam(0.01));
  EXPECT_EQ(job.endpoints[0].rfind("tcp://127.0.0.1:", 0), 0u);
  EXPECT_NE(job.endpoints[0], job.endpoints[1]);
  for (int w = 0; w < 2; ++w) {
    auto client = job.client(w);
    std::vector<Tensor> pulled;
    const auto versions = client.pull(pulled);
    EXPECT_EQ(versions, (std::vector<std::uint64_t>{0, 0}));
    for (std::size_t v = 0; v < initial.size(); ++v) EXPECT_TRUE(bitwise_equal(pulled[v], initial[v]));
  }
  EXPECT_EQ(job.servers[0]->stats().pulls, 2u);
  EXPECT_EQ(job.servers[1]->shard_values()[2].shape(), (Shape{0, 2}));  // server 1 holds no row of out/kernel
}

TEST(ParameterServer, OnePushIsExactlyOneOptimizerStepOfTheWholeVariables) {
  SKIP_WITHOUT_ZMQ();
  std::mt19937 rng(2);
  const auto initial = random_tensors(rng);
  const Adam adam(0.01);
  Job job(2, initial, adam);
  Reference ref(initial, adam);
  auto client = job.client(0);
  std::vector<Tensor> values;
  const auto versions = client.pull(values);
  const auto grads = random_tensors(rng);
  const PushResult r = client.push(grads, versions);
  EXPECT_EQ(r.status, (std::vector<PsStatus>{PsStatus::Applied, PsStatus::Applied}));
  EXPECT_EQ(r.versions, (std::vector<std::uint64_t>{1, 1}));
  ref.step(grads);
  expect_values(client, ref.params);
  // the slots are the reference's rows too
  const auto state = job.servers[1]->optimizer_state();
  const auto ref_state = ref.optimizer->state();
  for (const auto& [name, tensor] : state) {
    if (name != "dense/kernel/momentum") continue;
    for (const auto& [rname, rtensor] : ref_state)
      if (rname == name) EXPECT_TRUE(bitwise_equal(tensor, rtensor.rows(3, 5)));
  }
}

TEST(ParameterServer, AsyncPushesFromTwoWorkersEqualApplyingThemInOrder) {
  SKIP_WITHOUT_ZMQ();
  std::mt19937 rng(3);
  const auto initial = random_tensors(rng);
  const SGD sgd(0.1, 0.9);
  Job job(2, initial, sgd);
  Reference ref(initial, sgd);
  auto a = job.client(0);
  auto b = job.client(1);
  std::vector<Tensor> va, vb;
  const auto version_a = a.pull(va);
  const auto version_b = b.pull(vb);
  for (int round = 0; round < 3; ++round) {
    const auto ga = random_tensors(rng);
    const auto gb = random_tensors(rng);
    EXPECT_EQ(a.push(ga, version_a).status[0], PsStatus::Applied);
    EXPECT_EQ(b.push(gb, version_b).status[1], PsStatus::Applied);  // stale, but no bound is set
    ref.step(ga);
    ref.step(gb);
  }
  expect_values(a, ref.params);
  EXPECT_EQ(job.servers[0]->stats().pushes_applied, 6u);
  EXPECT_EQ(job.servers[1]->version(), 6u);
}

TEST(ParameterServer, AStepTokenIsAppliedOnceEvenWhenAnotherWorkerRetriesTheStep) {
  SKIP_WITHOUT_ZMQ();
  std::mt19937 rng(31);
  const auto initial = random_tensors(rng);
  const SGD sgd(0.1, 0.9);
  Job job(2, initial, sgd);
  Reference ref(initial, sgd);
  auto a = job.client(0);
  auto b = job.client(1);
  std::vector<Tensor> values;
  const auto g1 = random_tensors(rng);
  const auto g1_retry = random_tensors(rng);
  const auto g2 = random_tensors(rng);
  EXPECT_EQ(a.push(g1, a.pull(values), 7).status, (std::vector<PsStatus>{PsStatus::Applied, PsStatus::Applied}));
  // Worker a died before reporting step 7: the coordinator runs it again on worker b.
  const PushResult retry = b.push(g1_retry, b.pull(values), 7);
  EXPECT_EQ(retry.status, (std::vector<PsStatus>{PsStatus::Duplicate, PsStatus::Duplicate}));
  EXPECT_EQ(retry.versions, (std::vector<std::uint64_t>{1, 1}));
  EXPECT_EQ(b.push(g2, b.pull(values), 8).status[0], PsStatus::Applied);
  EXPECT_EQ(b.push(g2, b.pull(values)).status[0], PsStatus::Applied);  // no token: never deduplicated
  ref.step(g1);
  ref.step(g2);
  ref.step(g2);
  expect_values(a, ref.params);
  EXPECT_EQ(job.servers[1]->stats().pushes_duplicate, 1u);
  EXPECT_EQ(a.versions(), (std::vector<std::uint64_t>{3, 3}));
}

TEST(ParameterServer, SynchronousModeAppliesTheMeanOfTheFirstKAndDropsLaterOnes) {
  SKIP_WITHOUT_ZMQ();
  std::mt19937 rng(4);
  const auto initial = random_tensors(rng);
  const SGD sgd(0.5);
  ParameterServerOptions options;
  options.synchronous = true;
  options.replicas_to_aggregate = 2;
  Job job(2, initial, sgd, options);
  Reference ref(initial, sgd);
  auto w0 = job.client(0), w1 = job.client(1), w2 = job.client(2);
  std::vector<Tensor> values;
  const auto v0 = w0.pull(values);
  const auto g0 = random_tensors(rng), g1 = random_tensors(rng), g2 = random_tensors(rng);
  EXPECT_EQ(w0.push(g0, v0).status, (std::vector<PsStatus>{PsStatus::Aggregated, PsStatus::Aggregated}));
  EXPECT_EQ(job.servers[0]->version(), 0u);
  EXPECT_EQ(w1.push(g1, v0).status, (std::vector<PsStatus>{PsStatus::Applied, PsStatus::Applied}));
  const PushResult late = w2.push(g2, v0);
  EXPECT_EQ(late.status, (std::vector<PsStatus>{PsStatus::DroppedLate, PsStatus::DroppedLate}));
  EXPECT_EQ(late.versions, (std::vector<std::uint64_t>{1, 1}));
  // the reference: (g0 + g1) / 2 in float, one step
  std::vector<Tensor> mean;
  for (std::size_t v = 0; v < g0.size(); ++v) {
    Tensor m(g0[v].shape(), DType::Float32);
    for (std::int64_t i = 0; i < m.numel(); ++i)
      m.data<float>()[i] = (0.f + g0[v].data<float>()[i] + g1[v].data<float>()[i]) / 2.f;
    mean.push_back(m);
  }
  ref.step(mean);
  expect_values(w0, ref.params);
  const auto stats = job.servers[1]->stats();
  EXPECT_EQ(stats.pushes_dropped_late, 1u);
  EXPECT_EQ(stats.updates, 1u);
}

TEST(ParameterServer, StaleGradientsAreDroppedOrRescaledAndCounted) {
  SKIP_WITHOUT_ZMQ();
  for (auto policy : {StalenessPolicy::Drop, StalenessPolicy::Rescale}) {
    std::mt19937 rng(5);
    const auto initial = random_tensors(rng);
    const SGD sgd(0.25);
    ParameterServerOptions options;
    options.max_staleness = 1;
    options.staleness_policy = policy;
    Job job(2, initial, sgd, options);
    Reference ref(initial, sgd);
    auto fresh = job.client(0), old = job.client(1);
    std::vector<Tensor> values;
    const auto v_old = old.pull(values);
    for (int i = 0; i < 2; ++i) {
      const auto g = random_tensors(rng);
      const auto v = fresh.pull(values);
      EXPECT_EQ(fresh.push(g, v).status[0], PsStatus::Applied);
      ref.step(g);
    }
    auto g_old = random_tensors(rng);  // computed on version 0, now 2 behind: staleness 2 > 1
    const PushResult r = old.push(g_old, v_old);
    const auto stats = job.servers[0]->stats();
    if (policy == StalenessPolicy::Drop) {
      EXPECT_EQ(r.status[0], PsStatus::DroppedStale);
      EXPECT_EQ(stats.pushes_dropped_stale, 1u);
      EXPECT_EQ(stats.version, 2u);
    } else {
      EXPECT_EQ(r.status[1], PsStatus::Rescaled);
      EXPECT_EQ(stats.pushes_rescaled, 1u);
      EXPECT_EQ(stats.version, 3u);
      for (auto& g : g_old)
        for (std::int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] *= static_cast<float>(1.0 / 3.0);
      ref.step(g_old);
    }
    expect_values(fresh, ref.params);
  }
}

TEST(ParameterServer, APullFromAnAbsentServerTimesOutNamingIt) {
  SKIP_WITHOUT_ZMQ();
  std::mt19937 rng(6);
  const auto initial = random_tensors(rng);
  std::string dead;
  {
    // A port that was just free: bound by a server that is then gone.
    ParameterShardServer gone(layout_for(2), 1, initial, SGD(0.1), "tcp://127.0.0.1:*");
    dead = gone.endpoint();
  }
  ParameterShardServer alive(layout_for(2), 0, initial, SGD(0.1), "tcp://127.0.0.1:*");
  ParameterServerClient client(layout_for(2), {alive.endpoint(), dead}, 0, 0.3);
  std::vector<Tensor> values;
  try {
    client.pull(values);
    ADD_FAILURE() << "the pull did not time out";
  } catch (const TimeoutError& e) {
    EXPECT_EQ(std::string(e.what()), "[ps] ps 1 at " + dead + " did not answer a pull within 0.3 s");
  }
  // The live server answered meanwhile; its late reply must not confuse the next request.
  EXPECT_EQ(client.stats(0).at("pulls").as_int(), 1);
}

TEST(ParameterServer, MalformedRequestsGetAnErrorAndTheServerKeepsServing) {
  SKIP_WITHOUT_ZMQ();
  std::mt19937 rng(7);
  const auto initial = random_tensors(rng);
  Job job(2, initial, SGD(0.1));
  auto raw = connect_zmq_client_socket(job.endpoints[1]);
  auto ask = [&](const std::string& request) {
    EXPECT_TRUE(send_bytes(*raw, request, 5000));
    std::string reply;
    EXPECT_TRUE(receive_bytes(*raw, reply, 5000));
    const PsMessage m = parse_ps_message(reply);
    EXPECT_EQ(m.header.kind, PsKind::Error);
    return std::string(m.payload);
  };
  EXPECT_NE(ask("hello").find("shorter than the 56-byte header"), std::string::npos);
  PsHeader h;
  h.kind = PsKind::Pull;
  h.server = 0;  // sent to server 1
  EXPECT_NE(ask(encode_ps_message(h, nullptr, 0)).find("a request for ps 0 reached ps 1"), std::string::npos);
  h.server = 1;
  h.kind = PsKind::Push;
  h.dtype = PsDType::Float32;
  const float two[2] = {1.f, 2.f};
  EXPECT_NE(ask(encode_ps_message(h, two, sizeof two)).find("push carries 2 elements"), std::string::npos);
  h.weights_version = 5;
  std::vector<float> full(job.servers[1]->shard_values()[0].numel() + job.servers[1]->shard_values()[1].numel());
  EXPECT_NE(ask(encode_ps_message(h, full.data(), full.size() * 4)).find("computed on version 5"), std::string::npos);
  h.kind = PsKind::PullReply;
  EXPECT_NE(ask(encode_ps_message(h, nullptr, 0)).find("does not accept 'pull reply'"), std::string::npos);
  EXPECT_EQ(job.servers[1]->stats().errors, 5u);
  EXPECT_EQ(job.servers[1]->version(), 0u);
  auto client = job.client(0);
  std::vector<Tensor> values;
  client.pull(values);
  EXPECT_TRUE(bitwise_equal(values[0], initial[0]));
}

TEST(ParameterServer, APullOfOneVariableReturnsOnlyItsRows) {
  SKIP_WITHOUT_ZMQ();
  std::mt19937 rng(11);
  const auto initial = random_tensors(rng);
  Job job(2, initial, SGD(0.1));
  auto raw = connect_zmq_client_socket(job.endpoints[0]);
  PsHeader h;
  h.kind = PsKind::Pull;
  h.server = 0;
  h.variable = 2;  // out/kernel: all 4 rows are on server 0
  h.request_id = 42;
  ASSERT_TRUE(send_bytes(*raw, encode_ps_message(h, nullptr, 0), 5000));
  std::string reply;
  ASSERT_TRUE(receive_bytes(*raw, reply, 5000));
  const PsMessage m = parse_ps_message(reply);
  EXPECT_EQ(m.header.kind, PsKind::PullReply);
  EXPECT_EQ(m.header.request_id, 42u);
  ASSERT_EQ(m.header.count, 8u);
  EXPECT_EQ(std::memcmp(m.payload.data(), initial[2].raw(), initial[2].nbytes()), 0);
  h.variable = 3;  // there is no fourth variable
  ASSERT_TRUE(send_bytes(*raw, encode_ps_message(h, nullptr, 0), 5000));
  ASSERT_TRUE(receive_bytes(*raw, reply, 5000));
  const PsMessage e = parse_ps_message(reply);
  EXPECT_EQ(e.header.kind, PsKind::Error);
  EXPECT_NE(std::string(e.payload).find("variable index 3 is outside"), std::string::npos);
}

TEST(ParameterServer, CheckpointOfTwoServersLoadsIntoOneAndThreeAndTrainingContinuesExactly) {
  SKIP_WITHOUT_ZMQ();
  std::mt19937 rng(8);
  const auto initial = random_tensors(rng);
  const Adam adam(0.01);
  Reference ref(initial, adam);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("mdtrain_ps_ck_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  {
    Job job(2, initial, adam);
    auto client = job.client(0);
    std::vector<Tensor> values;
    for (int i = 0; i < 2; ++i) {
      const auto g = random_tensors(rng);
      client.push(g, client.pull(values));
      ref.step(g);
    }
    client.save(dir);
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/ps-0-of-2.piece"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ps-1-of-2.piece"));

  // In one process: whole variables and slots, as the unsharded optimizer has them.
  const PsCheckpoint ck = read_ps_checkpoint(dir);
  EXPECT_EQ(ck.iterations, 2);
  EXPECT_EQ(ck.version, 2u);
  const auto ref_state = ref.optimizer->state();
  for (const auto& p : ref.params) {
    const auto& lv = ck.at(p.name);
    EXPECT_TRUE(bitwise_equal(lv.value, p.value)) << p.name;
    for (const auto& [slot, tensor] : lv.slots)
      for (const auto& [name, rtensor] : ref_state)
        if (name == p.name + "/" + slot) EXPECT_TRUE(bitwise_equal(tensor, rtensor)) << name;
    EXPECT_EQ(lv.slots.size(), 2u);  // momentum, velocity
  }

  const auto g_next = random_tensors(rng);
  ref.step(g_next);
  for (int servers : {1, 3, 2}) {
    SCOPED_TRACE(servers);
    Job job(servers, {}, adam);  // zeros until loaded
    auto client = job.client(0);
    client.load(dir);
    std::vector<Tensor> values;
    const auto versions = client.pull(values);
    for (auto v : versions) EXPECT_EQ(v, 2u);
    for (std::size_t v = 0; v < values.size(); ++v) EXPECT_TRUE(bitwise_equal(values[v], ck.at(specs()[v].name).value));
    // slots and iterations came back too: the next step equals the reference's third step
    client.push(g_next, versions);
    expect_values(client, ref.params);
  }
  std::filesystem::remove_all(dir);
}

TEST(ParameterServer, AServerRestartedFromItsCheckpointOnTheSameEndpointServesTheSameClientAgain) {
  SKIP_WITHOUT_ZMQ();
  std::mt19937 rng(10);
  const auto initial = random_tensors(rng);
  const Adam adam(0.01);
  Reference ref(initial, adam);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("mdtrain_ps_restart_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  Job job(2, initial, adam);
  auto client = job.client(0, 5);
  std::vector<Tensor> values;
  const auto g = random_tensors(rng);
  client.push(g, client.pull(values));
  ref.step(g);
  client.save(dir);
  // Server 1 dies and comes back on its endpoint (same port), loading its rows from the checkpoint.
  const std::string endpoint = job.endpoints[1];
  job.servers[1]->stop();  // unbinds: the replacement binds the same port while the old object lives
  auto old = std::move(job.servers[1]);
  job.servers[1] = std::make_unique<ParameterShardServer>(layout_for(2), 1, std::vector<Tensor>{}, adam, endpoint);
  job.servers[1]->load(dir);
  EXPECT_EQ(job.servers[1]->version(), 1u);
  expect_values(client, ref.params);  // the client's connection reconnected by itself
  const auto g2 = random_tensors(rng);
  client.push(g2, client.pull(values));
  ref.step(g2);
  expect_values(client, ref.params);
  std::filesystem::remove_all(dir);
}

TEST(ParameterServer, AssignSetsTheShardsAndShutdownStopsServing) {
  SKIP_WITHOUT_ZMQ();
  std::mt19937 rng(9);
  Job job(2, {}, SGD(0.1));
  auto client = job.client(0);
  const auto values = random_tensors(rng);
  client.assign(values);
  std::vector<Tensor> pulled;
  client.pull(pulled);
  for (std::size_t v = 0; v < values.size(); ++v) EXPECT_TRUE(bitwise_equal(pulled[v], values[v]));
  client.shutdown();
  for (auto& s : job.servers) {
    s->stop();  // joins the thread that the shutdown request ended
    EXPECT_FALSE(s->serving());
  }
}

TEST(ParameterServer, RefusesClipnormWhichNeedsTheWholeGradient) {
  SKIP_WITHOUT_ZMQ();
  OptimizerOptions o;
  o.clipnorm = 1.0;
  const SGD sgd(0.1, 0.0, false, o);
  EXPECT_THROW(ParameterShardServer(layout_for(2), 0, {}, sgd, "tcp://127.0.0.1:*"), std::invalid_argument);
}

TEST(ParameterServer, WithoutZeroMqTheTransportSaysHowToGetIt) {
  if (zmq_available()) GTEST_SKIP() << "built with ZeroMQ: distribute/zmq/no_zmq.cpp is not compiled in";
  try {
    bind_zmq_server_socket("tcp://127.0.0.1:*");
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "[ps] mdtrain was built without ZeroMQ: install libzmq3-dev and rebuild");
  }
  EXPECT_THROW(ParameterServerClient(layout_for(2), {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2"}, 0), std::runtime_error);
}

}  // namespace
}  // namespace mdtrain
