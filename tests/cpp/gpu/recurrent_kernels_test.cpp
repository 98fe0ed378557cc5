// The CUDA kernels of ops/recurrent.h (one time step of LSTM and GRU) against the CPU loops, and
// SimpleRNN / LSTM / GRU layers run forward and backward on a GPU against the same layers on the
// host. Needs a GPU (skipped with the reason otherwise); MDTRAIN_GPU_TESTS_ON_CPU=1 runs them with
// host tensors to check the tests themselves. The kernels and their tests: ops/cuda/kernel_list.h.
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "mdtrain/nn/gru.h"
#include "mdtrain/nn/lstm.h"
#include "mdtrain/nn/simple_rnn.h"
#include "mdtrain/ops/recurrent.h"

namespace mdtrain {
namespace {

using namespace gpu_testing;

// 300 rows x 37 units: several blocks of the grid-stride loop, a unit count that is no power of 2.
constexpr std::int64_t kRows = 300, kUnits = 37;

// exp and tanh of the GPU differ from libm's in the last bits: a few float rounding steps.
double rtol(DType dt) { return dt == DType::Float32 ? 1e-5 : 1e-12; }
double atol(DType dt) { return dt == DType::Float32 ? 1e-6 : 1e-13; }

TEST(CudaRecurrentKernels, LstmStepForwardMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(name_of(dt));
    const Tensor z = random_tensor({kRows, 4 * kUnits}, dt, 1, -4, 4), c_prev = random_tensor({kRows, kUnits}, dt, 2);
    Tensor gates({kRows, 4 * kUnits}, dt), c({kRows, kUnits}, dt), h({kRows, kUnits}, dt);
    Tensor g_gates({kRows, 4 * kUnits}, dt, kGpu), g_c({kRows, kUnits}, dt, kGpu), g_h({kRows, kUnits}, dt, kGpu);
    ops::lstm_step_forward(z, c_prev, gates, c, h);
    ops::lstm_step_forward(to_gpu(z), to_gpu(c_prev), g_gates, g_c, g_h);
    EXPECT_EQ(compare(g_gates, gates, rtol(dt), atol(dt)), "");
    EXPECT_EQ(compare(g_c, c, rtol(dt), atol(dt)), "");
    EXPECT_EQ(compare(g_h, h, rtol(dt), atol(dt)), "");
  }
}

TEST(CudaRecurrentKernels, LstmStepBackwardMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(name_of(dt));
    // Activated gates in (0, 1) (g in (-1, 1)), as the forward step leaves them.
    const Tensor gates = random_tensor({kRows, 4 * kUnits}, dt, 3, 0.05, 0.95);
    const Tensor c_prev = random_tensor({kRows, kUnits}, dt, 4), c = random_tensor({kRows, kUnits}, dt, 5);
    const Tensor dh = random_tensor({kRows, kUnits}, dt, 6), dc_next = random_tensor({kRows, kUnits}, dt, 7);
    Tensor dc = dc_next.clone(), dz({kRows, 4 * kUnits}, dt);
    Tensor g_dc = to_gpu(dc_next), g_dz({kRows, 4 * kUnits}, dt, kGpu);
    ops::lstm_step_backward(gates, c_prev, c, dh, dc, dz);
    ops::lstm_step_backward(to_gpu(gates), to_gpu(c_prev), to_gpu(c), to_gpu(dh), g_dc, g_dz);
    EXPECT_EQ(compare(g_dc, dc, rtol(dt), atol(dt)), "");
    EXPECT_EQ(compare(g_dz, dz, rtol(dt), atol(dt)), "");
  }
}

TEST(CudaRecurrentKernels, GruStepForwardMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(name_of(dt));
    const Tensor xz = random_tensor({kRows, 3 * kUnits}, dt, 8, -3, 3), hz = random_tensor({kRows, 3 * kUnits}, dt, 9);
    const Tensor h_prev = random_tensor({kRows, kUnits}, dt, 10);
    Tensor gates({kRows, 3 * kUnits}, dt), h({kRows, kUnits}, dt);
    Tensor g_gates({kRows, 3 * kUnits}, dt, kGpu), g_h({kRows, kUnits}, dt, kGpu);
    ops::gru_step_forward(xz, hz, h_prev, gates, h);
    ops::gru_step_forward(to_gpu(xz), to_gpu(hz), to_gpu(h_prev), g_gates, g_h);
    EXPECT_EQ(compare(g_gates, gates, rtol(dt), atol(dt)), "");
    EXPECT_EQ(compare(g_h, h, rtol(dt), atol(dt)), "");
  }
}

TEST(CudaRecurrentKernels, GruStepBackwardMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(name_of(dt));
    const Tensor gates = random_tensor({kRows, 3 * kUnits}, dt, 11, 0.05, 0.95);
    const Tensor hz = random_tensor({kRows, 3 * kUnits}, dt, 12), h_prev = random_tensor({kRows, kUnits}, dt, 13);
    const Tensor dh = random_tensor({kRows, kUnits}, dt, 14), dh_prev0 = random_tensor({kRows, kUnits}, dt, 15);
    // With dh_prev (a step after the first) and without (the first step).
    for (bool with_prev : {true, false}) {
      SCOPED_TRACE(with_prev ? "dh_prev" : "no dh_prev");
      Tensor dx({kRows, 3 * kUnits}, dt), dhz({kRows, 3 * kUnits}, dt);
      Tensor g_dx({kRows, 3 * kUnits}, dt, kGpu), g_dhz({kRows, 3 * kUnits}, dt, kGpu);
      Tensor dh_prev = with_prev ? dh_prev0.clone() : Tensor();
      Tensor g_dh_prev = with_prev ? to_gpu(dh_prev0) : Tensor();
      ops::gru_step_backward(gates, hz, h_prev, dh, dx, dhz, dh_prev);
      ops::gru_step_backward(to_gpu(gates), to_gpu(hz), to_gpu(h_prev), to_gpu(dh), g_dx, g_dhz, g_dh_prev);
      EXPECT_EQ(compare(g_dx, dx, rtol(dt), atol(dt)), "");
      EXPECT_EQ(compare(g_dhz, dhz, rtol(dt), atol(dt)), "");
      if (with_prev) EXPECT_EQ(compare(g_dh_prev, dh_prev, rtol(dt), atol(dt)), "");
    }
  }
}

TEST(CudaRecurrentKernels, AddMaskedMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(name_of(dt));
    const Tensor g = random_tensor({kRows, kUnits}, dt, 16), mask = random_tensor({kRows, kUnits}, dt, 17, 0, 2);
    Tensor acc = random_tensor({kRows, kUnits}, dt, 18), g_acc = to_gpu(acc);
    ops::add_masked(g, mask, acc);
    ops::add_masked(to_gpu(g), to_gpu(mask), g_acc);
    // One multiply-add per element: a fused multiply-add on the GPU may round once where the CPU rounds twice.
    EXPECT_EQ(compare(g_acc, acc, dt == DType::Float32 ? 1e-6 : 1e-15, 1e-7), "");
  }
}

// A copy of `host` whose weights and gradients live on the GPU.
std::unique_ptr<Layer> gpu_copy(const Layer& host) {
  auto copy = host.clone();
  for (auto* p : copy->parameters()) {
    Tensor v(p->value.shape(), p->value.dtype(), kGpu), g(p->value.shape(), p->value.dtype(), kGpu);
    v.copy_from(p->value);
    p->value = v;
    p->grad = g;
  }
  return copy;
}

template <class Cell>
void check_layer_on_gpu(bool return_sequences, bool go_backwards, double recurrent_dropout) {
  RecurrentLayer::Options o;
  o.units = 19;
  o.return_sequences = return_sequences;
  o.go_backwards = go_backwards;
  o.dropout = recurrent_dropout;
  o.recurrent_dropout = recurrent_dropout;
  o.seed = 5;
  Cell host("cell", o);
  host.build({7, 5}, 3);
  for (auto* p : host.parameters()) p->grad = Tensor(p->value.shape(), p->value.dtype());
  auto device = gpu_copy(host);
  ForwardContext ctx;
  ctx.training = recurrent_dropout > 0.0;
  const Tensor x = random_tensor({9, 7, 5}, DType::Float32, 21);
  const Tensor dy = random_tensor(return_sequences ? Shape{9, 7, 19} : Shape{9, 19}, DType::Float32, 22);
  const Tensor y_host = host.forward(x, ctx).clone();
  const Tensor dx_host = host.backward(dy, true).clone();
  const Tensor y_gpu = device->forward(to_gpu(x), ctx);
  const Tensor dx_gpu = device->backward(to_gpu(dy), true);
  // Seven steps of float32 GEMMs in another summation order (cuBLAS) and the GPU's exp/tanh.
  EXPECT_EQ(compare(y_gpu, y_host, 1e-4, 1e-5), "");
  EXPECT_EQ(compare(dx_gpu, dx_host, 1e-4, 1e-5), "");
  const auto hp = host.parameters(), dp = device->parameters();
  ASSERT_EQ(hp.size(), dp.size());
  for (std::size_t i = 0; i < hp.size(); ++i)
    EXPECT_EQ(compare(dp[i]->grad, hp[i]->grad, 1e-4, 1e-5), "") << hp[i]->name;
}

TEST(CudaRecurrentKernels, LayersOnTheGpuMatchTheHost) {
  MDTRAIN_REQUIRE_GPU();
  for (bool seq : {false, true})
    for (bool back : {false, true})
      for (double drop : {0.0, 0.25}) {
        SCOPED_TRACE(std::string(seq ? "return_sequences " : "") + (back ? "go_backwards " : "") +
                     (drop > 0 ? "dropout" : ""));
        check_layer_on_gpu<LSTM>(seq, back, drop);
        check_layer_on_gpu<GRU>(seq, back, drop);
        check_layer_on_gpu<SimpleRNN>(seq, back, drop);
      }
}

}  // namespace
}  // namespace mdtrain
