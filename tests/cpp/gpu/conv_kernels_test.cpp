// Every CUDA kernel of ops/conv_ops.h against the CPU kernels on random inputs (needs a GPU; skipped
// with the reason otherwise): valid and same padding, strides 1 and 2, dilation 2, odd sizes,
// float32 and float64. The kernels do the CPU's operations in the CPU's order (the backward passes
// gather in the order the CPU's scatters add), so the results are compared bit for bit. The list of
// kernels and their tests: ops/cuda/kernel_list.h.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "mdtrain/ops/conv_ops.h"

namespace mdtrain {
namespace {

using namespace gpu_testing;

const DType kFloats[] = {DType::Float32, DType::Float64};

struct Case {
  std::int64_t h, w, c, kh, kw, sh, sw, dh, dw;
  bool same;
};

std::string describe(const Case& k, DType dt) {
  return cat(name_of(dt), " input ", k.h, "x", k.w, "x", k.c, " window ", k.kh, "x", k.kw, " strides ", k.sh, "x", k.sw,
             " dilation ", k.dh, "x", k.dw, k.same ? " same" : " valid");
}

// Odd and even sizes; windows that overlap (stride < window), tile, skip (stride > window) and
// outgrow the image; dilation 2; rectangular windows and strides.
const Case kCases[] = {
    {5, 7, 3, 3, 3, 1, 1, 1, 1, false}, {5, 7, 3, 3, 3, 1, 1, 1, 1, true}, {7, 9, 2, 3, 3, 2, 2, 1, 1, true},
    {9, 7, 1, 3, 3, 2, 2, 1, 1, false}, {8, 9, 2, 3, 3, 1, 1, 2, 2, true}, {9, 8, 3, 3, 2, 1, 1, 2, 2, false},
    {6, 7, 2, 2, 3, 1, 2, 1, 1, true},  {5, 5, 4, 2, 2, 2, 2, 1, 1, true}, {7, 6, 2, 3, 3, 2, 2, 1, 1, false},
    {3, 3, 2, 5, 5, 1, 1, 1, 1, true},  {4, 5, 3, 1, 1, 2, 2, 1, 1, true}, {11, 10, 1, 2, 2, 3, 3, 1, 1, false},
};

constexpr std::int64_t kImages = 3;

Window2D window_of(const Case& k) {
  return ops::make_window2d(k.h, k.w, k.c, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw, k.same);
}

Shape input_shape(const Case& k) { return {kImages, k.h, k.w, k.c}; }
Shape output_shape(const Window2D& g) { return {kImages, g.out_h, g.out_w, g.channels}; }
Shape columns_shape(const Window2D& g, std::int64_t output_rows) {
  return {output_rows * g.out_w, g.k_h * g.k_w * g.channels};
}

// A GPU tensor filled with garbage: a kernel that should overwrite every element must.
Tensor gpu_garbage(const Shape& shape, DType dt, unsigned seed) {
  return to_gpu(random_tensor(shape, dt, seed, 50, 60));
}

TEST(CudaConvKernels, Im2colMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 1;
  for (DType dt : kFloats) {
    for (const Case& k : kCases) {
      const Window2D g = window_of(k);
      const Tensor x = random_tensor(input_shape(k), dt, seed++);
      const Tensor gx = to_gpu(x);
      Tensor col(columns_shape(g, kImages * g.out_h), dt);
      Tensor gcol = gpu_garbage(col.shape(), dt, seed++);
      ops::im2col(x, g, col);
      ops::im2col(gx, g, gcol);
      EXPECT_TRUE(same_bytes(gcol, col)) << describe(k, dt);
      // The row-range form: a run of output rows that crosses an image boundary, and the last row.
      const std::int64_t total = kImages * g.out_h;
      using Range = std::pair<std::int64_t, std::int64_t>;  // first output row, row count
      for (const auto& [first, count] : {Range{g.out_h - 1, 2}, Range{total - 1, 1}}) {
        Tensor part(columns_shape(g, count), dt);
        Tensor gpart = gpu_garbage(part.shape(), dt, seed++);
        ops::im2col(x, g, first, part);
        ops::im2col(gx, g, first, gpart);
        EXPECT_TRUE(same_bytes(gpart, part)) << describe(k, dt) << " rows from " << first << " x" << count;
      }
    }
  }
}

TEST(CudaConvKernels, Col2imMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 100;
  for (DType dt : kFloats) {
    for (const Case& k : kCases) {
      const Window2D g = window_of(k);
      const std::int64_t total = kImages * g.out_h;
      const Tensor col = random_tensor(columns_shape(g, total), dt, seed++);
      // Whole batch: dx is overwritten (the GPU's garbage must go, 0 where no window reads).
      Tensor dx(input_shape(k), dt);
      Tensor gdx = gpu_garbage(dx.shape(), dt, seed++);
      ops::col2im(col, g, dx);
      ops::col2im(to_gpu(col), g, gdx);
      EXPECT_TRUE(same_bytes(gdx, dx)) << describe(k, dt);
      // Row ranges add onto dx: two ranges that meet inside an image, onto the same random start.
      Tensor acc = random_tensor(input_shape(k), dt, seed++);
      Tensor gacc = to_gpu(acc);
      const std::int64_t split = total / 2 + 1;
      using Range = std::pair<std::int64_t, std::int64_t>;  // output rows [first, end)
      for (const auto& [first, end] : {Range{0, split}, Range{split, total}}) {
        const Tensor part = col.rows(first * g.out_w, end * g.out_w);
        ops::col2im_accumulate(part, g, first, acc);
        ops::col2im_accumulate(to_gpu(part), g, first, gacc);
      }
      EXPECT_TRUE(same_bytes(gacc, acc)) << describe(k, dt) << " accumulated in two ranges";
    }
  }
}

// Random values rounded to quarters, so windows hold ties, plus NaNs at a few places.
Tensor pool_input(const Case& k, DType dt, unsigned seed) {
  Tensor x = random_tensor(input_shape(k), dt, seed, -2, 2);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double v = std::round(at(x, i) * 4) / 4;
    if (dt == DType::Float32) x.data<float>()[i] = static_cast<float>(v);
    else x.data<double>()[i] = v;
  }
  for (std::int64_t i = 7; i < x.numel(); i += 53) {
    if (dt == DType::Float32) x.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
    else x.data<double>()[i] = std::numeric_limits<double>::quiet_NaN();
  }
  return x;
}

TEST(CudaConvKernels, MaxPool2dMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 200;
  for (DType dt : kFloats) {
    for (const Case& k : kCases) {
      const Window2D g = window_of(k);
      const Tensor x = pool_input(k, dt, seed++);
      Tensor y(output_shape(g), dt), argmax(output_shape(g), DType::Int32);
      Tensor gy = gpu_garbage(y.shape(), dt, seed++);
      Tensor gargmax(argmax.shape(), DType::Int32, kGpu);
      gargmax.fill(-7);
      ops::max_pool2d(x, g, y, argmax);
      ops::max_pool2d(to_gpu(x), g, gy, gargmax);
      // Ties went to the same (first) element, NaNs won in the same windows, padding never won.
      EXPECT_TRUE(same_bytes(gy, y)) << describe(k, dt);
      EXPECT_TRUE(same_bytes(gargmax, argmax)) << describe(k, dt);
    }
  }
}

TEST(CudaConvKernels, MaxPool2dBackwardMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 300;
  for (DType dt : kFloats) {
    for (const Case& k : kCases) {
      const Window2D g = window_of(k);
      const Tensor x = pool_input(k, dt, seed++);
      Tensor y(output_shape(g), dt), argmax(output_shape(g), DType::Int32);
      ops::max_pool2d(x, g, y, argmax);
      const Tensor dy = random_tensor(output_shape(g), dt, seed++);
      Tensor dx(input_shape(k), dt);
      Tensor gdx = gpu_garbage(dx.shape(), dt, seed++);
      ops::max_pool2d_backward(dy, argmax, g, dx);
      ops::max_pool2d_backward(to_gpu(dy), to_gpu(argmax), g, gdx);
      // Overlapping windows that chose the same element add up, in output order.
      EXPECT_TRUE(same_bytes(gdx, dx)) << describe(k, dt);
    }
  }
}

TEST(CudaConvKernels, AvgPool2dMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 400;
  for (DType dt : kFloats) {
    for (const Case& k : kCases) {
      const Window2D g = window_of(k);
      const Tensor x = random_tensor(input_shape(k), dt, seed++);
      Tensor y(output_shape(g), dt);
      Tensor gy = gpu_garbage(y.shape(), dt, seed++);
      ops::avg_pool2d(x, g, y);
      ops::avg_pool2d(to_gpu(x), g, gy);
      EXPECT_TRUE(same_bytes(gy, y)) << describe(k, dt);
    }
  }
}

TEST(CudaConvKernels, AvgPool2dBackwardMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 500;
  for (DType dt : kFloats) {
    for (const Case& k : kCases) {
      const Window2D g = window_of(k);
      const Tensor dy = random_tensor(output_shape(g), dt, seed++);
      Tensor dx(input_shape(k), dt);
      Tensor gdx = gpu_garbage(dx.shape(), dt, seed++);
      ops::avg_pool2d_backward(dy, g, dx);
      ops::avg_pool2d_backward(to_gpu(dy), g, gdx);
      EXPECT_TRUE(same_bytes(gdx, dx)) << describe(k, dt);
    }
  }
}

const Shape kGlobalShapes[] = {{3, 5, 7, 3}, {2, 1, 1, 4}, {4, 9, 2, 1}, {1, 16, 16, 33}};

TEST(CudaConvKernels, GlobalAvgPool2dMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 600;
  for (DType dt : kFloats) {
    for (const Shape& s : kGlobalShapes) {
      const Tensor x = random_tensor(s, dt, seed++);
      Tensor y({s[0], s[3]}, dt);
      Tensor gy = gpu_garbage(y.shape(), dt, seed++);
      ops::global_avg_pool2d(x, y);
      ops::global_avg_pool2d(to_gpu(x), gy);
      EXPECT_TRUE(same_bytes(gy, y)) << name_of(dt) << " " << to_string(s);
    }
  }
}

TEST(CudaConvKernels, GlobalAvgPool2dBackwardMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 700;
  for (DType dt : kFloats) {
    for (const Shape& s : kGlobalShapes) {
      const Tensor dy = random_tensor({s[0], 1, 1, s[3]}, dt, seed++);  // keepdims: any shape of that size
      Tensor dx(s, dt);
      Tensor gdx = gpu_garbage(s, dt, seed++);
      ops::global_avg_pool2d_backward(dy, dx);
      ops::global_avg_pool2d_backward(to_gpu(dy), gdx);
      EXPECT_TRUE(same_bytes(gdx, dx)) << name_of(dt) << " " << to_string(s);
    }
  }
}

TEST(CudaConvKernels, GlobalMaxPool2dMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 800;
  for (DType dt : kFloats) {
    for (const Shape& s : kGlobalShapes) {
      Tensor x = random_tensor(s, dt, seed++);
      // Ties and a NaN, so the GPU must pick the CPU's winner (the first) too.
      if (s[1] * s[2] > 2) {
        if (dt == DType::Float32) {
          x.data<float>()[s[3]] = x.data<float>()[0];
          x.data<float>()[2 * s[3]] = std::numeric_limits<float>::quiet_NaN();
        } else {
          x.data<double>()[s[3]] = x.data<double>()[0];
          x.data<double>()[2 * s[3]] = std::numeric_limits<double>::quiet_NaN();
        }
      }
      Tensor y({s[0], s[3]}, dt), argmax({s[0], s[3]}, DType::Int32);
      Tensor gy = gpu_garbage(y.shape(), dt, seed++);
      Tensor gargmax = to_gpu(argmax);
      ops::global_max_pool2d(x, y, argmax);
      ops::global_max_pool2d(to_gpu(x), gy, gargmax);
      EXPECT_TRUE(same_bytes(gy, y)) << name_of(dt) << " " << to_string(s);
      EXPECT_TRUE(same_bytes(gargmax, argmax)) << name_of(dt) << " " << to_string(s);
    }
  }
}

TEST(CudaConvKernels, GlobalMaxPool2dBackwardMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  unsigned seed = 900;
  for (DType dt : kFloats) {
    for (const Shape& s : kGlobalShapes) {
      const Tensor x = random_tensor(s, dt, seed++);
      Tensor y({s[0], s[3]}, dt), argmax({s[0], s[3]}, DType::Int32);
      ops::global_max_pool2d(x, y, argmax);
      const Tensor dy = random_tensor({s[0], s[3]}, dt, seed++);
      Tensor dx(s, dt);
      Tensor gdx = gpu_garbage(s, dt, seed++);
      ops::global_max_pool2d_backward(dy, argmax, dx);
      Tensor gargmax = to_gpu(argmax);
      ops::global_max_pool2d_backward(to_gpu(dy), gargmax, gdx);
      EXPECT_TRUE(same_bytes(gdx, dx)) << name_of(dt) << " " << to_string(s);
    }
  }
}

std::string invalid_argument_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not invalid_argument> ") + e.what();
  }
  return "<no exception>";
}

TEST(CudaConvKernels, AGpuTensorIsRefusedNamingTheDeviceWhenThereIsNoGpu) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "this process sees a GPU";
  // A tensor that claims to be on GPU 0 (host memory, never read): the op names it and says why.
  const Case k{5, 5, 2, 3, 3, 1, 1, 1, 1, true};
  const Window2D g = window_of(k);
  auto host = std::make_shared<std::vector<float>>(kImages * k.h * k.w * k.c);
  Tensor x = Tensor::wrap(host->data(), input_shape(k), DType::Float32, host, Device{DeviceKind::CUDA, 0});
  Tensor y(output_shape(g));
  EXPECT_EQ(invalid_argument_of([&] { ops::avg_pool2d(x, g, y); }),
            "[avg_pool2d] x is on /device:GPU:0: " + cuda::unavailable_reason());
  EXPECT_EQ(invalid_argument_of([&] { ops::global_avg_pool2d(y, x); }),
            "[global_avg_pool2d] y is on /device:GPU:0: " + cuda::unavailable_reason());
}

TEST(CudaConvKernels, TensorsOfOneCallMustShareTheirDevice) {
  MDTRAIN_REQUIRE_REAL_GPU();
  const Case k{5, 5, 2, 3, 3, 1, 1, 1, 1, true};
  const Window2D g = window_of(k);
  const Tensor x = random_tensor(input_shape(k), DType::Float32, 1);
  Tensor y(output_shape(g)), argmax(output_shape(g), DType::Int32);
  Tensor gx = to_gpu(x), gy(output_shape(g), DType::Float32, kGpu), gargmax(output_shape(g), DType::Int32, kGpu);
  EXPECT_EQ(invalid_argument_of([&] { ops::avg_pool2d(gx, g, y); }),
            "[avg_pool2d] y is on /device:CPU:0 but the other tensors are on /device:GPU:0");
  EXPECT_EQ(invalid_argument_of([&] { ops::max_pool2d(gx, g, gy, argmax); }),
            "[max_pool2d] argmax is on /device:CPU:0 but the other tensors are on /device:GPU:0");
  Tensor col(columns_shape(g, kImages * g.out_h));
  EXPECT_EQ(invalid_argument_of([&] { ops::im2col(gx, g, col); }),
            "[im2col] col is on /device:CPU:0 but the other tensors are on /device:GPU:0");
  const Tensor dy({kImages, 2});
  Tensor gdx(input_shape(k), DType::Float32, kGpu);
  EXPECT_EQ(invalid_argument_of([&] { ops::global_avg_pool2d_backward(dy, gdx); }),
            "[global_avg_pool2d_backward] dx is on /device:GPU:0 but the other tensors are on /device:CPU:0");
}

}  // namespace
}  // namespace mdtrain
