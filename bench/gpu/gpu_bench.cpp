// GPU benchmarks of the CUDA backend; run them with `python bench/gpu/run.py` on a GPU machine.
//
//   gemm      cuBLAS's peak here (sgemm 8192^3, best of 5) and ops::gemm at the seed MLP's shapes,
//             as a fraction of that peak (the anchor measured in the same run);
//   epoch     one epoch of the seed MLP (784 -> 128 relu -> 10, Adam, sparse crossentropy from
//             logits, 60000 rows) on 1..N GPUs: a bare training loop written with mdtrain's ops
//             on GPU tensors (pinned staging, NCCL all-reduce, fused Adam): the floor the engine's
//             overhead is measured against;
//   fit       Model::train_epoch under MirroredStrategy on 1..N GPUs (what fit runs): the seed MLP
//             and the Fashion-MNIST CNN of examples/fashion_mnist_cnn.py, epoch time, speed-up,
//             and per step the engine's split (compute; communication left exposed after backward,
//             i.e. not hidden behind it; update), with 25 MB and 1 MB gradient buckets;
//   allreduce NCCL all-reduce bus bandwidth on N GPUs, 4 B .. 256 MB (busbw = bytes / t * 2 (n - 1) / n,
//             nccl-tests' definition).
//
// Prints tables, and one "json: {...}" line per result for the driver. Exits with status 2 and the
// reason when there is no GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mdtrain/core/cuda/device_memory.h"
#include "mdtrain/model/model.h"
#include "mdtrain/nn/activation_layer.h"
#include "mdtrain/nn/conv2d.h"
#include "mdtrain/nn/dense.h"
#include "mdtrain/nn/dropout.h"
#include "mdtrain/nn/flatten.h"
#include "mdtrain/nn/loss.h"
#include "mdtrain/nn/pooling2d.h"
#include "mdtrain/optim/registry.h"
#include "mdtrain/strategy/mirrored_strategy.h"
#include "mdtrain/core/tensor.h"
#include "mdtrain/distribute/registry.h"
#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/ops/cuda/optimizer_kernels.h"
#include "mdtrain/ops/loss_ops.h"
#include "mdtrain/ops/ops.h"

using namespace mdtrain;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

Device gpu(int i) { return Device{DeviceKind::CUDA, i}; }

Tensor random_gpu(Shape shape, int device, unsigned seed) {
  Tensor h(shape, DType::Float32);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  for (std::int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = u(gen);
  Tensor d(shape, DType::Float32, gpu(device));
  d.copy_from(h);
  return d;
}

// ---- GEMM -----------------------------------------------------------------------------------

double gemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, int reps) {
  Tensor a = random_gpu(ta ? Shape{k, m} : Shape{m, k}, 0, 1);
  Tensor b = random_gpu(tb ? Shape{n, k} : Shape{k, n}, 0, 2);
  Tensor c({m, n}, DType::Float32, gpu(0));
  ops::gemm(a, ta, b, tb, c);
  cuda::synchronize(0);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = clock_type::now();
    for (int i = 0; i < reps; ++i) ops::gemm(a, ta, b, tb, c);
    cuda::synchronize(0);
    best = std::min(best, seconds_since(t0) / reps);
  }
  return 2.0 * m * n * k / best / 1e9;
}

void bench_gemm() {
  const double peak = gemm_gflops(8192, 8192, 8192, false, false, 3);
  std::printf("\nGEMM (float32, cuBLAS through ops::gemm; peak = sgemm 8192^3 measured now: %.0f GFLOP/s)\n", peak);
  std::printf("%-34s %10s %10s\n", "shape (seed MLP, batch 256)", "GFLOP/s", "x peak");
  struct Case {
    const char* name;
    std::int64_t m, n, k;
    bool ta, tb;
  };
  const Case cases[] = {{"forward  x[256,784] @ W1[784,128]", 256, 128, 784, false, false},
                        {"forward  h[256,128] @ W2[128,10]", 256, 10, 128, false, false},
                        {"grad W1  x^T[784,256] @ dh[256,128]", 784, 128, 256, true, false},
                        {"grad h   dz[256,10] @ W2^T[10,128]", 256, 128, 10, false, true},
                        {"square 2048", 2048, 2048, 2048, false, false}};
  for (const Case& c : cases) {
    const double g = gemm_gflops(c.m, c.n, c.k, c.ta, c.tb, 50);
    std::printf("%-34s %10.1f %10.3f\n", c.name, g, g / peak);
    std::printf("json: {\"bench\": \"gemm\", \"shape\": \"%s\", \"gflops\": %.3f, \"peak_gflops\": %.3f}\n", c.name, g,
                peak);
  }
}

// ---- one epoch of the seed MLP -------------------------------------------------------------

struct Replica {
  int device;
  Tensor params, grads, m, v;  // packed: W1 (784x128), b1 (128), W2 (128x10), b2 (10)
  Tensor w1, b1, w2, b2, gw1, gb1, gw2, gb2;
};

constexpr std::int64_t kIn = 784, kHidden = 128, kOut = 10;
constexpr std::int64_t kParams = kIn * kHidden + kHidden + kHidden * kOut + kOut;

Replica make_replica(int device) {
  Replica r;
  r.device = device;
  r.params = random_gpu({kParams}, device, 7);  // same seed: identical replicas
  r.grads = Tensor::zeros({kParams}, DType::Float32, gpu(device));
  r.m = Tensor::zeros({kParams}, DType::Float32, gpu(device));
  r.v = Tensor::zeros({kParams}, DType::Float32, gpu(device));
  auto cut = [](Tensor& t, std::int64_t& at, Shape s) {
    std::int64_t n = numel(s);
    Tensor view = t.rows(at, at + n).reshape(s);
    at += n;
    return view;
  };
  std::int64_t a = 0, g = 0;
  r.w1 = cut(r.params, a, {kIn, kHidden});
  r.b1 = cut(r.params, a, {kHidden});
  r.w2 = cut(r.params, a, {kHidden, kOut});
  r.b2 = cut(r.params, a, {kOut});
  r.gw1 = cut(r.grads, g, {kIn, kHidden});
  r.gb1 = cut(r.grads, g, {kHidden});
  r.gw2 = cut(r.grads, g, {kHidden, kOut});
  r.gb2 = cut(r.grads, g, {kOut});
  return r;
}

double epoch_seconds(int n_gpus, std::int64_t batch, const Tensor& x, const Tensor& y) {
  const std::int64_t rows = x.dim(0), steps = rows / batch;
  std::vector<std::unique_ptr<Communicator>> comms;
  if (n_gpus > 1) comms = create_communicators("nccl", n_gpus);
  std::vector<double> times(static_cast<std::size_t>(n_gpus));
  std::vector<std::thread> threads;
  for (int d = 0; d < n_gpus; ++d) {
    threads.emplace_back([&, d] {
      Replica r = make_replica(d);
      const std::int64_t local = batch / n_gpus;  // rows of this replica per step
      Tensor xb({local, kIn}, DType::Float32, gpu(d)), yb({local}, DType::Int32, gpu(d));
      Tensor h({local, kHidden}, DType::Float32, gpu(d)), z({local, kOut}, DType::Float32, gpu(d));
      Tensor dz({local, kOut}, DType::Float32, gpu(d)), dh({local, kHidden}, DType::Float32, gpu(d));
      std::vector<std::int64_t> idx(static_cast<std::size_t>(local));
      const double beta_1 = 0.9, beta_2 = 0.999;
      auto step = [&](std::int64_t s) {
        for (std::int64_t i = 0; i < local; ++i) idx[static_cast<std::size_t>(i)] = s * batch + d * local + i;
        ops::gather_rows(x, idx.data(), local, xb);
        ops::gather_rows(y, idx.data(), local, yb);
        ops::gemm(xb, false, r.w1, false, h);
        ops::bias_activation(h, r.b1, Activation::ReLU, h);
        ops::gemm(h, false, r.w2, false, z);
        ops::bias_activation(z, r.b2, Activation::Linear, z);
        ops::sparse_categorical_crossentropy(yb, z, true, std::nullopt, 1.0 / static_cast<double>(batch), &dz);
        ops::gemm(h, true, dz, false, r.gw2);
        ops::sum_rows(dz, r.gb2);
        ops::gemm(dz, false, r.w2, true, dh);
        ops::activation_backward(Activation::ReLU, Tensor(), h, dh, dh);
        ops::gemm(xb, true, dh, false, r.gw1);
        ops::sum_rows(dh, r.gb1);
        if (n_gpus > 1) comms[static_cast<std::size_t>(d)]->all_reduce(r.grads, ReduceOp::Sum);
        const double t = static_cast<double>(s + 1);
        const double alpha = 0.001 * std::sqrt(1 - std::pow(beta_2, t)) / (1 - std::pow(beta_1, t));
        cuda::UpdateSegment seg;
        seg.value = r.params.raw();
        seg.grad = r.grads.raw();
        seg.slots[0] = r.m.raw();
        seg.slots[1] = r.v.raw();
        seg.size = kParams;
        cuda::adam_update(d, DType::Float32, {seg}, alpha, beta_1, beta_2, 1e-7, false, HUGE_VAL);
      };
      step(0);  // warm-up (cuBLAS handle, streams, staging)
      cuda::synchronize(d);
      const auto t0 = clock_type::now();
      for (std::int64_t s = 1; s < steps; ++s) step(s);
      cuda::synchronize(d);
      times[static_cast<std::size_t>(d)] =
          seconds_since(t0) * static_cast<double>(steps) / static_cast<double>(steps - 1);
    });
  }
  for (auto& t : threads) t.join();
  return *std::max_element(times.begin(), times.end());
}

void bench_epoch(int gpus) {
  const std::int64_t rows = 60000;
  Tensor x({rows, kIn}, DType::Float32), y({rows}, DType::Int32);
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(gen);
  for (std::int64_t i = 0; i < rows; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>(gen() % kOut);
  std::printf("\nEpoch of the seed MLP (60000 rows, Adam; backend loop: ops + NCCL + fused Adam)\n");
  std::printf("%6s %6s %10s %10s\n", "batch", "GPUs", "epoch_s", "speedup");
  for (std::int64_t batch : {32, 256}) {
    double one = 0;
    for (int n = 1; n <= gpus; ++n) {
      if (batch % n) continue;
      const double s = epoch_seconds(n, batch, x, y);
      if (n == 1) one = s;
      std::printf("%6lld %6d %10.3f %10.2f\n", static_cast<long long>(batch), n, s, one / s);
      std::printf("json: {\"bench\": \"epoch\", \"batch\": %lld, \"gpus\": %d, \"epoch_s\": %.4f}\n",
                  static_cast<long long>(batch), n, s);
    }
  }
}

// ---- fit: the engine on GPUs ----------------------------------------------------------------

std::unique_ptr<Model> fit_model(bool cnn, int n_gpus, std::size_t bucket_bytes) {
  std::vector<Device> devices;
  for (int d = 0; d < n_gpus; ++d) devices.push_back(gpu(d));
  auto strategy = std::make_shared<MirroredStrategy>(devices);  // "auto": NCCL
  strategy->set_gradient_bucket_bytes(bucket_bytes);
  auto m = std::make_unique<Model>(cnn ? "cnn" : "mlp", 1);
  Dense::Options dense;
  if (cnn) {
    Conv2D::Options conv;
    conv.filters = 32;
    conv.kernel_size = {3, 3};
    conv.activation = "relu";
    m->add(std::make_shared<Conv2D>("conv2d", conv));
    m->add(std::make_shared<MaxPooling2D>("max_pooling2d", Pooling2D::Options{}));
    conv.filters = 64;
    m->add(std::make_shared<Conv2D>("conv2d_1", conv));
    m->add(std::make_shared<MaxPooling2D>("max_pooling2d_1", Pooling2D::Options{}));
    m->add(std::make_shared<Flatten>("flatten"));
    m->add(std::make_shared<Dropout>("dropout", 0.3, 2));
  } else {
    m->add(std::make_shared<Flatten>("flatten"));
  }
  dense.units = 128;
  dense.activation = "relu";
  m->add(std::make_shared<Dense>("dense", dense));
  if (!cnn) m->add(std::make_shared<Dropout>("dropout", 0.2, 2));
  dense.units = 10;
  dense.activation = "linear";
  m->add(std::make_shared<Dense>("dense_1", dense));
  m->build({28, 28, 1});
  m->compile(std::shared_ptr<Loss>(loss_from_config(
                 Json::parse(R"({"class_name": "SparseCategoricalCrossentropy", "config": {"from_logits": true}})"))),
             std::shared_ptr<Optimizer>(make_optimizer(Json("adam"))), {"accuracy"}, std::move(strategy));
  return m;
}

void bench_fit(int gpus) {
  const std::int64_t rows = 60000;
  Tensor x({rows, 28, 28, 1}, DType::Float32), y({rows}, DType::Int32);
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(gen);
  for (std::int64_t i = 0; i < rows; ++i) y.data<std::int32_t>()[i] = static_cast<std::int32_t>(gen() % 10);
  std::vector<std::int64_t> order(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) order[static_cast<std::size_t>(i)] = i;
  std::printf("\nfit: Model::train_epoch under MirroredStrategy (NCCL), 60000 rows, Adam; ms per step:\n");
  std::printf("%5s %6s %6s %7s %9s %8s %9s %10s %9s\n", "model", "batch", "GPUs", "bucket", "epoch_s", "speedup",
              "compute", "exposed", "update");
  for (bool cnn : {false, true}) {
    const std::int64_t batch = cnn ? 128 : 256;
    double one = 0;
    for (int n = 1; n <= gpus; ++n) {
      for (std::size_t bucket : {std::size_t{25} << 20, std::size_t{1} << 20}) {
        if (n == 1 && bucket != (std::size_t{25} << 20)) continue;  // one GPU: nothing to reduce
        auto m = fit_model(cnn, n, bucket);
        const std::int64_t steps = rows / batch;
        m->train_epoch(x, y, order.data(), rows, batch, 5, nullptr);  // warm-up: allocations, cuBLAS, NCCL
        for (int d = 0; d < n; ++d) cuda::synchronize(d);
        m->engine().reset_profile();
        const auto t0 = clock_type::now();
        m->train_epoch(x, y, order.data(), rows, batch, steps, nullptr);
        for (int d = 0; d < n; ++d) cuda::synchronize(d);
        const double epoch_s = seconds_since(t0);
        if (n == 1) one = epoch_s;
        // The slowest replica's split, per step (host-side: kernels are asynchronous, so compute
        // is the time to enqueue and whatever the host waits for; exposed communication is the
        // wait for the all-reduces after backward).
        double compute = 0, exposed = 0, update = 0;
        for (const auto& p : m->engine().profile()) {
          const double k = 1e3 / static_cast<double>(std::max<std::int64_t>(1, p.steps));
          compute = std::max(compute, p.compute * k);
          exposed = std::max(exposed, p.allreduce * k);
          update = std::max(update, p.update * k);
        }
        std::printf("%5s %6lld %6d %6zuM %9.3f %8.2f %9.3f %10.3f %9.3f\n", cnn ? "cnn" : "mlp",
                    static_cast<long long>(batch), n, bucket >> 20, epoch_s, one / epoch_s, compute, exposed, update);
        std::printf(
            "json: {\"bench\": \"fit\", \"model\": \"%s\", \"batch\": %lld, \"gpus\": %d, "
            "\"bucket_bytes\": %zu, \"epoch_s\": %.4f, \"compute_ms\": %.4f, \"exposed_comm_ms\": %.4f, "
            "\"update_ms\": %.4f}\n",
            cnn ? "cnn" : "mlp", static_cast<long long>(batch), n, bucket, epoch_s, compute, exposed, update);
      }
    }
  }
}

// ---- NCCL all-reduce -------------------------------------------------------------------------

void bench_allreduce(int gpus) {
  if (gpus < 2) {
    std::printf("\nNCCL all-reduce: needs 2 or more GPUs (this machine has %d)\n", gpus);
    return;
  }
  std::printf("\nNCCL all-reduce on %d GPUs (float32, in place on device memory)\n", gpus);
  std::printf("%12s %12s %12s\n", "bytes", "time_us", "busbw_GB/s");
  auto comms = create_communicators("nccl", gpus);
  for (std::size_t bytes = 4; bytes <= (std::size_t(256) << 20); bytes *= (bytes < 1024 ? 256 : 4)) {
    const std::int64_t count = static_cast<std::int64_t>(bytes / 4);
    std::vector<double> t(static_cast<std::size_t>(gpus));
    std::vector<std::thread> threads;
    for (int d = 0; d < gpus; ++d) {
      threads.emplace_back([&, d] {
        Tensor buf = random_gpu({count}, d, 5);
        Communicator& c = *comms[static_cast<std::size_t>(d)];
        for (int i = 0; i < 5; ++i) c.all_reduce(buf);
        const int iters = bytes >= (std::size_t(64) << 20) ? 10 : 50;
        const auto t0 = clock_type::now();
        for (int i = 0; i < iters; ++i) c.all_reduce(buf);
        t[static_cast<std::size_t>(d)] = seconds_since(t0) / iters;
      });
    }
    for (auto& th : threads) th.join();
    const double sec = *std::max_element(t.begin(), t.end());
    const double busbw = static_cast<double>(bytes) / sec * 2.0 * (gpus - 1) / gpus / 1e9;
    std::printf("%12zu %12.1f %12.2f\n", bytes, sec * 1e6, busbw);
    std::printf(
        "json: {\"bench\": \"allreduce\", \"gpus\": %d, \"bytes\": %zu, \"seconds\": %.9f, \"busbw_gbs\": %.4f}\n",
        gpus, bytes, sec, busbw);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int gpus = cuda::device_count();
  if (gpus == 0) {
    std::fprintf(stderr, "gpu_bench: no CUDA device: %s\n", cuda::unavailable_reason().c_str());
    return 2;
  }
  std::string only = argc > 1 ? argv[1] : "all";
  std::printf("GPUs: %d (%s)\n", gpus, cuda::device_name(0).c_str());
  try {
    if (only == "all" || only == "gemm") bench_gemm();
    if (only == "all" || only == "epoch") bench_epoch(gpus);
    if (only == "all" || only == "fit") bench_fit(gpus);
    if (only == "all" || only == "allreduce") bench_allreduce(gpus);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
