// All-reduce benchmark of the MPI communicator against plain MPI_Allreduce on the same buffers,
// in the same run. Start it under mpirun (bench/allreduce_mpi.py does):
//
//   mpirun -np 2 allreduce_mpi_bench [out.json] [--min-bytes N] [--max-bytes N]
//                                    [--chunk-bytes N] [--in-flight K] [--rounds R]
//
// For each message size (float32 sum, powers of 4 from --min-bytes): rounds alternate between
// mdtrain's all_reduce and MPI_Allreduce(MPI_IN_PLACE), each round timing enough calls to move
// ~256 MB (at least 3) between barriers, the slowest rank's time counting. Reported: the median
// round of each, and the median over rounds of MPI's time / mdtrain's time in that round (pairs
// of adjacent rounds see the same outside load). busbw = bytes / time * 2(n-1)/n (nccl-tests). Then the "whole-step
// gradient sync" of the seed model (examples/mirrored_fashion_mnist.py: Dense(128) and Dense(10)
// on 784 inputs, 101,770 float32 gradients in 4 tensors): one fused mdtrain all_reduce of the
// packed gradient vs one MPI_Allreduce per tensor (what a framework without packing does) and
// one MPI_Allreduce of the packed buffer.
//
// mdtrain is timed twice per round: the raw-pointer all_reduce (every piece staged through
// mdtrain's scratch, see mpi_communicator.cpp) and the Tensor form on a view whose owner is known
// (MPI works on the buffer itself): tensor_us, and staged/tensor = the median over rounds of the
// raw time / the Tensor form's time in that round.
//
// Buffers hold zeros, so repeated sums neither overflow nor go subnormal.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "mdtrain/core/tensor.h"
#include "mdtrain/distribute/mpi/mpi_communicator.h"

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

namespace {

// Seconds per call of fn (median of `rounds` timed loops of `iters` calls, slowest rank).
struct Timer {
  MPI_Comm comm;
  double loop(int iters, const std::function<void()>& fn) const {
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) fn();
    double t = (MPI_Wtime() - t0) / iters;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
    return t;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int iterations_for(std::size_t bytes) {
  return static_cast<int>(std::clamp(double(256u << 20) / double(bytes), 3.0, 3000.0));
}

std::string human(std::size_t bytes) {
  char buf[32];
  if (bytes >= (1u << 20)) {
    std::snprintf(buf, sizeof buf, "%zu MB", bytes >> 20);
  } else if (bytes >= 1024) {
    std::snprintf(buf, sizeof buf, "%zu KB", bytes >> 10);
  } else {
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  }
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  std::size_t min_bytes = 1024, max_bytes = std::size_t(256) << 20;
  mdtrain::MpiOptions options;
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--min-bytes" && has_value) {
      min_bytes = std::stoull(argv[++i]);
    } else if (a == "--max-bytes" && has_value) {
      max_bytes = std::stoull(argv[++i]);
    } else if (a == "--chunk-bytes" && has_value) {
      options.chunk_bytes = std::stoull(argv[++i]);
    } else if (a == "--in-flight" && has_value) {
      options.chunks_in_flight = std::stoi(argv[++i]);
    } else if (a == "--rounds" && has_value) {
      rounds = std::max(1, std::stoi(argv[++i]));
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: mpirun -np 2 %s [out.json] [--min-bytes N] [--max-bytes N] "
          "[--chunk-bytes N] [--in-flight K] [--rounds R]\n",
          argv[0]);
      return 0;
    } else {
      out_path = a;
    }
  }

  const mdtrain::MpiWorldInfo world = mdtrain::mpi_world_info();  // initializes MPI
  const bool root = world.rank == 0;
  const int n = world.size;
  mdtrain::MpiCommunicator comm(options);
  MPI_Comm plain;
  MPI_Comm_dup(MPI_COMM_WORLD, &plain);
  const Timer timer{plain};
  const double bus = n > 1 ? 2.0 * (n - 1) / n : 1.0;

  std::vector<std::size_t> sizes;
  for (std::size_t b = min_bytes; b <= max_bytes; b *= 4) sizes.push_back(b);
  std::vector<float> buf(sizes.back() / sizeof(float), 0.0f);
  // An owner for the Tensor form (buf outlives every collective here).
  const std::shared_ptr<void> buf_owner(static_cast<void*>(buf.data()), [](void*) {});

  std::ostringstream json;
  json << "{\n  \"benchmark\": \"allreduce_mpi\",\n  \"ranks\": " << n
       << ",\n  \"hosts\": " << (world.local_size == n ? 1 : 0) << ",\n  \"dtype\": \"float32\",\n  \"op\": \"sum\","
       << "\n  \"chunk_bytes\": " << options.chunk_bytes << ",\n  \"chunks_in_flight\": " << options.chunks_in_flight
       << ",\n  \"rounds\": " << rounds << ",\n  \"results\": [";
  if (root) {
    std::printf(
        "all-reduce float32 sum, %d ranks: mdtrain MPI communicator (chunks of %zu bytes, "
        "%d in flight) vs MPI_Allreduce; busbw = bytes/time * 2(n-1)/n\n",
        n, options.chunk_bytes, options.chunks_in_flight);
    std::printf("%9s %8s %12s %12s %12s %12s %7s %12s %14s\n", "size", "iters", "mdtrain_us", "mpi_us", "mdtrain_GB/s",
                "mpi_GB/s", "ratio", "tensor_us", "staged/tensor");
  }
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    const std::size_t count = sizes[s] / sizeof(float);
    const int iters = iterations_for(sizes[s]);
    auto ours = [&] { comm.all_reduce(buf.data(), count, mdtrain::DType::Float32); };
    mdtrain::Tensor view =
        mdtrain::Tensor::wrap(buf.data(), {static_cast<std::int64_t>(count)}, mdtrain::DType::Float32, buf_owner);
    auto ours_tensor = [&] { comm.all_reduce(view); };
    auto theirs = [&] { MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, plain); };
    ours();  // warm-up: first touch, connections, scratch buffers
    ours_tensor();
    theirs();
    std::vector<double> a, b, t, ratios, staged;
    for (int r = 0; r < rounds; ++r) {
      a.push_back(timer.loop(iters, ours));
      b.push_back(timer.loop(iters, theirs));
      t.push_back(timer.loop(iters, ours_tensor));
      ratios.push_back(b.back() / a.back());
      staged.push_back(a.back() / t.back());
    }
    const double ta = median(a), tb = median(b), ratio = median(ratios), tt = median(t), st = median(staged);
    const double bwa = sizes[s] / ta / 1e9 * bus, bwb = sizes[s] / tb / 1e9 * bus;
    if (root) {
      std::printf("%9s %8d %12.2f %12.2f %12.3f %12.3f %7.2f %12.2f %14.2f\n", human(sizes[s]).c_str(), iters, ta * 1e6,
                  tb * 1e6, bwa, bwb, ratio, tt * 1e6, st);
      std::fflush(stdout);
    }
    json << (s ? ",\n" : "\n") << "    {\"bytes\": " << sizes[s] << ", \"iters\": " << iters
         << ", \"mdtrain_us\": " << ta * 1e6 << ", \"mpi_us\": " << tb * 1e6 << ", \"mdtrain_busbw_GBps\": " << bwa
         << ", \"mpi_busbw_GBps\": " << bwb << ", \"ratio\": " << ratio << ", \"tensor_us\": " << tt * 1e6
         << ", \"staged_over_tensor\": " << st << "}";
  }
  json << "\n  ],\n";

  // Whole-step gradient sync of the seed model.
  const std::vector<std::size_t> tensors = {784 * 128, 128, 128 * 10, 10};
  std::size_t packed = 0;
  for (auto t : tensors) packed += t;
  std::vector<float> grads(packed, 0.0f);
  auto fused = [&] { comm.all_reduce(grads.data(), packed, mdtrain::DType::Float32); };
  auto per_tensor = [&] {
    std::size_t off = 0;
    for (auto t : tensors) {
      MPI_Allreduce(MPI_IN_PLACE, grads.data() + off, static_cast<int>(t), MPI_FLOAT, MPI_SUM, plain);
      off += t;
    }
  };
  auto mpi_fused = [&] {
    MPI_Allreduce(MPI_IN_PLACE, grads.data(), static_cast<int>(packed), MPI_FLOAT, MPI_SUM, plain);
  };
  fused();
  per_tensor();
  mpi_fused();
  const int step_iters = 500;
  std::vector<double> f, p, m, pf, mf;
  for (int r = 0; r < rounds; ++r) {
    f.push_back(timer.loop(step_iters, fused));
    p.push_back(timer.loop(step_iters, per_tensor));
    m.push_back(timer.loop(step_iters, mpi_fused));
    pf.push_back(p.back() / f.back());
    mf.push_back(m.back() / f.back());
  }
  const double tf = median(f), tp = median(p), tm = median(m);
  const double speedup = median(pf), vs_fused = median(mf);
  if (root) {
    std::printf("\nwhole-step gradient sync, seed model (%zu floats in %zu tensors):\n", packed, tensors.size());
    std::printf("  mdtrain, one fused all_reduce:     %9.1f us\n", tf * 1e6);
    std::printf("  MPI_Allreduce per tensor (%zu calls): %9.1f us  (ratio %.2f)\n", tensors.size(), tp * 1e6, speedup);
    std::printf("  MPI_Allreduce of the packed buffer: %9.1f us  (ratio %.2f)\n", tm * 1e6, vs_fused);
  }
  json << "  \"gradient_sync\": {\"floats\": " << packed << ", \"tensors\": " << tensors.size()
       << ", \"mdtrain_fused_us\": " << tf * 1e6 << ", \"mpi_per_tensor_us\": " << tp * 1e6
       << ", \"mpi_fused_us\": " << tm * 1e6 << ", \"speedup_vs_per_tensor\": " << speedup
       << ", \"ratio_vs_mpi_fused\": " << vs_fused << "}\n}\n";

  MPI_Comm_free(&plain);
  int status = 0;
  if (root && !out_path.empty()) {
    std::ofstream out(out_path);
    out << json.str();
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", out_path.c_str());
      status = 1;
    } else {
      std::printf("wrote %s\n", out_path.c_str());
    }
  }
  mdtrain::mpi_finalize();
  return status;
}
