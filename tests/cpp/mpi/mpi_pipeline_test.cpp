// PipelineStrategy across MPI workers: a (workers x 2) ("batch", "pipe") mesh from
// DeviceMesh::for_workers, two pipeline stages inside each worker (threads, send/recv), the batch
// axis across the workers (MPI). Trains like the model on one device (float32 rounding), and every
// worker ends with bitwise the same weights and loss.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "mdtrain/distribute/optional_backends.h"
#include "mdtrain/model/model.h"
#include "mdtrain/nn/batch_normalization.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/multi_worker_mirrored_strategy.h"
#include "mdtrain/strategy/pipeline_strategy.h"

namespace mdtrain {
namespace {

constexpr std::int64_t kRows = 31, kBatch = 9;

std::vector<Device> cpus(int n) {
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(Device{DeviceKind::CPU, i});
  return devices;
}

std::unique_ptr<Model> make_model(std::shared_ptr<Strategy> strategy) {
  auto m = std::make_unique<Model>("m", 5);
  Dense::Options up, down, head;
  up.units = 8;
  up.activation = "relu";
  down.units = 6;
  down.activation = "tanh";
  head.units = 4;
  head.activation = "softmax";
  m->add(std::make_shared<Dense>("up", up));
  m->add(std::make_shared<Dropout>("drop", 0.25, 3));
  m->add(std::make_shared<Dense>("down", down));
  m->add(std::make_shared<Dense>("head", head));
  m->build({5});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")), make_optimizer("adam"), {},
             std::move(strategy));
  return m;
}

TEST(MpiPipeline, BatchAxisAcrossWorkersStagesInsideTrainsLikeOneDevice) {
  Tensor x({kRows, 5}, DType::Float32), y({kRows}, DType::Int32);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = noise(rng);
  for (std::int64_t i = 0; i < kRows; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 4);
  std::vector<std::int64_t> order(kRows);
  std::iota(order.begin(), order.end(), 0);

  auto workers = std::make_shared<MultiWorkerMirroredStrategy>(cpus(2), "threads", true);
  mpi_end_job_on_failure(false);
  const int n = workers->num_workers();
  const DeviceMesh mesh = DeviceMesh::for_workers({n, 2}, {"batch", "pipe"}, n, cpus(2));
  auto piped =
      make_model(std::make_shared<PipelineStrategy>(mesh, 2, PipelineScheduleKind::OneFOneB, std::vector<int>{2},
                                                    "pipe", std::string("batch"), false, workers));
  auto reference = make_model(nullptr);
  double piped_loss = 0, reference_loss = 0;
  for (int e = 0; e < 3; ++e) {
    piped_loss = piped->train_epoch(x, y, order.data(), kRows, kBatch, (kRows + kBatch - 1) / kBatch, nullptr)
                     .logs.front()
                     .second;
    reference_loss = reference->train_epoch(x, y, order.data(), kRows, kBatch, (kRows + kBatch - 1) / kBatch, nullptr)
                         .logs.front()
                         .second;
  }
  EXPECT_NEAR(piped_loss, reference_loss, 1e-5 * (1 + std::abs(reference_loss)));
  const auto got = piped->get_weights(), want = reference->get_weights();
  ASSERT_EQ(got.size(), want.size());
  auto world = make_mpi_communicator();
  for (std::size_t i = 0; i < got.size(); ++i) {
    for (std::int64_t j = 0; j < got[i].numel(); ++j) {
      const double a = got[i].data<float>()[j], b = want[i].data<float>()[j];
      ASSERT_LE(std::abs(a - b), 1e-5 * (1 + std::abs(b))) << "weight " << i << " element " << j;
    }
    Tensor chief = got[i].clone();
    world->broadcast(chief, 0);
    EXPECT_EQ(std::memcmp(chief.raw(), got[i].raw(), got[i].nbytes()), 0) << "weight " << i;
  }
  double loss0 = piped_loss;
  world->broadcast(&loss0, 1, DType::Float64, 0);
  EXPECT_EQ(loss0, piped_loss);
}

}  // namespace
}  // namespace mdtrain
