// The CUDA kernels of ops/depthwise_conv.h against the CPU loops on random inputs (needs a GPU;
// skipped with the reason otherwise): valid and same padding, strides, dilation, depth
// multipliers 1 and 3, float32 and float64. Both compute every element with the same shared
// function in the same order, but the GPU may contract a multiply and an add into one FMA, hence
// a tolerance of one operation chain (rtol_of) rather than bitwise equality.
#include <cstdint>
#include <string>

#include "gpu_test_util.h"
#include "mdtrain/ops/conv_ops.h"
#include "mdtrain/ops/depthwise_conv.h"

namespace mdtrain {
namespace {

using namespace gpu_testing;

struct Case {
  std::int64_t h, w, c, kh, kw, sh, sw, dh, dw, dm;
  bool same;
};

const Case kCases[] = {
    {5, 7, 3, 3, 3, 1, 1, 1, 1, 1, false}, {5, 7, 3, 3, 3, 1, 1, 1, 1, 3, true},  {7, 9, 2, 3, 3, 2, 2, 1, 1, 2, true},
    {8, 9, 2, 3, 3, 1, 1, 2, 2, 1, true},  {6, 7, 4, 2, 3, 1, 2, 1, 1, 2, false}, {3, 3, 2, 5, 5, 1, 1, 1, 1, 1, true},
};
constexpr std::int64_t kImages = 3;

std::string describe(const Case& k, DType dt) {
  return cat(name_of(dt), " input ", k.h, "x", k.w, "x", k.c, " kernel ", k.kh, "x", k.kw, " strides ", k.sh, "x", k.sw,
             " dilation ", k.dh, "x", k.dw, " depth_multiplier ", k.dm, k.same ? " same" : " valid");
}

Window2D window_of(const Case& k) {
  return ops::make_window2d(k.h, k.w, k.c, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw, k.same);
}

template <class Run>
void for_each_case(unsigned seed, Run&& run) {
  for (DType dt : {DType::Float32, DType::Float64})
    for (const Case& k : kCases) run(k, window_of(k), dt, seed++ * 3);
}

TEST(CudaDepthwiseConvKernels, ForwardMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for_each_case(1, [](const Case& k, const Window2D& g, DType dt, unsigned seed) {
    const Tensor x = random_tensor({kImages, k.h, k.w, k.c}, dt, seed);
    const Tensor kernel = random_tensor({k.kh, k.kw, k.c, k.dm}, dt, seed + 1);
    Tensor y({kImages, g.out_h, g.out_w, k.c * k.dm}, dt);
    Tensor gy = to_gpu(random_tensor(y.shape(), dt, seed + 2, 50, 60));  // garbage to overwrite
    ops::depthwise_conv2d(x, kernel, g, k.dm, y);
    ops::depthwise_conv2d(to_gpu(x), to_gpu(kernel), g, k.dm, gy);
    EXPECT_EQ(compare(gy, y, rtol_of(dt), rtol_of(dt)), "") << describe(k, dt);
  });
}

TEST(CudaDepthwiseConvKernels, InputGradMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for_each_case(100, [](const Case& k, const Window2D& g, DType dt, unsigned seed) {
    const Tensor dy = random_tensor({kImages, g.out_h, g.out_w, k.c * k.dm}, dt, seed);
    const Tensor kernel = random_tensor({k.kh, k.kw, k.c, k.dm}, dt, seed + 1);
    Tensor dx({kImages, k.h, k.w, k.c}, dt);
    Tensor gdx = to_gpu(random_tensor(dx.shape(), dt, seed + 2, 50, 60));
    ops::depthwise_conv2d_input_grad(dy, kernel, g, k.dm, dx);
    ops::depthwise_conv2d_input_grad(to_gpu(dy), to_gpu(kernel), g, k.dm, gdx);
    EXPECT_EQ(compare(gdx, dx, rtol_of(dt), rtol_of(dt)), "") << describe(k, dt);
  });
}

TEST(CudaDepthwiseConvKernels, KernelGradMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for_each_case(200, [](const Case& k, const Window2D& g, DType dt, unsigned seed) {
    const Tensor x = random_tensor({kImages, k.h, k.w, k.c}, dt, seed);
    const Tensor dy = random_tensor({kImages, g.out_h, g.out_w, k.c * k.dm}, dt, seed + 1);
    Tensor dk({k.kh, k.kw, k.c, k.dm}, dt);
    Tensor gdk = to_gpu(random_tensor(dk.shape(), dt, seed + 2, 50, 60));
    ops::depthwise_conv2d_kernel_grad(x, dy, g, k.dm, dk);
    ops::depthwise_conv2d_kernel_grad(to_gpu(x), to_gpu(dy), g, k.dm, gdk);
    // A sum over the whole batch: a longer chain, so a looser float32 bound.
    const double tol = dt == DType::Float32 ? 1e-4 : 1e-11;
    EXPECT_EQ(compare(gdk, dk, tol, tol), "") << describe(k, dt);
  });
}

}  // namespace
}  // namespace mdtrain
