// The CUDA losses and metric counts of ops/loss_ops.h against the CPU on random inputs, for every
// prediction dtype and every label dtype (needs a GPU; skipped with the reason otherwise).
#include <cstdint>
#include <optional>

#include "gpu_test_util.h"
#include "mdtrain/ops/loss_ops.h"

namespace mdtrain {
namespace {

using namespace gpu_testing;

const DType kFloats[] = {DType::Float32, DType::Float64};
const DType kLabels[] = {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::UInt8};
constexpr std::int64_t kRows = 37, kCols = 11;

// Compares loss(labels, pred, grad) on the GPU with the CPU: the sum and the gradient.
template <class F>
void check_loss(const char* what, const Tensor& y, const Tensor& pred, F&& loss) {
  const DType dt = pred.dtype();
  Tensor g(pred.shape(), dt), gg(pred.shape(), dt, kGpu);
  const double want = loss(y, pred, &g);
  const double got = loss(to_gpu(y), to_gpu(pred), &gg);
  EXPECT_NEAR(got, want, rtol_of(dt) * (1 + std::abs(want)))
      << what << " " << name_of(dt) << " labels " << name_of(y.dtype());
  EXPECT_EQ(compare(gg, g, rtol_of(dt), rtol_of(dt) * 1e-3), "") << what << " gradient " << name_of(dt);
  // Without a gradient too.
  EXPECT_NEAR(loss(to_gpu(y), to_gpu(pred), nullptr), want, rtol_of(dt) * (1 + std::abs(want))) << what;
}

TEST(CudaLossKernels, SparseCategoricalCrossentropyMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : kFloats) {
    for (DType lt : kLabels) {
      const Tensor labels = random_labels({kRows}, lt, 1, kCols);
      const Tensor logits = random_tensor({kRows, kCols}, dt, 2, -5, 5);
      Tensor probs = random_tensor({kRows, kCols}, dt, 3, 0, 1);
      for (std::int64_t i : {0, 12, 40}) {  // at and beyond the [1e-7, 1 - 1e-7] clip
        if (dt == DType::Float32) probs.data<float>()[i] = i == 12 ? 1.0f : 0.0f;
        else probs.data<double>()[i] = i == 12 ? 1.0 : 0.0;
      }
      for (bool from_logits : {true, false}) {
        for (std::optional<std::int64_t> ignore : {std::optional<std::int64_t>(), std::optional<std::int64_t>(3)}) {
          check_loss("sparse_categorical_crossentropy", labels, from_logits ? logits : probs,
                     [&](const Tensor& y, const Tensor& p, Tensor* g) {
                       return ops::sparse_categorical_crossentropy(y, p, from_logits, ignore, 1.0 / kRows, g);
                     });
        }
      }
    }
  }
  // A bad label on the GPU is reported as on the CPU: its value and index.
  Tensor labels = random_labels({kRows}, DType::Int32, 1, kCols);
  labels.data<std::int32_t>()[5] = 11;
  try {
    ops::sparse_categorical_crossentropy(to_gpu(labels), to_gpu(random_tensor({kRows, kCols}, DType::Float32, 2)), true,
                                         std::nullopt, 1.0, nullptr);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("label 11 at index 5"), std::string::npos) << e.what();
  }
}

TEST(CudaLossKernels, CategoricalCrossentropyMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : kFloats) {
    for (DType lt : kLabels) {
      const Tensor target = random_labels({kRows, kCols}, lt, 4, 2);  // 0/1 targets
      for (bool from_logits : {true, false}) {
        const Tensor pred = random_tensor({kRows, kCols}, dt, 5, from_logits ? -5 : 0, from_logits ? 5 : 1);
        for (double smoothing : {0.0, 0.1}) {
          check_loss("categorical_crossentropy", target, pred, [&](const Tensor& y, const Tensor& p, Tensor* g) {
            return ops::categorical_crossentropy(y, p, from_logits, smoothing, 1.0 / kRows, g);
          });
        }
      }
    }
  }
}

TEST(CudaLossKernels, BinaryCrossentropyMatchesCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : kFloats) {
    for (DType lt : kLabels) {
      const Tensor target = random_labels({kRows, kCols}, lt, 6, 2);
      for (bool from_logits : {true, false}) {
        const Tensor pred = random_tensor({kRows, kCols}, dt, 7, from_logits ? -5 : 0, from_logits ? 5 : 1);
        for (double smoothing : {0.0, 0.2}) {
          check_loss("binary_crossentropy", target, pred, [&](const Tensor& y, const Tensor& p, Tensor* g) {
            return ops::binary_crossentropy(y, p, from_logits, smoothing, 1.0 / kRows, g);
          });
        }
      }
    }
  }
}

TEST(CudaLossKernels, RegressionLossesMatchCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : kFloats) {
    for (DType lt : kLabels) {
      const Tensor target = random_tensor({kRows, kCols}, lt, 8, 0, 3);
      const Tensor pred = random_tensor({kRows, kCols}, dt, 9, -1, 4);
      check_loss("mean_squared_error", target, pred, [&](const Tensor& y, const Tensor& p, Tensor* g) {
        return ops::mean_squared_error(y, p, 1.0 / kRows, g);
      });
      check_loss("mean_absolute_error", target, pred, [&](const Tensor& y, const Tensor& p, Tensor* g) {
        return ops::mean_absolute_error(y, p, 1.0 / kRows, g);
      });
    }
  }
}

// Keras's sample weights (ops/loss_ops.h) on the GPU as on the CPU, for every loss kernel; rows
// in runs of two per weight (a sequence output's steps).
TEST(CudaLossKernels, SampleWeightsMatchCpu) {
  MDTRAIN_REQUIRE_GPU();
  const Tensor weights = random_tensor({kRows}, DType::Float32, 9, 0, 2);
  const std::int64_t rows = 2 * kRows;
  for (DType dt : kFloats) {
    const Tensor pred = random_tensor({rows, kCols}, dt, 10, 0.01, 0.99);
    const Tensor labels = random_labels({rows}, DType::Int32, 11, kCols);
    const Tensor target = random_labels({rows, kCols}, DType::Float32, 12, 2);
    auto on = [&](const Tensor& like) { return like.device().is_cpu() ? weights : to_gpu(weights); };
    check_loss("weighted sparse_categorical_crossentropy", labels, pred,
               [&](const Tensor& y, const Tensor& p, Tensor* g) {
                 const Tensor w = on(p);
                 return ops::sparse_categorical_crossentropy(y, p, false, std::nullopt, 1.0 / rows, g, &w);
               });
    check_loss("weighted categorical_crossentropy", target, pred, [&](const Tensor& y, const Tensor& p, Tensor* g) {
      const Tensor w = on(p);
      return ops::categorical_crossentropy(y, p, true, 0.1, 1.0 / rows, g, &w);
    });
    check_loss("weighted binary_crossentropy", target, pred, [&](const Tensor& y, const Tensor& p, Tensor* g) {
      const Tensor w = on(p);
      return ops::binary_crossentropy(y, p, false, 0.0, 1.0 / rows, g, &w);
    });
    check_loss("weighted mean_squared_error", target, pred, [&](const Tensor& y, const Tensor& p, Tensor* g) {
      const Tensor w = on(p);
      return ops::mean_squared_error(y, p, 1.0 / rows, g, &w);
    });
    check_loss("weighted mean_absolute_error", target, pred, [&](const Tensor& y, const Tensor& p, Tensor* g) {
      const Tensor w = on(p);
      return ops::mean_absolute_error(y, p, 1.0 / rows, g, &w);
    });
  }
}

TEST(CudaLossKernels, MetricCountsMatchCpu) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : kFloats) {
    for (DType lt : kLabels) {
      const Tensor labels = random_labels({kRows}, lt, 10, kCols);
      const Tensor onehot = random_labels({kRows, kCols}, lt, 11, 2);
      // Coarse values so that ties (first argmax, in_top_k boundaries) occur.
      Tensor pred = random_tensor({kRows, kCols}, dt, 12, 0, 4);
      for (std::int64_t i = 0; i < pred.numel(); ++i) {
        if (dt == DType::Float32) pred.data<float>()[i] = std::floor(pred.data<float>()[i]);
        else pred.data<double>()[i] = std::floor(pred.data<double>()[i]);
      }
      const Tensor gl = to_gpu(labels), go = to_gpu(onehot), gp = to_gpu(pred);
      EXPECT_EQ(ops::sparse_categorical_matches(gl, gp), ops::sparse_categorical_matches(labels, pred));
      EXPECT_EQ(ops::categorical_matches(go, gp), ops::categorical_matches(onehot, pred));
      for (std::int64_t k : {1, 3, 11})
        EXPECT_EQ(ops::sparse_top_k_matches(gl, gp, k), ops::sparse_top_k_matches(labels, pred, k)) << "k " << k;
      EXPECT_EQ(ops::binary_matches(go, gp, 1.5), ops::binary_matches(onehot, pred, 1.5));
    }
  }
}

}  // namespace
}  // namespace mdtrain
