// The CUDA kernels of ops/embedding.h against the CPU loops, and an Embedding layer trained on a GPU
// against the same layer on the host. Needs a GPU (skipped with the reason otherwise);
// MDTRAIN_GPU_TESTS_ON_CPU=1 runs them with host tensors to check the tests themselves. The kernels
// and their tests: ops/cuda/kernel_list.h.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "gpu_test_util.h"
#include "mdtrain/nn/embedding.h"
#include "mdtrain/ops/embedding.h"

namespace mdtrain {
namespace {

using namespace gpu_testing;

Tensor host_rows(const std::vector<std::int64_t>& values) {
  Tensor t({static_cast<std::int64_t>(values.size())}, DType::Int64);
  for (std::size_t i = 0; i < values.size(); ++i) t.data<std::int64_t>()[i] = values[i];
  return t;
}

TEST(CudaEmbeddingKernels, RowsMatchCpuAndFindTheFirstBadIndex) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : {DType::Int32, DType::Int64, DType::Float32, DType::Float64}) {
    SCOPED_TRACE(name_of(dt));
    // 100000 indices: many blocks of the grid-stride loop.
    Tensor x = random_labels({1000, 100}, dt, 3, 77);
    Tensor want({x.numel()}, DType::Int64), got({x.numel()}, DType::Int64, kGpu);
    ASSERT_EQ(ops::embedding_rows(x, 77, want).position, -1);
    ASSERT_EQ(ops::embedding_rows(to_gpu(x), 77, got).position, -1);
    EXPECT_TRUE(same_bytes(got, want));
    // Two bad values: the lower position is reported, whatever the blocks' order.
    Tensor bad = x.clone();
    auto set = [&](std::int64_t i, double v) {
      switch (dt) {
        case DType::Int32: bad.data<std::int32_t>()[i] = static_cast<std::int32_t>(v); break;
        case DType::Int64: bad.data<std::int64_t>()[i] = static_cast<std::int64_t>(v); break;
        case DType::Float32: bad.data<float>()[i] = static_cast<float>(v); break;
        default: bad.data<double>()[i] = v; break;
      }
    };
    set(90001, -3);
    set(4321, 77);
    const auto on_gpu = ops::embedding_rows(to_gpu(bad), 77, got);
    const auto on_cpu = ops::embedding_rows(bad, 77, want);
    EXPECT_EQ(on_gpu.position, 4321);
    EXPECT_EQ(on_gpu.position, on_cpu.position);
    EXPECT_EQ(on_gpu.value, 77.0);
    if (dt == DType::Float32 || dt == DType::Float64) {
      set(17, 0.5);
      const auto fraction = ops::embedding_rows(to_gpu(bad), 77, got);
      EXPECT_EQ(fraction.position, 17);
      EXPECT_FALSE(fraction.integral);
    }
  }
}

TEST(CudaEmbeddingKernels, LookupMatchesCpuBitwise) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : {DType::Float32, DType::Float64}) {
    const Tensor table = random_tensor({50, 33}, dt, 5);
    std::vector<std::int64_t> r;
    for (int i = 0; i < 4000; ++i) r.push_back((i * 7) % 50);
    const Tensor rows = host_rows(r);
    Tensor want({4000, 33}, dt), got({4000, 33}, dt, kGpu);
    ops::embedding_lookup(table, rows, want);
    ops::embedding_lookup(to_gpu(table), to_gpu(rows), got);
    EXPECT_TRUE(same_bytes(got, want)) << name_of(dt);
  }
}

TEST(CudaEmbeddingKernels, ScatterAddMatchesCpuBitwise) {
  MDTRAIN_REQUIRE_GPU();
  for (DType dt : {DType::Float32, DType::Float64}) {
    // Repeated rows (3000 indices into 40 rows); 300 columns: more than one block of threads.
    const Tensor dy = random_tensor({3000, 300}, dt, 6);
    std::vector<std::int64_t> r;
    for (int i = 0; i < 3000; ++i) r.push_back((i * 13) % 40);
    const Tensor rows = host_rows(r);
    Tensor want({40, 300}, dt), got({40, 300}, dt, kGpu);
    got.fill(5.0);  // stale values must be cleared
    ops::embedding_scatter_add(dy, rows, want);
    ops::embedding_scatter_add(to_gpu(dy), to_gpu(rows), got);
    EXPECT_TRUE(same_bytes(got, want)) << name_of(dt);
  }
}

TEST(CudaEmbeddingKernels, ShardRowsMatchCpu) {
  MDTRAIN_REQUIRE_GPU();
  // Shard 1 of a 77-row table cut in rows of 25: it holds rows [25, 50); 50..76 are another's.
  Tensor rows_x = random_labels({3000}, DType::Int64, 5, 77);
  Tensor rows({3000}, DType::Int64);
  ASSERT_EQ(ops::embedding_rows(rows_x, 77, rows).position, -1);
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(name_of(dt));
    Tensor want_local({3000}, DType::Int64), want_keep({3000, 7}, dt);
    Tensor got_local({3000}, DType::Int64, kGpu), got_keep({3000, 7}, dt, kGpu);
    ops::embedding_shard_rows(rows, 25, 25, want_local, want_keep);
    ops::embedding_shard_rows(to_gpu(rows), 25, 25, got_local, got_keep);
    EXPECT_TRUE(same_bytes(got_local, want_local));
    EXPECT_TRUE(same_bytes(got_keep, want_keep));
  }
}

TEST(CudaEmbeddingKernels, LayerOnTheGpuMatchesTheHost) {
  MDTRAIN_REQUIRE_GPU();
  Embedding::Options o;
  o.input_dim = 30;
  o.output_dim = 8;
  Embedding host("emb", o);
  host.build({6}, 2);
  auto device_copy = host.clone();
  for (auto* p : device_copy->parameters()) {
    Tensor v(p->value.shape(), p->value.dtype(), kGpu), g(p->value.shape(), p->value.dtype(), kGpu);
    v.copy_from(p->value);
    p->value = v;
    p->grad = g;
  }
  const Tensor x = random_labels({10, 6}, DType::Int32, 8, 30);
  const Tensor dy = random_tensor({10, 6, 8}, DType::Float32, 9);
  Tensor y_host = host.forward(x, {}).clone();
  host.backward(dy, false);
  Tensor y_gpu = device_copy->forward(to_gpu(x), {});
  device_copy->backward(to_gpu(dy), false);
  EXPECT_TRUE(same_bytes(y_gpu, y_host));
  EXPECT_TRUE(same_bytes(device_copy->parameters()[0]->grad, host.parameters()[0]->grad));
  Tensor bad = x.clone();
  bad.data<std::int32_t>()[13] = 30;
  EXPECT_THROW(device_copy->forward(to_gpu(bad), {}), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain
