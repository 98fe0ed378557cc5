// The sharded layers of nn/tensor_parallel on their own, two shards on two threads talking through
// a ShardGroup over the threads communicator: pieces of tensors, the unsharded Dropout masks on a
// split activation, and column- / row-parallel Dense against the unsharded Dense.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "mdtrain/distribute/registry.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/tensor_parallel/column_parallel.h"
#include "mdtrain/nn/tensor_parallel/dim_slices.h"
#include "mdtrain/nn/tensor_parallel/row_parallel_dense.h"
#include "mdtrain/nn/tensor_parallel/split_dropout.h"

namespace mdtrain {
namespace {

Tensor random(Shape shape, std::uint64_t seed) {
  Tensor t(shape, DType::Float32);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = noise(rng);
  return t;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

double worst_gap(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(a.data<float>()[i] - b.data<float>()[i])));
  return worst;
}

class CommunicatorGroup final : public ShardGroup {
 public:
  explicit CommunicatorGroup(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)) {}
  int size() const override { return comm_->size(); }
  int rank() const override { return comm_->rank(); }
  void sum(Tensor& t) override { comm_->all_reduce(t); }
  void all_gather(const Tensor& send, Tensor& recv) override { comm_->all_gather(send, recv); }

 private:
  std::unique_ptr<Communicator> comm_;
};

// Runs fn(k, group) for shards 0 and 1 on two threads.
void on_two_shards(const std::function<void(int, ShardGroup&)>& fn) {
  auto comms = create_communicators("threads", 2);
  CommunicatorGroup g0(std::move(comms[0])), g1(std::move(comms[1]));
  std::thread other([&] { fn(1, g1); });
  fn(0, g0);
  other.join();
}

TEST(DimSlices, PiecesRoundTripAlongEveryDimension) {
  const Tensor whole = random({4, 6, 2}, 1);
  for (int dim = 0; dim < 3; ++dim) {
    Tensor back = Tensor::zeros(whole.shape());
    for (int k = 0; k < 2; ++k) {
      Shape s = whole.shape();
      s[static_cast<std::size_t>(dim)] /= 2;
      Tensor part(s);
      copy_piece_out(whole, dim, k, 2, part);
      EXPECT_EQ(part.data<float>()[0], whole.data<float>()[dim == 0 ? k * 2 * 12 : dim == 1 ? k * 3 * 2 : k]);
      copy_piece_in(part, dim, k, 2, back);
    }
    EXPECT_TRUE(bitwise_equal(back, whole)) << dim;
  }
  Tensor bad({3, 6, 2});
  EXPECT_THROW(copy_piece_out(whole, 0, 0, 2, bad), std::invalid_argument);
}

TEST(SplitDropout, ShardsDropWhatTheUnshardedLayerDrops) {
  for (const Shape& shape : {Shape{5, 8}, Shape{3, 2, 8}}) {
    const Tensor x = random(shape, 2);
    Dropout whole("dropout", 0.4, 9);
    whole.build(Shape(shape.begin() + 1, shape.end()), 0);
    ForwardContext ctx;
    ctx.training = true;
    ctx.step = 3;
    ctx.global_row_offset = 11;
    const Tensor want = whole.forward(x, ctx).clone();
    for (int k = 0; k < 2; ++k) {
      Shape piece = shape;
      piece.back() = 4;
      SplitDropout split("dropout", 0.4, 9, 8, 4 * k);
      split.build(Shape(piece.begin() + 1, piece.end()), 0);
      Tensor xk(piece), wk(piece);
      copy_piece_out(x, x.ndim() - 1, k, 2, xk);
      copy_piece_out(want, want.ndim() - 1, k, 2, wk);
      EXPECT_TRUE(bitwise_equal(split.forward(xk, ctx), wk)) << to_string(shape) << " shard " << k;
    }
  }
}

Dense::Options options(std::int64_t units, const std::string& activation) {
  Dense::Options o;
  o.units = units;
  o.activation = activation;
  o.bias_initializer = "ones";
  return o;
}

// Column-parallel Dense (gathered softmax) and a column -> row pair (split in between) against the
// unsharded layers: outputs and input gradients whole on every shard, weight gradients the pieces.
TEST(TensorParallelDense, ColumnAndRowShardsComputeTheUnshardedLayer) {
  const Tensor x = random({7, 6}, 3), dy = random({7, 4}, 4);
  Dense first("dense", options(8, "relu")), second("dense_1", options(4, "softmax"));
  first.build({6}, 1);
  second.build({8}, 2);
  ForwardContext ctx;
  const Tensor h = first.forward(x, ctx).clone();
  const Tensor y = second.forward(h, ctx).clone();
  const Tensor dh = second.backward(dy, true).clone();
  const Tensor dx = first.backward(dh, true).clone();
  on_two_shards([&](int k, ShardGroup& group) {
    // dense: column-parallel, output split; dense_1: row-parallel on the split input.
    auto inner = Dense::from_config([&] {
      Json c = first.config();
      c.set("units", 4);
      return c;
    }());
    ColumnParallel column(std::move(inner), &group, false, Activation::Linear);
    RowParallelDense row(second.config(), &group, true);
    column.build({6}, 0);
    row.build({4}, 0);
    copy_piece_out(first.kernel().value, 1, k, 2, column.parameters()[0]->value);
    copy_piece_out(first.bias().value, 0, k, 2, column.parameters()[1]->value);
    copy_piece_out(second.kernel().value, 0, k, 2, row.parameters()[0]->value);
    row.parameters()[1]->value.copy_from(second.bias().value);
    const Tensor yk = row.forward(column.forward(x, ctx), ctx);
    EXPECT_LE(worst_gap(yk, y), 1e-6);
    const Tensor dxk = column.backward(row.backward(dy, true), true);
    EXPECT_LE(worst_gap(dxk, dx), 1e-6);
    Tensor piece({6, 4});
    copy_piece_out(first.kernel().grad, 1, k, 2, piece);
    EXPECT_LE(worst_gap(column.parameters()[0]->grad, piece), 1e-6);
    Tensor rows({4, 4});
    copy_piece_out(second.kernel().grad, 0, k, 2, rows);
    EXPECT_LE(worst_gap(row.parameters()[0]->grad, rows), 1e-6);
    EXPECT_LE(worst_gap(row.parameters()[1]->grad, second.bias().grad), 1e-6);
  });
}

}  // namespace
}  // namespace mdtrain
