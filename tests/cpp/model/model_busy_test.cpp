// One loop at a time per model: a second thread that trains, evaluates, predicts or changes a
// model while another thread runs a loop on it gets a clear std::runtime_error (it used to crash
// in the lazy engine set-up or corrupt the weights), while the running thread itself may re-enter
// (a batch callback that predicts or saves). Two models on two threads are independent.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "mdtrain/model/model.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/mirrored_strategy.h"

namespace mdtrain {
namespace {

constexpr std::int64_t kRows = 64, kFeatures = 8, kClasses = 3;

std::unique_ptr<Model> small_model(std::uint64_t seed) {
  auto m = std::make_unique<Model>("busy", seed);
  Dense::Options hidden;
  hidden.units = 16;
  hidden.activation = "relu";
  m->add(std::make_shared<Dense>("dense", hidden));
  Dense::Options out;
  out.units = kClasses;
  m->add(std::make_shared<Dense>("dense_1", out));
  m->build({kFeatures});
  m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")),
             std::shared_ptr<Optimizer>(make_optimizer(Json("adam"))), {"accuracy"},
             std::make_shared<MirroredStrategy>(
                 std::vector<Device>{Device{DeviceKind::CPU, 0}, Device{DeviceKind::CPU, 1}}));
  return m;
}

struct Data {
  Tensor x{Shape{kRows, kFeatures}, DType::Float32};
  Tensor y{Shape{kRows}, DType::Int32};
  std::vector<std::int64_t> order = std::vector<std::int64_t>(kRows);
  Data() {
    for (std::int64_t i = 0; i < kRows * kFeatures; ++i) x.data<float>()[i] = static_cast<float>((i * 7) % 11) / 11;
    for (std::int64_t i = 0; i < kRows; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % kClasses);
    std::iota(order.begin(), order.end(), 0);
  }
};

// Runs `intrude` on another thread while `m` is inside train_epoch (held in its first batch
// callback until the intruder is done), and returns the intruder's error message ("" if none).
std::string intrude_during_fit(Model& m, const Data& d, const std::function<void()>& intrude) {
  std::string error;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  auto on_batch = [&](std::int64_t, const Logs&) {
    std::thread other([&] {
      try {
        intrude();
      } catch (const std::runtime_error& e) {
        error = e.what();
      }
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    lock.unlock();
    other.join();
    return true;  // stop after the first batch
  };
  m.train_epoch(d.x, d.y, d.order.data(), kRows, 16, 4, on_batch);
  return error;
}

TEST(ModelBusy, AnotherThreadCannotRunALoopWhileOneRuns) {
  Data d;
  auto m = small_model(1);
  const std::vector<std::pair<std::string, std::function<void()>>> intruders = {
      {"fit", [&] { m->train_epoch(d.x, d.y, d.order.data(), kRows, 16, 4, nullptr); }},
      {"evaluate", [&] { m->evaluate(d.x, d.y, 16, nullptr); }},
      {"predict", [&] { m->predict(d.x, 16); }},
      {"train_on_batch", [&] { m->train_on_batch(d.x, d.y); }},
      {"set_weights", [&] { m->set_weights(m->get_weights()); }},
      {"compile",
       [&] {
         m->compile(std::shared_ptr<Loss>(make_loss("sparse_categorical_crossentropy")),
                    std::shared_ptr<Optimizer>(make_optimizer(Json("sgd"))), {}, nullptr);
       }},
  };
  for (const auto& [what, intrude] : intruders) {
    const std::string error = intrude_during_fit(*m, d, intrude);
    EXPECT_NE(error.find("is busy"), std::string::npos) << what << ": " << error;
    EXPECT_NE(error.find("\"busy\""), std::string::npos) << what << " names the model: " << error;
    EXPECT_EQ(error.rfind("[model] ", 0), 0u) << error;
  }
}

TEST(ModelBusy, TheRunningThreadMayReenterAndTheModelIsFreeAfterwards) {
  Data d;
  auto m = small_model(2);
  bool predicted = false;
  m->train_epoch(d.x, d.y, d.order.data(), kRows, 16, 2, [&](std::int64_t, const Logs&) {
    m->predict(d.x, 16);  // a callback on the training thread: allowed
    predicted = true;
    return false;
  });
  EXPECT_TRUE(predicted);
  // After the loop, another thread may use the model.
  std::thread other([&] { EXPECT_NO_THROW(m->evaluate(d.x, d.y, 16, nullptr)); });
  other.join();
}

TEST(ModelBusy, ConcurrentFitsFromManyThreadsNeverCorruptTheModel) {
  // The crash of issue #19: fits on one model from several threads. Each either runs alone or is
  // refused; the model ends with the weights of the fits that ran, one after another.
  Data d;
  auto m = small_model(3);
  auto reference = small_model(3);
  std::atomic<int> ran{0}, refused{0};
  for (int round = 0; round < 20; ++round) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t)
      threads.emplace_back([&] {
        try {
          m->train_epoch(d.x, d.y, d.order.data(), kRows, 16, 4, nullptr);
          ++ran;
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("is busy"), std::string::npos) << e.what();
          ++refused;
        }
      });
    for (auto& t : threads) t.join();
  }
  ASSERT_GT(ran.load(), 0);
  for (int i = 0; i < ran.load(); ++i) reference->train_epoch(d.x, d.y, d.order.data(), kRows, 16, 4, nullptr);
  const auto a = m->get_weights(), b = reference->get_weights();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::int64_t k = 0; k < a[i].numel(); ++k)
      ASSERT_EQ(a[i].data<float>()[k], b[i].data<float>()[k]) << "weight " << i << " element " << k;
}

}  // namespace
}  // namespace mdtrain
