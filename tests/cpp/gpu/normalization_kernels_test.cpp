// Every CUDA kernel of ops/normalization.h against the CPU loops on random inputs: float32 and
// float64, gamma/beta absent and present, one row and many (enough rows for several chunks of
// the per-channel reduction, channels that straddle its 32-channel tiles and rows longer than a
// block). Needs a GPU (skipped with the reason otherwise); MDTRAIN_GPU_TESTS_ON_CPU=1 runs them with
// host tensors to check the tests themselves. The kernels and their tests: ops/cuda/kernel_list.h.
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "mdtrain/ops/normalization.h"

namespace mdtrain {
namespace {

using namespace gpu_testing;

const DType kFloats[] = {DType::Float32, DType::Float64};

struct Dims {
  std::int64_t rows, channels;
};
// 1 row; a partial channel tile; 5000 rows = 79 chunks of 64; 70000 rows = the 1024-chunk cap;
// rows of 300 channels (more than the 256 threads of a row block); no rows.
const Dims kDims[] = {{1, 5}, {1, 300}, {7, 33}, {5000, 40}, {70000, 3}, {37, 300}, {0, 6}};

std::string where(DType dt, const Dims& d, const char* extra = "") {
  std::ostringstream os;
  os << name_of(dt) << " " << d.rows << "x" << d.channels << extra;
  return os.str();
}

Tensor stats(std::int64_t n, unsigned seed, double lo, double hi) {
  return random_tensor({n}, DType::Float64, seed, lo, hi);
}

Tensor gpu_or_none(const Tensor& t) { return t.defined() ? to_gpu(t) : Tensor(); }

// Sums over the rows in double: the GPU adds in chunks and a tree, the CPU row by row. Both are
// within a few double ulps per row of the exact sum.
double sum_atol(const Dims& d) { return 1e-13 * static_cast<double>(d.rows + 1); }

TEST(CudaNormalizationKernels, ChannelReductionsMatchCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 1;
  for (DType dt : kFloats) {
    for (const Dims& d : kDims) {
      // An offset, so the centred second pass and the shift matter.
      const Tensor x = random_tensor({d.rows, d.channels}, dt, seed++, 2.0, 4.0);
      const Tensor gx = to_gpu(x);
      const Tensor shift = stats(d.channels, seed++, 2.5, 3.5);
      const double rtol = 1e-12, atol = sum_atol(d);

      Tensor mean({d.channels}, DType::Float64), var({d.channels}, DType::Float64);
      ops::channel_moments(x, mean, var);
      Tensor gmean({d.channels}, DType::Float64, kGpu), gvar({d.channels}, DType::Float64, kGpu);
      ops::channel_moments(gx, gmean, gvar);
      EXPECT_EQ(compare(gmean, mean, rtol, atol), "") << "channel_moments mean " << where(dt, d);
      EXPECT_EQ(compare(gvar, var, rtol, atol), "") << "channel_moments variance " << where(dt, d);

      Tensor sum({d.channels}, DType::Float64), sq({d.channels}, DType::Float64);
      ops::channel_sums(x, shift, sum, sq);
      Tensor gsum({d.channels}, DType::Float64, kGpu), gsq({d.channels}, DType::Float64, kGpu);
      ops::channel_sums(gx, to_gpu(shift), gsum, gsq);
      EXPECT_EQ(compare(gsum, sum, rtol, atol), "") << "channel_sums sum " << where(dt, d);
      EXPECT_EQ(compare(gsq, sq, rtol, atol), "") << "channel_sums sum_squares " << where(dt, d);

      const Tensor dy = random_tensor({d.rows, d.channels}, dt, seed++);
      const Tensor xhat = random_tensor({d.rows, d.channels}, dt, seed++, -2.0, 2.0);
      Tensor sdy({d.channels}, DType::Float64), sdyx({d.channels}, DType::Float64);
      ops::channel_grad_sums(dy, xhat, sdy, sdyx);
      Tensor gsdy({d.channels}, DType::Float64, kGpu), gsdyx({d.channels}, DType::Float64, kGpu);
      const Tensor gdy = to_gpu(dy), gxhat = to_gpu(xhat);
      ops::channel_grad_sums(gdy, gxhat, gsdy, gsdyx);
      EXPECT_EQ(compare(gsdy, sdy, rtol, atol), "") << "channel_grad_sums sum_dy " << where(dt, d);
      EXPECT_EQ(compare(gsdyx, sdyx, rtol, atol), "") << "channel_grad_sums sum_dy_xhat " << where(dt, d);

      // Deterministic: the same inputs give the same bits again.
      Tensor again({d.channels}, DType::Float64, kGpu), again_b({d.channels}, DType::Float64, kGpu);
      ops::channel_grad_sums(gdy, gxhat, again, again_b);
      EXPECT_TRUE(same_bytes(again, to_host(gsdy)) && same_bytes(again_b, to_host(gsdyx))) << where(dt, d);
      ops::channel_moments(gx, again, again_b);
      EXPECT_TRUE(same_bytes(again, to_host(gmean)) && same_bytes(again_b, to_host(gvar))) << where(dt, d);
    }
  }
}

TEST(CudaNormalizationKernels, ChannelNormalizeMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 100;
  for (DType dt : kFloats) {
    for (const Dims& d : kDims) {
      for (bool affine : {false, true}) {
        for (bool with_xhat : {false, true}) {
          const Tensor x = random_tensor({d.rows, d.channels}, dt, seed++, -3.0, 3.0);
          const Tensor mean = stats(d.channels, seed++, -1.0, 1.0), inv_std = stats(d.channels, seed++, 0.5, 2.0);
          const Tensor gamma = affine ? random_tensor({d.channels}, dt, seed++, 0.5, 1.5) : Tensor();
          const Tensor beta = affine ? random_tensor({d.channels}, dt, seed++) : Tensor();
          Tensor y(x.shape(), dt), xhat(x.shape(), dt);
          ops::channel_normalize(x, mean, inv_std, gamma, beta, with_xhat ? &xhat : nullptr, y);
          Tensor gy(x.shape(), dt, kGpu), gxhat(x.shape(), dt, kGpu);
          ops::channel_normalize(to_gpu(x), to_gpu(mean), to_gpu(inv_std), gpu_or_none(gamma), gpu_or_none(beta),
                                 with_xhat ? &gxhat : nullptr, gy);
          const std::string what = where(dt, d, affine ? " gamma/beta" : " no gamma/beta");
          EXPECT_EQ(compare(gy, y, rtol_of(dt), rtol_of(dt)), "") << "y " << what;
          if (with_xhat) EXPECT_EQ(compare(gxhat, xhat, rtol_of(dt), rtol_of(dt)), "") << "xhat " << what;
        }
      }
    }
  }
}

TEST(CudaNormalizationKernels, ChannelNormalizeBackwardMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 200;
  for (DType dt : kFloats) {
    for (const Dims& d : kDims) {
      const Tensor dy = random_tensor({d.rows, d.channels}, dt, seed++);
      const Tensor xhat = random_tensor({d.rows, d.channels}, dt, seed++, -2.0, 2.0);
      const Tensor scale = stats(d.channels, seed++, 0.5, 2.0);
      const Tensor mean_dy = stats(d.channels, seed++, -0.5, 0.5), mean_dy_xhat = stats(d.channels, seed++, -0.5, 0.5);
      Tensor dx(dy.shape(), dt), gdx(dy.shape(), dt, kGpu);
      ops::channel_normalize_backward(dy, xhat, scale, mean_dy, mean_dy_xhat, dx);
      ops::channel_normalize_backward(to_gpu(dy), to_gpu(xhat), to_gpu(scale), to_gpu(mean_dy), to_gpu(mean_dy_xhat),
                                      gdx);
      EXPECT_EQ(compare(gdx, dx, rtol_of(dt), rtol_of(dt)), "") << where(dt, d);
    }
  }
}

TEST(CudaNormalizationKernels, RowNormalizeMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 300;
  for (DType dt : kFloats) {
    for (const Dims& d : kDims) {
      for (bool affine : {false, true}) {
        const Tensor x = random_tensor({d.rows, d.channels}, dt, seed++, 1.0, 3.0);
        const Tensor gamma = affine ? random_tensor({d.channels}, dt, seed++, 0.5, 1.5) : Tensor();
        const Tensor beta = affine ? random_tensor({d.channels}, dt, seed++) : Tensor();
        Tensor y(x.shape(), dt), xhat(x.shape(), dt), inv_std({d.rows}, DType::Float64);
        ops::row_normalize(x, 1e-3, gamma, beta, xhat, inv_std, y);
        Tensor gy(x.shape(), dt, kGpu), gxhat(x.shape(), dt, kGpu), ginv({d.rows}, DType::Float64, kGpu);
        ops::row_normalize(to_gpu(x), 1e-3, gpu_or_none(gamma), gpu_or_none(beta), gxhat, ginv, gy);
        const std::string what = where(dt, d, affine ? " gamma/beta" : " no gamma/beta");
        // The statistics are double sums of the same values in another order: xhat and y differ
        // from the CPU's by the final rounding to T at most.
        EXPECT_EQ(compare(ginv, inv_std, 1e-12, 0), "") << "inv_std " << what;
        EXPECT_EQ(compare(gxhat, xhat, rtol_of(dt), rtol_of(dt)), "") << "xhat " << what;
        EXPECT_EQ(compare(gy, y, rtol_of(dt), rtol_of(dt)), "") << "y " << what;
      }
    }
  }
}

TEST(CudaNormalizationKernels, RowNormalizeBackwardMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 400;
  for (DType dt : kFloats) {
    for (const Dims& d : kDims) {
      for (bool affine : {false, true}) {
        const Tensor dy = random_tensor({d.rows, d.channels}, dt, seed++);
        const Tensor xhat = random_tensor({d.rows, d.channels}, dt, seed++, -2.0, 2.0);
        const Tensor inv_std = stats(d.rows, seed++, 0.5, 2.0);
        const Tensor gamma = affine ? random_tensor({d.channels}, dt, seed++, 0.5, 1.5) : Tensor();
        Tensor dx(dy.shape(), dt), gdx(dy.shape(), dt, kGpu);
        ops::row_normalize_backward(dy, xhat, inv_std, gamma, dx);
        ops::row_normalize_backward(to_gpu(dy), to_gpu(xhat), to_gpu(inv_std), gpu_or_none(gamma), gdx);
        EXPECT_EQ(compare(gdx, dx, rtol_of(dt), rtol_of(dt)), "") << where(dt, d, affine ? " gamma" : " no gamma");
      }
    }
  }
}

// One tensor on the host and the others on a GPU is a clear error naming both devices.
TEST(CudaNormalizationKernels, MixedDevicesAreRejected) {
  MDTRAIN_REQUIRE_REAL_GPU();
  const Tensor x = to_gpu(random_tensor({4, 3}, DType::Float32, 1));
  Tensor mean({3}, DType::Float64), var({3}, DType::Float64, kGpu);
  try {
    ops::channel_moments(x, mean, var);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[ops] channel_moments: mean is on /device:CPU:0 but the other tensors are on /device:GPU:0",
                        0),
              0u)
        << msg;
  }
}

// Without a GPU, tensors labelled as a GPU's (foreign memory) are refused before anything reads
// them, naming the op, the argument, the device and why.
TEST(CudaNormalizationKernels, GpuTensorsWithoutAGpuAreAClearError) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is present";
  const Device gpu{DeviceKind::CUDA, 0};
  std::vector<float> host(6, 1.0f);
  const Tensor x = Tensor::wrap(host.data(), {2, 3}, DType::Float32, nullptr, gpu);
  Tensor mean({3}, DType::Float64), var({3}, DType::Float64), y(x.shape(), DType::Float32);
  Tensor xhat(x.shape(), DType::Float32), inv_std({2}, DType::Float64);
  const std::string want = "x is on /device:GPU:0: " + cuda::unavailable_reason();
  try {
    ops::channel_moments(x, mean, var);
    ADD_FAILURE() << "channel_moments: no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "[ops] channel_moments: " + want);
  }
  try {
    ops::row_normalize(x, 1e-3, Tensor(), Tensor(), xhat, inv_std, y);
    ADD_FAILURE() << "row_normalize: no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "[ops] row_normalize: " + want);
  }
}

}  // namespace
}  // namespace mdtrain
