// StepPlan of the data-parallel strategies (strategy/step_plan.h): the sync each strategy's plan
// decides, the ops and bytes of each device's step, and that the ReplicatedExecutor runs exactly
// the plan's collectives (its communicators' counts after real steps).
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "mdtrain/model/model.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/central_storage_strategy.h"
#include "mdtrain/strategy/mirrored_strategy.h"
#include "mdtrain/strategy/one_device_strategy.h"
#include "mdtrain/distribute/message_socket.h"
#include "mdtrain/optim/sgd.h"
#include "mdtrain/strategy/parameter_server/parameter_server_worker_strategy.h"
#include "mdtrain/strategy/parameter_server/parameter_shard_server.h"
#include "mdtrain/strategy/zero_shards.h"

namespace mdtrain {
namespace {

constexpr std::int64_t kFeatures = 5, kClasses = 3, kRows = 40, kBatch = 20;
constexpr std::int64_t kParams = kFeatures * 12 + 12 + 12 * kClasses + kClasses;  // 111

std::vector<Device> cpus(int n) {
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  return devices;
}

std::unique_ptr<Model> make_model(std::shared_ptr<Strategy> strategy,
                                  std::unique_ptr<Optimizer> optimizer = make_optimizer("adam")) {
  auto m = std::make_unique<Model>("mlp", 7);
  Dense::Options hidden;
  hidden.units = 12;
  hidden.activation = "relu";
  m->add(std::make_shared<Dense>("dense", hidden));
  Dense::Options out;
  out.units = kClasses;
  out.activation = "softmax";
  m->add(std::make_shared<Dense>("dense_1", out));
  m->build({kFeatures});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")), std::move(optimizer), {},
             std::move(strategy));
  return m;
}

// Two steps of kBatch rows.
void train_two_steps(Model& m) {
  Tensor x{{kRows, kFeatures}, DType::Float32}, y{{kRows}, DType::Int32};
  std::mt19937_64 rng(3);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (std::int64_t i = 0; i < kRows; ++i) {
    y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % kClasses);
    for (std::int64_t f = 0; f < kFeatures; ++f) x.data<float>()[i * kFeatures + f] = noise(rng);
  }
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);
  m.engine().reset_profile();
  m.train_epoch(x, y, order.data(), kRows, kBatch, kRows / kBatch, nullptr);
}

StepPlan plan_of(Strategy& s, Model& m) {
  return s.make_plan(m.network(), s.mesh(), plan_options_of(m.engine().optimizer()));
}

// Every replica's counted collectives are two steps of its device's plan.
void expect_executor_runs_plan(Model& m, const StepPlan& plan) {
  const auto profile = m.engine().profile();
  ASSERT_EQ(static_cast<int>(profile.size()), static_cast<int>(plan.devices.size()));
  for (std::size_t d = 0; d < profile.size(); ++d) {
    const CollectiveCounts want = plan.collective_counts(static_cast<int>(d));
    for (int k = 0; k < kCountedCollectives; ++k) {
      EXPECT_EQ(profile[d].collectives.of[k].calls, 2 * want.of[k].calls)
          << "device " << d << " " << name_of(static_cast<CountedCollective>(k));
      EXPECT_EQ(profile[d].collectives.of[k].bytes, 2 * want.of[k].bytes)
          << "device " << d << " " << name_of(static_cast<CountedCollective>(k));
    }
  }
}

std::vector<OpKind> kinds(const DevicePlan& d) {
  std::vector<OpKind> out;
  for (const PlanOp& op : d.ops) out.push_back(op.kind);
  return out;
}

TEST(StepPlan, OneDeviceRunsNoCollective) {
  auto s = std::make_shared<OneDeviceStrategy>();
  auto m = make_model(s);
  const StepPlan plan = plan_of(*s, *m);
  EXPECT_EQ(plan.strategy, "OneDeviceStrategy");
  EXPECT_EQ(plan.mesh_shape, std::vector<int>{1});
  ASSERT_EQ(plan.segments.size(), 1u);
  EXPECT_EQ(plan.segments[0].end_layer, 2u);
  ASSERT_EQ(plan.layouts.size(), 4u);  // two kernels, two biases, replicated
  EXPECT_EQ(plan.layouts[0].weight, "dense/kernel");
  EXPECT_EQ(plan.layouts[0].values, kFeatures * 12);
  EXPECT_TRUE(plan.layouts[0].axis.empty());
  EXPECT_EQ(plan.only_sync().kind, SyncKind::BucketedAllReduce);
  EXPECT_EQ(plan.only_sync().group, 1);
  ASSERT_EQ(plan.devices.size(), 1u);
  EXPECT_EQ(kinds(plan.devices[0]), (std::vector<OpKind>{OpKind::Forward, OpKind::Backward, OpKind::Update}));
  EXPECT_EQ(plan.devices[0].ops.back().values, kParams);
  train_two_steps(*m);
  expect_executor_runs_plan(*m, plan);
}

TEST(StepPlan, MirroredOnHostDevicesShardsTheUpdate) {
  auto s = std::make_shared<MirroredStrategy>(cpus(3));
  auto m = make_model(s);
  const StepPlan plan = plan_of(*s, *m);
  EXPECT_EQ(plan.only_sync().kind, SyncKind::ZeroOne);
  const ZeroShards shards(kParams, 3);
  const std::int64_t bytes = shards.shard_size() * 3 * 4;  // every rank's padded range, float32
  ASSERT_EQ(plan.devices.size(), 3u);
  for (int d = 0; d < 3; ++d) {
    const DevicePlan& dev = plan.devices[static_cast<std::size_t>(d)];
    ASSERT_EQ(kinds(dev), (std::vector<OpKind>{OpKind::Forward, OpKind::Backward, OpKind::Collective, OpKind::Update,
                                               OpKind::Collective}));
    EXPECT_EQ(dev.ops[2].collective, CountedCollective::ReduceScatter);
    EXPECT_EQ(dev.ops[2].bytes, bytes);
    EXPECT_EQ(dev.ops[3].first_value, shards.range_of(d).first);
    EXPECT_EQ(dev.ops[3].first_value + dev.ops[3].values, shards.range_of(d).second);
    EXPECT_EQ(dev.ops[4].collective, CountedCollective::AllGather);
    EXPECT_EQ(dev.ops[4].bytes, bytes);
  }
  train_two_steps(*m);
  expect_executor_runs_plan(*m, plan);
}

TEST(StepPlan, ClippingByNormAllReducesBeforeTheShardedUpdate) {
  auto s = std::make_shared<MirroredStrategy>(cpus(2));
  s->set_gradient_bucket_bytes(100 * 4);  // 111 values: buckets of 100 and 11, the last first
  auto m = make_model(s, make_optimizer(Json::parse(
                             R"({"class_name": "SGD", "config": {"learning_rate": 0.1, "clipnorm": 1.0}})")));
  const StepPlan plan = plan_of(*s, *m);
  EXPECT_EQ(plan.only_sync().kind, SyncKind::ZeroOneAfterAllReduce);
  const DevicePlan& dev = plan.devices[0];
  ASSERT_EQ(kinds(dev), (std::vector<OpKind>{OpKind::Forward, OpKind::Backward, OpKind::Collective, OpKind::Collective,
                                             OpKind::Update, OpKind::Collective}));
  EXPECT_EQ(dev.ops[2].bucket, 1);
  EXPECT_EQ(dev.ops[2].bytes, 11 * 4);
  EXPECT_TRUE(dev.ops[2].during_backward);
  EXPECT_EQ(dev.ops[3].bucket, 0);
  EXPECT_EQ(dev.ops[3].bytes, 100 * 4);
  EXPECT_EQ(dev.ops[5].collective, CountedCollective::AllGather);
  train_two_steps(*m);
  expect_executor_runs_plan(*m, plan);
}

TEST(StepPlan, CentralStorageReducesToTheParameterDevice) {
  auto s = std::make_shared<CentralStorageStrategy>(cpus(3), Device{DeviceKind::CPU, 0});
  auto m = make_model(s);
  const StepPlan plan = plan_of(*s, *m);
  EXPECT_EQ(plan.only_sync().kind, SyncKind::ReduceToDevice);
  EXPECT_EQ(kinds(plan.devices[0]), (std::vector<OpKind>{OpKind::Forward, OpKind::Backward, OpKind::Collective,
                                                         OpKind::Update, OpKind::Collective}));
  EXPECT_EQ(kinds(plan.devices[1]),
            (std::vector<OpKind>{OpKind::Forward, OpKind::Backward, OpKind::Collective, OpKind::Collective}));
  EXPECT_EQ(plan.devices[1].ops[2].collective, CountedCollective::Reduce);
  EXPECT_EQ(plan.devices[1].ops[2].bytes, kParams * 4);
  EXPECT_EQ(plan.devices[1].ops[3].collective, CountedCollective::Broadcast);
  train_two_steps(*m);
  expect_executor_runs_plan(*m, plan);
}

TEST(StepPlan, TheSyncIsDecidedFromTheInputsAlone) {
  ReplicatedPlanInputs in;
  in.local_replicas = 4;
  EXPECT_EQ(replicated_sync_kind(in), SyncKind::ZeroOne);
  in.reduction = GradientReducer::Algorithm::ReduceToOne;
  EXPECT_EQ(replicated_sync_kind(in), SyncKind::ZeroOneAfterAllReduce);
  in.reduction = GradientReducer::Algorithm::AllReduce;
  in.host_replicas = false;  // GPUs: every replica updates everything, buckets overlap backward
  EXPECT_EQ(replicated_sync_kind(in), SyncKind::BucketedAllReduce);
  in.host_replicas = true;
  in.workers = 2;  // across workers each keeps the whole optimizer state
  EXPECT_EQ(replicated_sync_kind(in), SyncKind::BucketedAllReduce);
  in.parameter_device = true;
  EXPECT_THROW(replicated_sync_kind(in), std::invalid_argument);
  // Across workers the loss sums are all-reduced after the step.
  PlanWeights w;
  w.layers = 1;
  w.weights.push_back(WeightPlacement{"w", 10, "", -1, -1});
  in.parameter_device = false;
  in.local_replicas = 1;
  const StepPlan plan = replicated_step_plan(w, in);
  EXPECT_EQ(plan.devices.size(), 2u);
  EXPECT_EQ(plan.collective_counts(1)[CountedCollective::AllReduce].calls, 2);  // one bucket + the loss
  EXPECT_EQ(plan.collective_counts(1)[CountedCollective::AllReduce].bytes, 10 * 4 + 8);
}

TEST(StepPlan, AParameterServerWorkerPullsAndPushesEachServersRows) {
  auto m = make_model(std::make_shared<OneDeviceStrategy>());
  std::vector<PsVariableSpec> specs;
  for (const Parameter* p : m->network().trainable_parameters()) specs.push_back({p->name, p->value.shape()});
  // dense/kernel (5, 12) in 2 shards of 3 and 2 rows; the other weights whole, placed round-robin.
  const ShardLayout layout = ShardLayout::make(2, specs, {2, 1, 1, 1});
  const ParameterServerWorkerStrategy ps(layout, {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2"}, 0, 10.0);
  const StepPlan plan = ps.make_plan(m->network(), ps.mesh(), PlanOptions{});
  EXPECT_EQ(plan.only_sync().kind, SyncKind::PushPull);
  EXPECT_EQ(plan.only_sync().group, 2);
  for (const WeightPlacement& w : plan.layouts) EXPECT_EQ(w.axis, "ps");
  ASSERT_EQ(plan.devices.size(), 1u);
  const DevicePlan& dev = plan.devices[0];
  ASSERT_EQ(kinds(dev), (std::vector<OpKind>{OpKind::Pull, OpKind::Pull, OpKind::Forward, OpKind::Backward,
                                             OpKind::Push, OpKind::Push}));
  std::int64_t server0 = 0, server1 = 0;
  for (std::size_t v = 0; v < layout.variables.size(); ++v) {
    server0 += layout.rows[v][0].size() * layout.row_elements(v) * 4;
    server1 += layout.rows[v][1].size() * layout.row_elements(v) * 4;
  }
  EXPECT_EQ(server0 + server1, kParams * 4);
  EXPECT_GT(server0, 0);
  EXPECT_GT(server1, 0);
  EXPECT_EQ(dev.ops[0].peer, 0);
  EXPECT_EQ(dev.ops[0].bytes, server0);
  EXPECT_EQ(dev.ops[1].bytes, server1);
  EXPECT_EQ(dev.ops[4].bytes, server0);
  EXPECT_EQ(dev.ops[5].peer, 1);
  EXPECT_EQ(dev.ops[5].bytes, server1);
  // A model that is not the layout's is refused.
  const ShardLayout other = ShardLayout::make(1, {specs.front()}, {1});
  const ParameterServerWorkerStrategy wrong(other, {"tcp://127.0.0.1:1"}, 0, 10.0);
  EXPECT_THROW(wrong.make_plan(m->network(), wrong.mesh(), PlanOptions{}), std::invalid_argument);
}

TEST(StepPlan, AParameterServerWorkerMovesThePlansBytes) {
  if (!zmq_available()) GTEST_SKIP() << "built without ZeroMQ";
  auto one = make_model(std::make_shared<OneDeviceStrategy>());
  std::vector<PsVariableSpec> specs;
  std::vector<Tensor> initial;
  for (const Parameter* p : one->network().trainable_parameters()) {
    specs.push_back({p->name, p->value.shape()});
    initial.push_back(p->value);
  }
  const ShardLayout layout = ShardLayout::make(2, specs, {2, 1, 1, 1});
  std::vector<std::unique_ptr<ParameterShardServer>> servers;
  std::vector<std::string> endpoints;
  for (int s = 0; s < 2; ++s) {
    servers.push_back(std::make_unique<ParameterShardServer>(layout, s, initial, SGD(0.1), "tcp://127.0.0.1:*"));
    endpoints.push_back(servers.back()->endpoint());
  }
  auto ps = std::make_shared<ParameterServerWorkerStrategy>(layout, endpoints, 0, 30.0);
  auto m = make_model(ps, std::make_unique<SGD>(0.1));
  const StepPlan plan = ps->make_plan(m->network(), ps->mesh(), PlanOptions{});
  std::int64_t pulled = 0, pushed = 0;
  for (const PlanOp& op : plan.devices[0].ops) {
    if (op.kind == OpKind::Pull) pulled += op.bytes;
    if (op.kind == OpKind::Push) pushed += op.bytes;
  }
  ps->plan_steps(1, std::nullopt);
  train_two_steps(*m);
  EXPECT_EQ(ps->stats().steps, 2);
  EXPECT_EQ(ps->stats().bytes_pulled, 2 * pulled);
  EXPECT_EQ(ps->stats().bytes_pushed, 2 * pushed);
}

}  // namespace
}  // namespace mdtrain
