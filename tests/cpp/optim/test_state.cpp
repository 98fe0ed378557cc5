// Checkpoint state, clone(), sharded (range) updates and parameter-list checks.
#include <gtest/gtest.h>

#include "mdtrain/optim/adagrad.h"
#include "mdtrain/optim/adam.h"
#include "mdtrain/optim/rmsprop.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/optim/sgd.h"
#include "optim_test_util.h"

namespace mdtrain {
namespace {

using testing::bitwise_equal;
using testing::expect_optim_error;
using testing::make_param;

// A two-parameter model whose gradients depend on the step, so a resumed run that lost any
// state would drift.
struct Model {
  std::unique_ptr<Parameter> kernel =
      make_param("dense/kernel", {0.3, -0.7, 1.1, 0.2, -0.4, 0.9}, {2, 3}, DType::Float32);
  std::unique_ptr<Parameter> bias = make_param("dense/bias", {0.05, -0.02}, {2}, DType::Float32);
  ParameterList params() { return {kernel.get(), bias.get()}; }
  void set_grads(int step) {
    float* g = kernel->grad.data<float>();
    for (int i = 0; i < 6; ++i) g[i] = 0.1f * static_cast<float>((i + 1) * (step % 3 + 1)) - 0.25f;
    float* gb = bias->grad.data<float>();
    gb[0] = 0.5f - 0.2f * static_cast<float>(step);
    gb[1] = 0.01f * static_cast<float>(step * step);
  }
  void step(Optimizer& opt, int s) {
    set_grads(s);
    opt.apply(params());
  }
};

std::vector<std::unique_ptr<Optimizer>> all_optimizers() {
  std::vector<std::unique_ptr<Optimizer>> v;
  v.push_back(std::make_unique<Adam>(0.01, 0.9, 0.999, 1e-7, true));
  v.push_back(std::make_unique<SGD>(0.1, 0.9, true));
  v.push_back(std::make_unique<RMSprop>(0.01, 0.9, 0.5, 1e-7, true));
  v.push_back(std::make_unique<Adagrad>(0.1));
  return v;
}

TEST(State, NamesFollowKerasSlotNamesAndOrder) {
  Adam opt;
  Model m;
  m.step(opt, 0);
  auto st = opt.state();
  std::vector<std::string> names;
  for (const auto& [n, t] : st) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"iterations", "dense/kernel/momentum", "dense/bias/momentum",
                                             "dense/kernel/velocity", "dense/bias/velocity"}));
  EXPECT_EQ(st[0].second.data<std::int64_t>()[0], 1);
  EXPECT_EQ(st[1].second.shape(), (Shape{2, 3}));
  EXPECT_EQ(st[1].second.dtype(), DType::Float32);
}

TEST(State, RoundTripContinuesBitwiseIdentically) {
  for (auto& proto : all_optimizers()) {
    SCOPED_TRACE(proto->class_name());
    // Uninterrupted: 6 steps.
    auto straight = proto->clone();
    Model a;
    for (int s = 0; s < 6; ++s) a.step(*straight, s);

    // Interrupted after 3 steps: state and weights go into a fresh optimizer and model.
    auto first = proto->clone();
    Model b;
    for (int s = 0; s < 3; ++s) b.step(*first, s);
    auto saved = first->state();
    first.reset();                                               // the saved state must not alias the old optimizer
    auto resumed = make_optimizer(serialize_optimizer(*proto));  // same hyperparameters, no state
    resumed->set_state(saved);                                   // before build: checked at the first apply
    Model c;
    c.kernel->value.copy_from(b.kernel->value);
    c.bias->value.copy_from(b.bias->value);
    for (int s = 3; s < 6; ++s) c.step(*resumed, s);

    EXPECT_EQ(resumed->iterations(), 6);
    EXPECT_TRUE(bitwise_equal(a.kernel->value, c.kernel->value));
    EXPECT_TRUE(bitwise_equal(a.bias->value, c.bias->value));
  }
}

TEST(State, SetStateAfterBuildReplacesSlots) {
  Adam a, b;
  Model ma, mb;
  for (int s = 0; s < 2; ++s) ma.step(a, s);
  mb.step(b, 7);  // b is built, with different slots
  b.set_state(a.state());
  mb.kernel->value.copy_from(ma.kernel->value);
  mb.bias->value.copy_from(ma.bias->value);
  ma.step(a, 2);
  mb.step(b, 2);
  EXPECT_TRUE(bitwise_equal(ma.kernel->value, mb.kernel->value));
}

TEST(State, SetStateValidatesNamesShapesAndCount) {
  Adam opt;
  Model m;
  m.step(opt, 0);
  auto good = opt.state();

  auto renamed = good;
  renamed[2].first = "other/bias/momentum";
  expect_optim_error([&] { opt.set_state(renamed); }, "other/bias/momentum");

  auto reshaped = good;
  reshaped[1].second = Tensor::zeros({3, 2}, DType::Float32);
  expect_optim_error([&] { opt.set_state(reshaped); }, "(3, 2)");

  auto short_state = good;
  short_state.pop_back();
  expect_optim_error([&] { opt.set_state(short_state); }, "entries");

  auto no_iterations = good;
  no_iterations.erase(no_iterations.begin());
  expect_optim_error([&] { opt.set_state(no_iterations); }, "iterations");

  // Nothing changed by the failed attempts.
  auto after = opt.state();
  ASSERT_EQ(after.size(), good.size());
  for (std::size_t i = 0; i < good.size(); ++i) EXPECT_TRUE(bitwise_equal(after[i].second, good[i].second));
}

TEST(State, PendingStateIsCheckedAtTheFirstApply) {
  Adam a;
  Model m;
  m.step(a, 0);
  auto st = a.state();
  Adam fresh;
  fresh.set_state(st);
  auto other = make_param("x", {1.0, 2.0});
  expect_optim_error([&] { fresh.apply({other.get()}); }, "entries");
}

TEST(State, CloneIsIndependent) {
  Adam opt(0.01);
  Model m1;
  m1.step(opt, 0);
  auto copy = opt.clone();
  Model m2;
  m2.kernel->value.copy_from(m1.kernel->value);
  m2.bias->value.copy_from(m1.bias->value);

  // Advancing the original does not move the copy's slots or iterations.
  auto copy_state_before = copy->state();
  m1.step(opt, 1);
  auto copy_state_after = copy->state();
  for (std::size_t i = 0; i < copy_state_before.size(); ++i)
    EXPECT_TRUE(bitwise_equal(copy_state_before[i].second, copy_state_after[i].second)) << i;
  EXPECT_EQ(copy->iterations(), 1);

  // And the copy, stepped the same way, reproduces the original bit for bit.
  m2.step(*copy, 1);
  EXPECT_TRUE(bitwise_equal(m1.kernel->value, m2.kernel->value));
  EXPECT_EQ(copy->config(), opt.config());
}

TEST(State, ShardedApplyEqualsFullApply) {
  for (auto& proto : all_optimizers()) {
    SCOPED_TRACE(proto->class_name());
    auto full = proto->clone();
    auto shard_a = proto->clone();
    auto shard_b = proto->clone();
    Model ref, split;
    for (int s = 0; s < 3; ++s) {
      ref.step(*full, s);
      split.set_grads(s);
      // Elements [0, 4) and [4, 8) of kernel(6) + bias(2): the cut falls inside the kernel.
      shard_a->apply(split.params(), 0, 4);
      shard_b->apply(split.params(), 4, 8);
    }
    EXPECT_TRUE(bitwise_equal(ref.kernel->value, split.kernel->value));
    EXPECT_TRUE(bitwise_equal(ref.bias->value, split.bias->value));
    EXPECT_EQ(shard_a->iterations(), 3);
    EXPECT_EQ(shard_a->total_size(), 8);
  }
}

// ZeRO-1's memory half: optimizers holding only their range's slots give the full update's
// weights, hold only their share of the bytes, and their states stitch into the full state.
TEST(State, HeldRangesKeepTheirShareOfTheStateAndStitchIntoTheFullState) {
  for (auto& proto : all_optimizers()) {
    SCOPED_TRACE(proto->class_name());
    auto full = proto->clone();
    auto shard_a = proto->clone();
    auto shard_b = proto->clone();
    shard_a->hold_only(0, 4);    // the cut falls inside the kernel (6 elements), then the bias (2)
    shard_b->hold_only(4, 100);  // past the end: clamped
    Model ref, split;
    for (int s = 0; s < 3; ++s) {
      ref.step(*full, s);
      split.set_grads(s);
      shard_a->apply(split.params(), 0, 4);
      shard_b->apply(split.params(), 4, 8);
    }
    EXPECT_TRUE(bitwise_equal(ref.kernel->value, split.kernel->value));
    EXPECT_TRUE(bitwise_equal(ref.bias->value, split.bias->value));
    const std::int64_t slots = full->state_bytes() / (8 * 4);  // slot kinds (float32, 8 elements)
    EXPECT_EQ(shard_a->state_bytes(), slots * 4 * 4);
    EXPECT_EQ(shard_b->state_bytes(), slots * 4 * 4);
    // Whole tensors, zero outside the range: element-wise, a's part then b's part is full's.
    const auto want = full->state(), a = shard_a->state(), b = shard_b->state();
    ASSERT_EQ(a.size(), want.size());
    for (std::size_t i = 1; i < want.size(); ++i) {
      SCOPED_TRACE(want[i].first);
      ASSERT_EQ(a[i].second.shape(), want[i].second.shape());
      const bool kernel = want[i].first.rfind("dense/kernel", 0) == 0;
      for (std::int64_t e = 0; e < want[i].second.numel(); ++e) {
        const std::int64_t global = (kernel ? 0 : 6) + e;
        const Tensor& from = global < 4 ? a[i].second : b[i].second;
        const Tensor& other = global < 4 ? b[i].second : a[i].second;
        EXPECT_EQ(from.data<float>()[e], want[i].second.data<float>()[e]) << "element " << e;
        EXPECT_EQ(other.data<float>()[e], 0.0f) << "element " << e << " outside the range";
      }
    }
    // The whole state restores into a range; a fourth step then matches again.
    auto restored = proto->clone();
    restored->hold_only(0, 4);
    restored->set_state(want);
    ref.step(*full, 3);
    split.set_grads(3);
    restored->apply(split.params(), 0, 4);
    shard_b->apply(split.params(), 4, 8);
    EXPECT_TRUE(bitwise_equal(ref.kernel->value, split.kernel->value));
    // Outside the held range is a logic error, not a write into another replica's memory.
    EXPECT_THROW(shard_a->apply(split.params(), 2, 6), std::logic_error);
  }
}

TEST(State, HoldingARangeAfterBuildKeepsTheSlotValues) {
  Adam opt(0.01, 0.9, 0.999, 1e-7, false);
  Adam full(0.01, 0.9, 0.999, 1e-7, false);
  Model a, ref;
  a.step(opt, 0);
  ref.step(full, 0);
  opt.hold_only(2, 8);                             // built over all 8 elements: re-cut at the next apply, values kept
  EXPECT_THROW(a.step(opt, 1), std::logic_error);  // a whole apply no longer fits
  EXPECT_EQ(opt.state_bytes(), 2 * 6 * 4);         // momentum and velocity of 6 elements
  EXPECT_EQ(opt.iterations(), 1);                  // the refused step changed nothing
  a.set_grads(1);
  opt.apply(a.params(), 2, 8);
  ref.step(full, 1);
  for (int e = 2; e < 6; ++e) EXPECT_EQ(a.kernel->value.data<float>()[e], ref.kernel->value.data<float>()[e]);
  EXPECT_TRUE(bitwise_equal(a.bias->value, ref.bias->value));
}

TEST(State, MismatchedParameterListThrows) {
  Adam opt;
  Model m;
  m.step(opt, 0);
  auto extra = make_param("extra", {1.0});
  expect_optim_error([&] { opt.apply({m.kernel.get(), m.bias.get(), extra.get()}); }, "built for 2");
  auto wrong_shape = make_param("dense/bias", {1.0, 2.0, 3.0}, {3}, DType::Float32);
  expect_optim_error([&] { opt.apply({m.kernel.get(), wrong_shape.get()}); }, "(3,)");
  auto wrong_dtype = make_param("dense/bias", {1.0, 2.0}, {2}, DType::Float64);
  expect_optim_error([&] { opt.apply({m.kernel.get(), wrong_dtype.get()}); }, "float64");
  EXPECT_EQ(opt.iterations(), 1);
}

TEST(State, GradientMustMatchItsValue) {
  Adam opt;
  auto p = make_param("w", {1.0, 2.0});
  p->grad = Tensor::zeros({3}, DType::Float64);
  expect_optim_error([&] { opt.apply({p.get()}); }, "gradient of 'w'");
}

TEST(State, SetLearningRateReplacesASchedule) {
  SGD opt(std::make_shared<ExponentialDecay>(0.1, 1, 0.5));
  auto p = make_param("w", {1.0});
  opt.apply({p.get()});
  EXPECT_DOUBLE_EQ(opt.current_learning_rate(), 0.05);
  opt.set_learning_rate(0.3);
  EXPECT_EQ(opt.current_learning_rate(), 0.3);
  EXPECT_EQ(opt.config().at("learning_rate"), Json(0.3));
  expect_optim_error([&] { opt.set_learning_rate(-1.0); }, "learning_rate");
}

// A model that changed shape (Sequential.pop, add): the slots of the parameters that stay carry
// over by name, a new parameter's start at the slot's initial value (Adagrad's 0.1), and a
// parameter whose shape changed under the same name starts afresh too.
TEST(State, CarriedStateKeepsTheSlotsOfParametersThatStay) {
  Adagrad opt(0.1);
  Model m;
  for (int s = 0; s < 3; ++s) m.step(opt, s);
  const auto previous = opt.state();
  auto head = make_param("head/kernel", {1.0, 2.0}, {2}, DType::Float32);
  auto reshaped = make_param("dense/bias", {0.0, 0.0, 0.0}, {3}, DType::Float32);
  const auto carried = opt.carried_state(previous, {m.kernel.get(), reshaped.get(), head.get()});
  ASSERT_EQ(carried.size(), 4u);
  EXPECT_EQ(carried[0].first, "iterations");
  EXPECT_EQ(carried[0].second.data<std::int64_t>()[0], 3);
  EXPECT_EQ(carried[1].first, "dense/kernel/accumulator");
  EXPECT_TRUE(bitwise_equal(carried[1].second, previous[1].second));
  EXPECT_EQ(carried[2].first, "dense/bias/accumulator");
  EXPECT_EQ(carried[3].first, "head/kernel/accumulator");
  for (int k : {2, 3}) {
    const Tensor& slot = carried[static_cast<std::size_t>(k)].second;
    for (std::int64_t i = 0; i < slot.numel(); ++i) EXPECT_FLOAT_EQ(slot.data<float>()[i], 0.1f);
  }
  // The carried state is a whole state for the new parameters.
  Adagrad fresh(0.1);
  fresh.set_state(carried);
  fresh.apply({m.kernel.get(), reshaped.get(), head.get()});
  EXPECT_EQ(fresh.iterations(), 4);
}

TEST(State, CarriedStateNeedsAState) {
  Adam opt;
  expect_optim_error([&] { opt.carried_state({}, {}); }, "a state to carry must start with 'iterations'");
}

}  // namespace
}  // namespace mdtrain
