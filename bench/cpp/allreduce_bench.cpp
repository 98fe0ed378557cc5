// All-reduce benchmark of the threads communicator, against single-core memcpy measured in the
// same run.
//
//   allreduce_bench [out.json] [--ranks 2,4] [--max-bytes N]
//
// For each group size and message size: time per float32 Sum all-reduce (median of 3 timed
// loops), algorithm bandwidth algbw = bytes / time and bus bandwidth busbw = algbw * 2(n-1)/n
// (nccl-tests' definition: the per-rank traffic of a ring all-reduce, comparable across n).
// memcpy bandwidth is bytes copied / time by one thread.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mdtrain/distribute/threads/threads_communicator.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Enough repetitions to move ~1 GiB (or 20000 calls for tiny messages), at least 5.
int iterations_for(std::size_t bytes) {
  const double target = double(1u << 30) / double(bytes);
  return static_cast<int>(std::clamp(target, 5.0, 20000.0));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<std::size_t> message_sizes(std::size_t max_bytes) {
  std::vector<std::size_t> sizes = {4};
  for (std::size_t b = 1024; b <= max_bytes; b *= 4) sizes.push_back(b);
  return sizes;
}

// Seconds per memcpy of `bytes` by one thread (median of 3 loops).
double memcpy_seconds(std::size_t bytes, char* dst, const char* src) {
  const int iters = iterations_for(bytes);
  std::memcpy(dst, src, bytes);
  std::vector<double> reps;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      std::memcpy(dst, src, bytes);
      // Keep the copies from being merged or dropped.
      asm volatile("" : : "r"(dst) : "memory");
    }
    reps.push_back(seconds_since(t0) / iters);
  }
  return median(reps);
}

// Seconds per all-reduce of each size for a group of n ranks (rank 0's clock, between barriers).
std::vector<double> allreduce_seconds(int n, const std::vector<std::size_t>& sizes) {
  auto comms = mdtrain::ThreadsCommunicator::create_group(n);
  std::vector<double> result(sizes.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      mdtrain::Communicator& comm = *comms[r];
      const std::size_t max_bytes = sizes.back();
      // Each rank first-touches its own buffer, as a replica thread would.
      std::vector<float> buf(max_bytes / sizeof(float), 0.0f);
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        const std::size_t count = sizes[s] / sizeof(float);
        const int iters = iterations_for(sizes[s]);
        comm.all_reduce(buf.data(), count, mdtrain::DType::Float32);  // warm-up
        std::vector<double> reps;
        for (int rep = 0; rep < 3; ++rep) {
          comm.barrier();
          const auto t0 = Clock::now();
          for (int i = 0; i < iters; ++i) comm.all_reduce(buf.data(), count, mdtrain::DType::Float32);
          comm.barrier();
          reps.push_back(seconds_since(t0) / iters);
        }
        if (r == 0) result[s] = median(reps);
      }
    });
  }
  for (auto& t : threads) t.join();
  return result;
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
  std::vector<int> ranks = {2, 4};
  std::size_t max_bytes = std::size_t(256) << 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc) {
      ranks.clear();
      std::stringstream ss(argv[++i]);
      std::string item;
      while (std::getline(ss, item, ',')) ranks.push_back(std::stoi(item));
    } else if (a == "--max-bytes" && i + 1 < argc) {
      max_bytes = std::stoull(argv[++i]);
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [out.json] [--ranks 2,4] [--max-bytes N]\n", argv[0]);
      return 0;
    } else {
      out_path = a;
    }
  }
  const auto sizes = message_sizes(max_bytes);

  std::vector<double> memcpy_s(sizes.size());
  {
    std::vector<char> src(sizes.back(), 1), dst(sizes.back(), 0);
    for (std::size_t s = 0; s < sizes.size(); ++s) memcpy_s[s] = memcpy_seconds(sizes[s], dst.data(), src.data());
  }

  std::ostringstream json;
  json << "{\n  \"benchmark\": \"allreduce\",\n  \"backend\": \"threads\",\n  \"dtype\": \"float32\",\n"
       << "  \"op\": \"sum\",\n  \"hardware_threads\": " << std::thread::hardware_concurrency()
       << ",\n  \"results\": [";
  std::printf("threads all-reduce (float32 sum), %u hardware threads; busbw = algbw * 2(n-1)/n\n",
              std::thread::hardware_concurrency());
  std::printf("%5s %9s %12s %12s %12s %12s %9s\n", "ranks", "size", "time_us", "algbw_GB/s", "busbw_GB/s",
              "memcpy_GB/s", "bus/mcpy");
  bool first = true;
  for (int n : ranks) {
    const auto secs = allreduce_seconds(n, sizes);
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      const double algbw = double(sizes[s]) / secs[s] / 1e9;
      const double busbw = algbw * 2.0 * (n - 1) / n;
      const double mcpy = double(sizes[s]) / memcpy_s[s] / 1e9;
      std::printf("%5d %9s %12.2f %12.2f %12.2f %12.2f %9.2f\n", n, human(sizes[s]).c_str(), secs[s] * 1e6, algbw,
                  busbw, mcpy, busbw / mcpy);
      json << (first ? "\n" : ",\n") << "    {\"ranks\": " << n << ", \"bytes\": " << sizes[s]
           << ", \"time_us\": " << secs[s] * 1e6 << ", \"algbw_GBps\": " << algbw << ", \"busbw_GBps\": " << busbw
           << ", \"memcpy_GBps\": " << mcpy << ", \"busbw_over_memcpy\": " << busbw / mcpy << "}";
      first = false;
    }
  }
  json << "\n  ]\n}\n";
  if (!out_path.empty()) {
    std::ofstream f(out_path);
    f << json.str();
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", out_path.c_str());
      return 1;
    }
    std::printf("wrote %s\n", out_path.c_str());
  }
  return 0;
}
