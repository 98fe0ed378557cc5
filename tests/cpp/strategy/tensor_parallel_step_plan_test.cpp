// The StepPlan of ModelParallelStrategy (strategy/tensor_parallel_step_plan.h): each form's
// model-axis collectives and bytes, the batch axis's sync, rows per batch group (uneven and empty
// slices), the planner's Megatron forms; that the ModelParallelExecutor runs exactly the plan's
// collectives (both axes' communicators' counts after real steps); and that a parameter-server
// worker moves each server the bytes of its plan (the servers' own traffic counters).
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "mdtrain/distribute/message_socket.h"
#include "mdtrain/model/model.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/embedding.h"
#include "mdtrain/nn/lstm.h"
#include "mdtrain/nn/simple_rnn.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/optim/sgd.h"
#include "mdtrain/strategy/model_parallel_executor.h"
#include "mdtrain/strategy/model_parallel_strategy.h"
#include "mdtrain/strategy/one_device_strategy.h"
#include "mdtrain/strategy/parameter_server/parameter_server_worker_strategy.h"
#include "mdtrain/strategy/parameter_server/parameter_shard_server.h"
#include "mdtrain/strategy/parameter_server/ps_message.h"
#include "mdtrain/strategy/tensor_parallel_step_plan.h"
#include "mdtrain/strategy/zero_shards.h"

namespace mdtrain {
namespace {

constexpr std::int64_t kFeatures = 6, kClasses = 4, kRows = 40, kBatch = 20;

std::vector<Device> cpus(int n) {
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  return devices;
}

TensorParallelLayer layer(const std::string& name, ShardedForm form, std::int64_t in, std::int64_t out, bool grad,
                          int dim) {
  TensorParallelLayer l;
  l.name = name;
  l.form = form;
  l.input_values = in;
  l.output_values = out;
  l.input_grad = grad;
  l.weights.push_back(WeightPlacement{name + "/kernel", in * out, "", dim, -1});
  l.weights.push_back(
      WeightPlacement{name + "/bias", out, "", form == ShardedForm::Row ? -1 : (dim >= 0 ? 0 : -1), -1});
  return l;
}

// 6 -> 8 (column) -> 4 (row) -> 8 (column, gathered) -> 4 (replicated).
std::vector<TensorParallelLayer> mlp_layers() {
  return {layer("a", ShardedForm::Column, 6, 8, false, 1), layer("b", ShardedForm::Row, 8, 4, true, 0),
          layer("c", ShardedForm::ColumnGather, 4, 8, true, 1), layer("d", ShardedForm::Replicated, 8, 4, true, -1)};
}

TensorParallelPlanInputs hybrid(std::int64_t global_batch) {
  TensorParallelPlanInputs in;
  in.mesh_shape = {2, 2};
  in.mesh_axes = {"batch", "model"};
  in.batch_axis = "batch";
  in.global_batch = global_batch;
  return in;
}

struct Coll {
  CountedCollective kind;
  std::string axis;
  std::int64_t bytes;
  bool operator==(const Coll& o) const { return kind == o.kind && axis == o.axis && bytes == o.bytes; }
};
std::vector<Coll> collectives(const DevicePlan& d) {
  std::vector<Coll> out;
  for (const PlanOp& op : d.ops)
    if (op.kind == OpKind::Collective) out.push_back(Coll{op.collective, op.axis, op.bytes});
  return out;
}

TEST(TensorParallelStepPlan, EachFormRunsItsModelAxisCollectives) {
  const StepPlan plan = tensor_parallel_step_plan(mlp_layers(), hybrid(31));  // 16 + 15 rows
  ASSERT_EQ(plan.devices.size(), 4u);
  ASSERT_EQ(plan.segments.size(), 4u);
  // Local values: a (48 + 8) / 2, b 32 / 2 + 4 (its bias replicated), c (32 + 8) / 2, d 36.
  const std::int64_t local = 28 + 20 + 20 + 36;
  ASSERT_EQ(plan.only_sync().kind, SyncKind::ZeroOne);
  EXPECT_EQ(plan.only_sync().values, local);
  EXPECT_EQ(plan.only_sync().group, 2);
  EXPECT_EQ(plan.layouts[0].axis, "model");
  EXPECT_EQ(plan.layouts[3].axis, "");  // b/bias
  EXPECT_EQ(plan.layouts[6].axis, "");  // d/kernel
  const ZeroShards shards(local, 2);
  for (int d = 0; d < 4; ++d) {
    const std::int64_t rows = d < 2 ? 16 : 15;
    const std::vector<Coll> want = {
        {CountedCollective::AllReduce, "model", rows * 4 * 4},  // b's output
        {CountedCollective::AllGather, "model", rows * 8 * 4},  // c's gathered output
        {CountedCollective::AllReduce, "model", rows * 4 * 4},  // c's dx
        {CountedCollective::ReduceScatter, "batch", shards.shard_size() * 2 * 4},
        {CountedCollective::AllGather, "batch", shards.shard_size() * 2 * 4},
    };  // a reads only the input: no dx
    EXPECT_EQ(collectives(plan.devices[static_cast<std::size_t>(d)]), want) << "device " << d;
    std::int64_t updated = 0;
    for (const PlanOp& op : plan.devices[static_cast<std::size_t>(d)].ops) {
      if (op.kind == OpKind::Forward || op.kind == OpKind::Backward) EXPECT_EQ(op.rows, rows);
      if (op.kind == OpKind::Update) updated = op.values;
    }
    const auto [begin, end] = shards.range_of(d / 2);
    EXPECT_EQ(updated, end - begin);
  }
}

TEST(TensorParallelStepPlan, AGroupWithoutRowsSkipsTheModelAxis) {
  const StepPlan plan = tensor_parallel_step_plan(mlp_layers(), hybrid(1));
  for (int d = 0; d < 4; ++d) {
    std::int64_t model_axis = 0;
    for (const Coll& c : collectives(plan.devices[static_cast<std::size_t>(d)])) model_axis += c.axis == "model";
    EXPECT_EQ(model_axis, d < 2 ? 3 : 0) << "device " << d;
  }
}

TEST(TensorParallelStepPlan, GpusOrWorkersAllReduceTheBatchAxisInBuckets) {
  TensorParallelPlanInputs in = hybrid(32);
  in.cpu_devices = false;
  in.bucket_bytes = 40 * 4;
  const StepPlan plan = tensor_parallel_step_plan(mlp_layers(), in);
  EXPECT_EQ(plan.only_sync().kind, SyncKind::BucketedAllReduce);
  std::vector<std::int64_t> buckets;
  for (const Coll& c : collectives(plan.devices[0]))
    if (c.axis == "batch") buckets.push_back(c.bytes);
  EXPECT_EQ(buckets, (std::vector<std::int64_t>{24 * 4, 40 * 4, 40 * 4}));  // 104 values, last bucket first
  // One batch group: no batch-axis collective, the whole shard updated.
  in.mesh_shape = {1, 2};
  const StepPlan alone = tensor_parallel_step_plan(mlp_layers(), in);
  for (const Coll& c : collectives(alone.devices[1])) EXPECT_EQ(c.axis, "model");
  EXPECT_EQ(alone.devices[1].ops.back().kind, OpKind::Update);
  EXPECT_EQ(alone.devices[1].ops.back().values, 104);
}

TEST(TensorParallelStepPlan, ThePlannersLayoutPairsConsecutiveDenseLayers) {
  const std::vector<ProfiledLayer> layers = {
      {"Dense", 100, 8}, {"Dropout", 0, 8}, {"Dense", 36, 4}, {"Dense", 30, 6}, {"Dense", 28, 4}};
  EXPECT_EQ(megatron_forms(layers, 2),
            (std::vector<ShardedForm>{ShardedForm::Column, ShardedForm::Replicated, ShardedForm::Row,
                                      ShardedForm::Column, ShardedForm::Row}));
  // 6 units do not split 4 ways: that Dense stays whole, the last one has no partner.
  EXPECT_EQ(megatron_forms(layers, 4),
            (std::vector<ShardedForm>{ShardedForm::Column, ShardedForm::Replicated, ShardedForm::Row,
                                      ShardedForm::Replicated, ShardedForm::ColumnGather}));
  EXPECT_EQ(sharded_form_of("column_gather"), ShardedForm::ColumnGather);
  EXPECT_THROW(sharded_form_of("diagonal"), std::invalid_argument);
}

std::unique_ptr<Model> make_model(std::shared_ptr<Strategy> strategy, std::unique_ptr<Optimizer> optimizer,
                                  bool gather) {
  auto m = std::make_unique<Model>("mlp", 7);
  const auto add = [&](const std::string& name, std::int64_t units, const std::string& activation) {
    Dense::Options o;
    o.units = units;
    o.activation = activation;
    m->add(std::make_shared<Dense>(name, o));
  };
  add("a", 8, "relu");
  add("b", 4, "relu");
  if (gather) add("c", 8, "relu");
  add("out", kClasses, "softmax");
  m->build({kFeatures});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")), std::move(optimizer), {},
             std::move(strategy));
  return m;
}

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

class ModelParallelPlan : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(ModelParallelPlan, TheExecutorRunsThePlansCollectives) {
  const auto [groups, gather] = GetParam();
  const DeviceMesh mesh({groups, 2}, {"batch", "model"}, cpus(2 * groups));
  WeightLayouts layouts = {{"a/kernel", {std::nullopt, "model"}}, {"b/kernel", {"model", std::nullopt}}};
  if (gather) layouts["c/kernel"] = {std::nullopt, "model"};
  auto strategy = std::make_shared<ModelParallelStrategy>(mesh, layouts, "batch");
  auto m = make_model(strategy, make_optimizer("adam"), gather);
  PlanOptions options = plan_options_of(m->engine().optimizer());
  options.global_batch = kBatch;
  const StepPlan plan = strategy->make_plan(m->network(), mesh, options);
  ASSERT_NE(strategy->executor(), nullptr);
  EXPECT_EQ(strategy->executor()->step_plan().syncs.front().kind,
            groups > 1 ? SyncKind::ZeroOne : SyncKind::BucketedAllReduce);
  for (const WeightPlacement& w : plan.layouts) {
    const int dim = strategy->executor()->plan().split_dim(w.weight);
    EXPECT_EQ(w.dim, dim) << w.weight;
    EXPECT_EQ(w.axis, dim >= 0 ? "model" : "") << w.weight;
  }
  train_two_steps(*m);
  const auto profile = m->engine().profile();
  ASSERT_EQ(profile.size(), plan.devices.size());
  std::int64_t model_axis_bytes = 0;
  for (const PlanOp& op : plan.devices[0].ops)
    if (op.kind == OpKind::Collective && op.axis == "model") model_axis_bytes += op.bytes;
  EXPECT_GT(model_axis_bytes, 0);
  for (std::size_t d = 0; d < profile.size(); ++d) {
    const CollectiveCounts want = plan.collective_counts(static_cast<int>(d));
    for (int k = 0; k < kCountedCollectives; ++k) {
      EXPECT_EQ(profile[d].collectives.of[k].calls, 2 * want.of[k].calls)
          << "device " << d << " " << name_of(static_cast<CountedCollective>(k));
      EXPECT_EQ(profile[d].collectives.of[k].bytes, 2 * want.of[k].bytes)
          << "device " << d << " " << name_of(static_cast<CountedCollective>(k));
    }
    EXPECT_EQ(strategy->executor()->model_axis_bytes()[d], model_axis_bytes) << "device " << d;
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, ModelParallelPlan,
                         ::testing::Combine(::testing::Values(1, 2), ::testing::Values(false, true)));

// An Embedding split by rows (vocab_rows), an LSTM returning sequences and a SimpleRNN split by
// units (recurrent_units: a gather per timestep forward, a sum per timestep backward), a
// row-parallel Dense whose input arrives whole (row_whole_input: it gathers dx), on uneven
// batches of 2 batch groups.
TEST(ModelParallelPlanForms, EmbeddingRecurrentAndRowLayersRunThePlansCollectives) {
  constexpr std::int64_t kSteps = 5, kVocab = 12, rows = 23, batch = 9;  // 5 + 4 rows, last batch 5: 3 + 2
  const DeviceMesh mesh({2, 2}, {"batch", "model"}, cpus(4));
  const WeightLayout units{std::nullopt, std::string("model")};
  WeightLayouts layouts = {{"embedding/embeddings", {std::string("model"), std::nullopt}},
                           {"lstm/kernel", units},
                           {"simple_rnn/kernel", units},
                           {"dense/kernel", {std::string("model"), std::nullopt}}};
  auto strategy = std::make_shared<ModelParallelStrategy>(mesh, layouts, "batch");
  auto m = std::make_unique<Model>("m", 5);
  Embedding::Options e;
  e.input_dim = kVocab;
  e.output_dim = 6;
  m->add(std::make_shared<Embedding>("embedding", e));
  RecurrentLayer::Options r;
  r.units = 8;
  r.return_sequences = true;
  m->add(std::make_shared<LSTM>("lstm", r));
  Dense::Options d;
  d.units = 4;
  d.activation = "relu";
  m->add(std::make_shared<Dense>("dense", d));
  r.units = 4;
  r.return_sequences = false;
  m->add(std::make_shared<SimpleRNN>("simple_rnn", r));
  Dense::Options out;
  out.units = kClasses;
  out.activation = "softmax";
  m->add(std::make_shared<Dense>("out", out));
  m->build({kSteps});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")), make_optimizer("adam"), {}, strategy);
  std::vector<std::string> forms;
  PlanOptions options;
  options.global_batch = batch;
  const StepPlan plan = strategy->make_plan(m->network(), mesh, options);
  const TensorParallelPlan split(m->network(), layouts, mesh, "model");
  for (const TensorParallelLayer& l : tensor_parallel_layers(m->network(), split)) forms.push_back(name_of(l.form));
  EXPECT_EQ(forms, (std::vector<std::string>{"vocab_rows", "recurrent_units", "row_whole_input", "recurrent_units",
                                             "replicated"}));
  options.global_batch = 5;
  const StepPlan last = strategy->make_plan(m->network(), mesh, options);

  Tensor x{{rows, kSteps}, DType::Float32}, y{{rows}, DType::Int32};
  for (std::int64_t i = 0; i < rows; ++i) {
    y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % kClasses);
    for (std::int64_t t = 0; t < kSteps; ++t)
      x.data<float>()[i * kSteps + t] = static_cast<float>((i * 5 + t) % kVocab);
  }
  std::vector<std::int64_t> order(rows);
  std::iota(order.begin(), order.end(), 0);
  m->engine().reset_profile();
  m->train_epoch(x, y, order.data(), rows, batch, 3, nullptr);  // 9, 9, 5 rows
  const auto profile = m->engine().profile();
  ASSERT_EQ(profile.size(), 4u);
  for (std::size_t dev = 0; dev < 4; ++dev) {
    const CollectiveCounts full = plan.collective_counts(static_cast<int>(dev));
    const CollectiveCounts tail = last.collective_counts(static_cast<int>(dev));
    for (int k = 0; k < kCountedCollectives; ++k) {
      EXPECT_EQ(profile[dev].collectives.of[k].calls, 2 * full.of[k].calls + tail.of[k].calls)
          << "device " << dev << " " << name_of(static_cast<CountedCollective>(k));
      EXPECT_EQ(profile[dev].collectives.of[k].bytes, 2 * full.of[k].bytes + tail.of[k].bytes)
          << "device " << dev << " " << name_of(static_cast<CountedCollective>(k));
    }
  }
}

TEST(ParameterServerPlan, EachServerReceivesAndSendsThePlansBytes) {
  if (!zmq_available()) GTEST_SKIP() << "built without ZeroMQ";
  auto one = make_model(std::make_shared<OneDeviceStrategy>(), make_optimizer("sgd"), true);
  std::vector<PsVariableSpec> specs;
  std::vector<Tensor> initial;
  for (const Parameter* p : one->network().trainable_parameters()) {
    specs.push_back({p->name, p->value.shape()});
    initial.push_back(p->value);
  }
  // Three servers: a/kernel (6 rows) in 3 shards, c/kernel (4 rows) in 2, the rest whole, round-robin.
  const ShardLayout layout = ShardLayout::make(3, specs, {3, 1, 1, 1, 2, 1, 1, 1});
  std::vector<std::unique_ptr<ParameterShardServer>> servers;
  std::vector<std::string> endpoints;
  for (int s = 0; s < 3; ++s) {
    servers.push_back(std::make_unique<ParameterShardServer>(layout, s, initial, SGD(0.1), "tcp://127.0.0.1:*"));
    endpoints.push_back(servers.back()->endpoint());
  }
  auto ps = std::make_shared<ParameterServerWorkerStrategy>(layout, endpoints, 0, 30.0);
  auto m = make_model(ps, std::make_unique<SGD>(0.1), true);
  const StepPlan plan = ps->make_plan(m->network(), ps->mesh(), PlanOptions{});
  std::vector<std::int64_t> pulled(3), pushed(3);
  for (const PlanOp& op : plan.devices[0].ops) {
    if (op.kind == OpKind::Pull) pulled[static_cast<std::size_t>(op.peer)] += op.bytes;
    if (op.kind == OpKind::Push) pushed[static_cast<std::size_t>(op.peer)] += op.bytes;
  }
  EXPECT_EQ(pulled, pushed);
  EXPECT_EQ(std::accumulate(pulled.begin(), pulled.end(), std::int64_t{0}), one->network().trainable_count() * 4);
  std::vector<ParameterServerStats> before;
  for (const auto& s : servers) before.push_back(s->stats());
  ps->plan_steps(1, std::nullopt);
  train_two_steps(*m);
  const auto header = static_cast<std::int64_t>(kPsHeaderSize);
  for (std::size_t s = 0; s < 3; ++s) {
    const ParameterServerStats after = servers[s]->stats();
    EXPECT_GT(pulled[s], 0) << "server " << s;
    // Per step: a pull request (a header) and a push (a header and the server's rows of the
    // gradients) in; the pull's reply (a header and the server's rows) and the push's ack out.
    EXPECT_EQ(static_cast<std::int64_t>(after.pulls - before[s].pulls), 2) << "server " << s;
    EXPECT_EQ(static_cast<std::int64_t>(after.bytes_in - before[s].bytes_in), 2 * (2 * header + pushed[s]))
        << "server " << s;
    EXPECT_EQ(static_cast<std::int64_t>(after.bytes_out - before[s].bytes_out), 2 * (2 * header + pulled[s]))
        << "server " << s;
  }
}

}  // namespace
}  // namespace mdtrain
