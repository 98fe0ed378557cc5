// The fused CUDA optimizer updates against the CPU optimizers of optim/ (needs a GPU; skipped with
// the reason otherwise): the same parameters and gradients, three steps, with and without
// clipvalue and weight decay, several parameters in one bucket.
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "gpu_test_util.h"
#include "mdtrain/core/parameter.h"
#include "mdtrain/ops/cuda/optimizer_kernels.h"
#include "mdtrain/optim/adagrad.h"
#include "mdtrain/optim/adam.h"
#include "mdtrain/optim/rmsprop.h"
#include "mdtrain/optim/sgd.h"

namespace mdtrain {
namespace {

using namespace gpu_testing;

struct GpuParam {
  Tensor value, grad;
  std::vector<Tensor> slots;
};

// Runs `steps` updates on the CPU with `opt` and on the GPU with `gpu_step(segments, step)`, then
// compares the values and every slot (named as the optimizer's state() names them).
void check(Optimizer& opt, int n_slots, const std::vector<double>& slot_init, DType dt,
           const std::function<void(const std::vector<cuda::UpdateSegment>&, int step)>& gpu_step) {
  std::vector<std::unique_ptr<Parameter>> params;
  std::vector<GpuParam> gpu;
  ParameterList list;
  const Shape shapes[] = {{7, 5}, {5}, {300}};
  unsigned seed = 10;
  for (const Shape& s : shapes) {
    params.push_back(std::make_unique<Parameter>(cat("p", params.size()), random_tensor(s, dt, seed++)));
    list.push_back(params.back().get());
    GpuParam g{to_gpu(params.back()->value), Tensor(s, dt, kGpu), {}};
    for (int k = 0; k < n_slots; ++k) {
      g.slots.emplace_back(s, dt, kGpu);
      g.slots.back().fill(slot_init[static_cast<std::size_t>(k)]);
    }
    gpu.push_back(std::move(g));
  }
  for (int step = 0; step < 3; ++step) {
    std::vector<cuda::UpdateSegment> segs;
    for (std::size_t i = 0; i < params.size(); ++i) {
      params[i]->grad = random_tensor(params[i]->value.shape(), dt, 100 + 10 * step + static_cast<unsigned>(i), -3, 3);
      gpu[i].grad.copy_from(params[i]->grad);
      cuda::UpdateSegment u;
      u.value = gpu[i].value.raw();
      u.grad = gpu[i].grad.raw();
      for (int k = 0; k < n_slots; ++k) u.slots[k] = gpu[i].slots[static_cast<std::size_t>(k)].raw();
      u.size = gpu[i].value.numel();
      u.decay = opt.options().weight_decay ? *opt.options().weight_decay * opt.current_learning_rate() : 0.0;
      segs.push_back(u);
    }
    gpu_step(segs, step);
    opt.apply(list);
  }
  for (std::size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(compare(gpu[i].value, params[i]->value, rtol_of(dt), rtol_of(dt) * 1e-2), "")
        << opt.class_name() << " " << name_of(dt) << " parameter " << i;
  // state(): iterations, then slot kind by slot kind, parameter by parameter.
  const Optimizer::State state = opt.state();
  ASSERT_EQ(state.size(), 1 + params.size() * static_cast<std::size_t>(n_slots));
  for (int k = 0; k < n_slots; ++k)
    for (std::size_t i = 0; i < params.size(); ++i)
      EXPECT_EQ(compare(gpu[i].slots[static_cast<std::size_t>(k)], state[1 + k * params.size() + i].second, rtol_of(dt),
                        rtol_of(dt) * 1e-2),
                "")
          << opt.class_name() << " slot " << state[1 + k * params.size() + i].first;
}

const DType kFloats[] = {DType::Float32, DType::Float64};

OptimizerOptions with(std::optional<double> clipvalue, std::optional<double> weight_decay) {
  OptimizerOptions o;
  o.clipvalue = clipvalue;
  o.weight_decay = weight_decay;
  return o;
}

TEST(CudaOptimizerKernels, SgdMatchesCpu) {
  MDTRAIN_REQUIRE_REAL_GPU();
  for (DType dt : kFloats)
    for (double momentum : {0.0, 0.9})
      for (bool nesterov : {false, true})
        for (auto clip : {std::optional<double>(), std::optional<double>(0.5)}) {
          SGD opt(0.05, momentum, nesterov, with(clip, 0.01));
          check(opt, momentum > 0 ? 1 : 0, {0.0}, dt, [&](const auto& segs, int) {
            cuda::sgd_update(0, dt, segs, 0.05, momentum, nesterov, clip.value_or(HUGE_VAL));
          });
        }
}

TEST(CudaOptimizerKernels, AdamMatchesCpu) {
  MDTRAIN_REQUIRE_REAL_GPU();
  for (DType dt : kFloats)
    for (bool amsgrad : {false, true})
      for (auto clip : {std::optional<double>(), std::optional<double>(0.5)}) {
        Adam opt(0.01, 0.9, 0.999, 1e-7, amsgrad, with(clip, std::nullopt));
        check(opt, amsgrad ? 3 : 2, {0.0, 0.0, 0.0}, dt, [&](const auto& segs, int step) {
          const double t = step + 1;  // as optim/adam.cpp
          const double alpha = 0.01 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
          cuda::adam_update(0, dt, segs, alpha, 0.9, 0.999, 1e-7, amsgrad, clip.value_or(HUGE_VAL));
        });
      }
}

TEST(CudaOptimizerKernels, RmspropMatchesCpu) {
  MDTRAIN_REQUIRE_REAL_GPU();
  for (DType dt : kFloats)
    for (double momentum : {0.0, 0.5})
      for (bool centered : {false, true}) {
        RMSprop opt(0.01, 0.9, momentum, 1e-7, centered, with(std::nullopt, 0.02));
        const int slots = 1 + (momentum > 0) + centered;
        check(opt, slots, {0.0, 0.0, 0.0}, dt, [&](const auto& segs, int) {
          cuda::rmsprop_update(0, dt, segs, 0.01, 0.9, momentum, 1e-7, centered, HUGE_VAL);
        });
      }
}

TEST(CudaOptimizerKernels, AdagradMatchesCpu) {
  MDTRAIN_REQUIRE_REAL_GPU();
  for (DType dt : kFloats) {
    Adagrad opt(0.05, 0.1, 1e-7, with(0.3, std::nullopt));
    check(opt, 1, {0.1}, dt, [&](const auto& segs, int) { cuda::adagrad_update(0, dt, segs, 0.05, 1e-7, 0.3); });
  }
}

}  // namespace
}  // namespace mdtrain
