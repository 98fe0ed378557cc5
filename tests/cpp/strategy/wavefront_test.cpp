// WavefrontExecutor (strategy/wavefront_executor.h): a stack of recurrent layers trained over 2 and
// 4 logical devices in time chunks ends with the weights of the one-device stack (float32
// rounding: the chunked weight-gradient sums), and the stacks it cannot cut are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>

#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/gru.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/lstm.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/wavefront_executor.h"

namespace mdtrain {
namespace {

std::unique_ptr<LayerStack> make_stack(bool gru_in_the_middle) {
  auto stack = std::make_unique<LayerStack>();
  for (int i = 0; i < 4; ++i) {
    RecurrentLayer::Options o;
    o.units = 6;
    o.return_sequences = true;
    const std::string name = "rnn" + std::to_string(i);
    if (gru_in_the_middle && i == 2) stack->add(std::make_shared<GRU>(name, o));
    else stack->add(std::make_shared<LSTM>(name, o));
  }
  Dense::Options d;
  d.units = 2;
  stack->add(std::make_shared<Dense>("head", d));
  stack->build({7, 3}, 123);
  return stack;
}

Tensor random_tensor(const Shape& shape, std::mt19937_64& rng) {
  Tensor t(shape);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// The reference: the whole stack on one device, one optimizer.
double one_device_step(LayerStack& stack, Optimizer& opt, const Loss& loss, const Tensor& x, const Tensor& y,
                       std::uint64_t step) {
  ForwardContext ctx;
  ctx.training = true;
  ctx.step = step;
  Tensor pred = stack.forward(x, ctx);
  Tensor dpred(pred.shape());
  const std::int64_t count = loss.sample_count(y, pred);
  const double sum = loss.forward_backward(y, pred, 1.0 / static_cast<double>(count), &dpred);
  stack.backward(dpred);
  opt.apply(stack.trainable_parameters());
  return sum / static_cast<double>(count);
}

void expect_same_weights_after_steps(int devices, std::int64_t chunk, const char* optimizer, bool gru) {
  auto reference = make_stack(gru), piped = make_stack(gru);
  auto loss = make_loss("mse");
  auto ref_opt = make_optimizer(optimizer), opt = make_optimizer(optimizer);
  WavefrontExecutor wave(*piped, devices, chunk, *loss, *opt);
  std::mt19937_64 rng(7);
  for (std::uint64_t step = 0; step < 3; ++step) {
    Tensor x = random_tensor({5, 7, 3}, rng), y = random_tensor({5, 7, 2}, rng);
    const double want = one_device_step(*reference, *ref_opt, *loss, x, y, step);
    EXPECT_NEAR(wave.train_step(x, y), want, 1e-5 * std::fabs(want) + 1e-7) << "step " << step;
  }
  auto a = reference->parameters(), b = piped->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::int64_t e = 0; e < a[i]->value.numel(); ++e) {
      const float want = a[i]->value.data<float>()[e], got = b[i]->value.data<float>()[e];
      ASSERT_NEAR(got, want, 2e-6f + 2e-5f * std::fabs(want)) << a[i]->name << "[" << e << "]";
    }
}

TEST(Wavefront, TwoDevicesMatchOneDevice) { expect_same_weights_after_steps(2, 3, "adam", false); }
TEST(Wavefront, FourDevicesMatchOneDeviceWithUnevenChunks) { expect_same_weights_after_steps(4, 2, "sgd", true); }
TEST(Wavefront, ChunkLongerThanTheSequence) { expect_same_weights_after_steps(2, 100, "sgd", false); }

TEST(Wavefront, RefusesABadChunkAndANonRecurrentStage) {
  auto stack = make_stack(false);
  auto loss = make_loss("mse");
  auto opt = make_optimizer("sgd");
  try {
    WavefrontExecutor(*stack, 2, 0, *loss, *opt);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("time_chunk"), std::string::npos) << e.what();
  }
  try {
    WavefrontExecutor(*stack, 5, 4, *loss, *opt);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("\"head\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mdtrain
