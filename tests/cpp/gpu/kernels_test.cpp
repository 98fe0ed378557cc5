// Every CUDA kernel of ops/ops.h against the CPU kernels on random inputs (needs a GPU; skipped
// with the reason otherwise). The list of kernels and their tests: ops/cuda/kernel_list.h.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gpu_test_util.h"
#include "mdtrain/core/cuda/device_memory.h"
#include "mdtrain/ops/cuda/kernels.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain {
namespace {

using namespace gpu_testing;

const DType kFloats[] = {DType::Float32, DType::Float64};

TEST(CudaKernels, GemmMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  struct Dims {
    std::int64_t m, n, k;
  };
  unsigned seed = 1;
  for (DType dt : kFloats) {
    for (const Dims d : {Dims{5, 7, 3}, Dims{64, 33, 128}, Dims{1, 1, 1}, Dims{3, 4, 0}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          const Tensor a = random_tensor(ta ? Shape{d.k, d.m} : Shape{d.m, d.k}, dt, seed++);
          const Tensor b = random_tensor(tb ? Shape{d.n, d.k} : Shape{d.k, d.n}, dt, seed++);
          Tensor c = random_tensor({d.m, d.n}, dt, seed++);
          Tensor gc = to_gpu(c);
          ops::gemm(to_gpu(a), ta, to_gpu(b), tb, gc, 1.5, 0.5);
          ops::gemm(a, ta, b, tb, c, 1.5, 0.5);
          EXPECT_EQ(compare(gc, c, dt == DType::Float32 ? 1e-4 : 1e-12, dt == DType::Float32 ? 1e-4 : 1e-12), "")
              << name_of(dt) << " m=" << d.m << " n=" << d.n << " k=" << d.k << " ta=" << ta << " tb=" << tb;
        }
      }
    }
  }
}

TEST(CudaKernels, BiasActivationMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 100;
  for (DType dt : kFloats) {
    for (Activation act : all_activations()) {
      for (bool with_bias : {false, true}) {
        const Tensor z = random_tensor({37, 19}, dt, seed++, -6, 6);
        const Tensor bias = with_bias ? random_tensor({19}, dt, seed++) : Tensor();
        Tensor y(z.shape(), dt);
        ops::bias_activation(z, bias, act, y);
        Tensor gy(z.shape(), dt, kGpu);
        ops::bias_activation(to_gpu(z), with_bias ? to_gpu(bias) : Tensor(), act, gy);
        EXPECT_EQ(compare(gy, y, rtol_of(dt), rtol_of(dt) * 1e-2), "")
            << name_of(dt) << " " << name_of(act) << (with_bias ? " with bias" : "");
      }
    }
  }
}

TEST(CudaKernels, ActivationBackwardMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 200;
  for (DType dt : kFloats) {
    for (Activation act : all_activations()) {
      const Tensor z = random_tensor({23, 17}, dt, seed++, -4, 4);
      Tensor y(z.shape(), dt);
      ops::bias_activation(z, Tensor(), act, y);
      const Tensor dy = random_tensor(z.shape(), dt, seed++);
      Tensor dz(z.shape(), dt), gdz(z.shape(), dt, kGpu);
      ops::activation_backward(act, z, y, dy, dz);
      ops::activation_backward(act, to_gpu(z), to_gpu(y), to_gpu(dy), gdz);
      EXPECT_EQ(compare(gdz, dz, rtol_of(dt), rtol_of(dt) * 1e-2), "") << name_of(dt) << " " << name_of(act);
    }
  }
}

TEST(CudaKernels, SumRowsMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 300;
  for (DType dt : kFloats) {
    for (double beta : {0.0, 1.0, 0.25}) {
      const Tensor x = random_tensor({129, 33}, dt, seed++);
      Tensor out = random_tensor({33}, dt, seed++);
      Tensor gout = to_gpu(out);
      ops::sum_rows(x, out, beta);
      ops::sum_rows(to_gpu(x), gout, beta);
      EXPECT_EQ(compare(gout, out, rtol_of(dt), rtol_of(dt)), "") << name_of(dt) << " beta " << beta;
    }
  }
}

TEST(CudaKernels, DropoutMatchesCpuBitwise) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : kFloats) {
    for (double rate : {0.0, 0.3, 0.9}) {
      const Tensor x = random_tensor({41, 13}, dt, 400);
      Tensor mask(x.shape(), dt), y(x.shape(), dt), gmask(x.shape(), dt, kGpu), gy(x.shape(), dt, kGpu);
      // The mask is a function of the global element position: an offset batch slice as well.
      ops::dropout(x, rate, 1234, 7, 1000003, mask, y);
      ops::dropout(to_gpu(x), rate, 1234, 7, 1000003, gmask, gy);
      EXPECT_TRUE(same_bytes(gmask, mask)) << name_of(dt) << " rate " << rate;
      EXPECT_TRUE(same_bytes(gy, y)) << name_of(dt) << " rate " << rate;
    }
  }
}

TEST(CudaKernels, MultiplyMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : kFloats) {
    const Tensor a = random_tensor({1000, 3}, dt, 500), b = random_tensor({1000, 3}, dt, 501);
    Tensor y(a.shape(), dt), gy(a.shape(), dt, kGpu);
    ops::multiply(a, b, y);
    ops::multiply(to_gpu(a), to_gpu(b), gy);
    EXPECT_TRUE(same_bytes(gy, y)) << name_of(dt);  // one rounding: the same on both
  }
}

TEST(CudaKernels, GatherRowsMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  const std::vector<std::int64_t> idx = {4, 0, 9, 9, 2, 7};
  for (DType dt : {DType::Float32, DType::Float64, DType::UInt8, DType::Int64}) {
    // UInt8 rows of 3 bytes take the byte path of the kernel.
    const Tensor x = random_tensor({10, 3}, dt, 600, 0, 200);
    Tensor want({6, 3}, dt);
    ops::gather_rows(x, idx.data(), 6, want);
    Tensor from_host({6, 3}, dt, kGpu), on_gpu({6, 3}, dt, kGpu);
    ops::gather_rows(x, idx.data(), 6, from_host);       // the input batch: pinned staging
    ops::gather_rows(to_gpu(x), idx.data(), 6, on_gpu);  // a gather kernel
    EXPECT_TRUE(same_bytes(from_host, want)) << name_of(dt) << " host to GPU";
    EXPECT_TRUE(same_bytes(on_gpu, want)) << name_of(dt) << " on the GPU";
  }
  Tensor out({1, 3}, DType::Float32, kGpu);
  const std::int64_t bad = 10;
  EXPECT_THROW(ops::gather_rows(random_tensor({10, 3}, DType::Float32, 1), &bad, 1, out), std::out_of_range);
}

TEST(CudaKernels, AllFiniteMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : kFloats) {
    for (double poison : {0.5, std::nan(""), double(INFINITY), -double(INFINITY)}) {
      Tensor x = random_tensor({300, 7}, dt, 700);
      if (dt == DType::Float32) x.data<float>()[1234] = static_cast<float>(poison);
      else x.data<double>()[1234] = poison;
      EXPECT_EQ(ops::all_finite(to_gpu(x)), ops::all_finite(x)) << name_of(dt) << " " << poison;
    }
  }
}

TEST(CudaKernels, SumOfSquaresMatchesCpu) {
  MDTRAIN_REQUIRE_REAL_GPU();
  for (DType dt : kFloats) {
    const Tensor x = random_tensor({100003}, dt, 800);
    double want = 0;
    for (std::int64_t i = 0; i < x.numel(); ++i) want += at(x, i) * at(x, i);
    EXPECT_NEAR(cuda::sum_of_squares(to_gpu(x)), want, 1e-10 * want) << name_of(dt);
  }
}

TEST(CudaKernels, TensorFillZerosAndCopiesMatchTheHost) {
  MDTRAIN_REQUIRE_REAL_GPU();
  for (DType dt : {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::UInt8}) {
    Tensor g({5, 3}, dt, kGpu), h({5, 3}, dt);
    g.fill(7);
    h.fill(7);
    EXPECT_TRUE(same_bytes(g, h)) << name_of(dt) << " fill";
    EXPECT_TRUE(same_bytes(Tensor::zeros({5, 3}, dt, kGpu), Tensor::zeros({5, 3}, dt))) << name_of(dt) << " zeros";
  }
  const Tensor x = random_tensor({8, 4}, DType::Float32, 900);
  const Tensor g = to_gpu(x);
  EXPECT_TRUE(same_bytes(g.clone(), x));                // device to device
  EXPECT_TRUE(same_bytes(g.rows(2, 5), x.rows(2, 5)));  // a row view of device memory
  Tensor part({3, 4}, DType::Float32, kGpu);
  part.copy_from(x.rows(5, 8));
  EXPECT_TRUE(same_bytes(part, x.rows(5, 8)));
  const cuda::MemoryStats s = cuda::memory_stats(0);
  EXPECT_GT(s.in_use_bytes, 0u);
}

// A tensor on one GPU and one on another (or the host) in one op is a clear error.
TEST(CudaKernels, MixedDevicesAreRejected) {
  MDTRAIN_REQUIRE_REAL_GPU();
  const Tensor x = random_tensor({4, 4}, DType::Float32, 1);
  Tensor y({4, 4}, DType::Float32);
  try {
    ops::multiply(to_gpu(x), x, y);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("/device:CPU:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/device:GPU:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mdtrain
