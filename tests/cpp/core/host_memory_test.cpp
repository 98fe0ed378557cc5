// The large-allocation check (core/host_memory.h): what is left is the smaller of MemAvailable and
// the tightest cgroup's limit minus working set, for cgroup v2 and v1, read from files a test
// writes (the sources are injectable), and a large Tensor past it is a HostMemoryExhausted naming
// its shape and bytes while small ones are never checked. Also the thread-count bounds.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "mdtrain/core/host_memory.h"
#include "mdtrain/core/tensor.h"
#include "mdtrain/core/threading/thread_team.h"

namespace mdtrain {
namespace {

namespace fs = std::filesystem;
constexpr std::uint64_t kMiB = std::uint64_t{1} << 20, kGiB = std::uint64_t{1} << 30;

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

std::string meminfo_with(std::uint64_t available_kb) {
  return "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   " + std::to_string(available_kb) +
         " kB\nBuffers:            0 kB\n";
}

// A fake /proc and cgroup tree under a temporary directory.
class FakeHost : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mdtrain_host_memory_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    sources_.meminfo = (dir_ / "meminfo").string();
    sources_.self_cgroup = (dir_ / "cgroup").string();
    sources_.mountinfo = (dir_ / "mountinfo").string();
    sources_.root = (dir_ / "root").string();
  }
  void TearDown() override {
    set_host_memory_sources(HostMemorySources{});
    fs::remove_all(dir_);
  }
  void v2(const std::string& path) {
    write(sources_.self_cgroup, "0::" + path + "\n");
    write(sources_.mountinfo, "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  }
  void v1(const std::string& path) {
    write(sources_.self_cgroup, "5:cpu,cpuacct:/\n4:memory:" + path + "\n0::/\n");
    write(sources_.mountinfo,
          "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
          "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
          "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
  }
  fs::path cg(const std::string& rel) const { return fs::path(sources_.root) / ("sys/fs/cgroup" + rel); }

  fs::path dir_;
  HostMemorySources sources_;
};

TEST(HostMemoryParse, MemAvailableAndLimits) {
  EXPECT_EQ(parse_mem_available(meminfo_with(1024)), std::optional<std::uint64_t>(kMiB));
  EXPECT_EQ(parse_mem_available("MemTotal: 5 kB\n"), std::nullopt);
  EXPECT_EQ(parse_mem_available("MemAvailable: lots kB\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_limit("max\n"), std::nullopt);                  // v2: no limit
  EXPECT_EQ(parse_cgroup_limit("9223372036854771712\n"), std::nullopt);  // v1: no limit
  EXPECT_EQ(parse_cgroup_limit("2147483648\n"), std::optional<std::uint64_t>(2 * kGiB));
  EXPECT_EQ(parse_cgroup_limit("-1"), std::nullopt);
  EXPECT_EQ(format_bytes(3 * kGiB + kGiB / 2), "3.5 GiB");
  EXPECT_EQ(format_bytes(64 * kMiB), "64.0 MiB");
  EXPECT_EQ(format_bytes(512), "512 bytes");
}

TEST_F(FakeHost, MemAvailableAloneWhenThereIsNoCgroupLimit) {
  write(sources_.meminfo, meminfo_with(8 * 1024 * 1024));  // 8 GiB
  v2("/job");
  write(cg("/job/memory.max"), "max\n");
  write(cg("/job/memory.current"), "1000\n");
  const HostMemoryAvailable a = read_host_memory(sources_);
  EXPECT_EQ(a.bytes(), std::optional<std::uint64_t>(8 * kGiB));
  EXPECT_EQ(a.cgroup_headroom, std::nullopt);
  EXPECT_NE(a.describe().find("MemAvailable 8.0 GiB"), std::string::npos) << a.describe();
}

TEST_F(FakeHost, CgroupV2LimitMinusWorkingSetWhenTighter) {
  write(sources_.meminfo, meminfo_with(8 * 1024 * 1024));
  v2("/job/step");
  write(cg("/job/step/memory.max"), std::to_string(2 * kGiB) + "\n");
  write(cg("/job/step/memory.current"), std::to_string(kGiB + 512 * kMiB) + "\n");
  // 256 MiB of the usage is inactive file cache, which the kernel reclaims before it kills.
  write(cg("/job/step/memory.stat"), "anon 1000\nfile 300000000\ninactive_file " + std::to_string(256 * kMiB) + "\n");
  const HostMemoryAvailable a = read_host_memory(sources_);
  EXPECT_EQ(a.bytes(), std::optional<std::uint64_t>(2 * kGiB - (kGiB + 256 * kMiB)));  // 768 MiB
  EXPECT_NE(a.describe().find("memory.max 2.0 GiB"), std::string::npos) << a.describe();
  EXPECT_NE(a.describe().find((fs::path(sources_.root) / "sys/fs/cgroup/job/step").string()), std::string::npos)
      << a.describe();
}

TEST_F(FakeHost, AnAncestorsTighterLimitApplies) {
  write(sources_.meminfo, meminfo_with(8 * 1024 * 1024));
  v2("/job/step");
  write(cg("/job/step/memory.max"), "max\n");
  write(cg("/job/step/memory.current"), std::to_string(100 * kMiB));
  write(cg("/job/memory.max"), std::to_string(kGiB));
  write(cg("/job/memory.current"), std::to_string(900 * kMiB));
  EXPECT_EQ(read_host_memory(sources_).bytes(), std::optional<std::uint64_t>(124 * kMiB));
}

TEST_F(FakeHost, UsageOverTheLimitLeavesNothing) {
  write(sources_.meminfo, meminfo_with(8 * 1024 * 1024));
  v2("/job");
  write(cg("/job/memory.max"), std::to_string(kGiB));
  write(cg("/job/memory.current"), std::to_string(2 * kGiB));
  EXPECT_EQ(read_host_memory(sources_).bytes(), std::optional<std::uint64_t>(0));
}

TEST_F(FakeHost, CgroupV1LimitInBytesMinusUsage) {
  write(sources_.meminfo, meminfo_with(8 * 1024 * 1024));
  v1("/process_api/abc");
  write(cg("/memory/process_api/abc/memory.limit_in_bytes"), std::to_string(3 * kGiB) + "\n");
  write(cg("/memory/process_api/abc/memory.usage_in_bytes"), std::to_string(kGiB) + "\n");
  write(cg("/memory/process_api/abc/memory.stat"), "cache 5\ntotal_inactive_file " + std::to_string(kGiB / 2) + "\n");
  write(cg("/memory/memory.limit_in_bytes"), "9223372036854771712\n");  // the root: no limit
  write(cg("/memory/memory.usage_in_bytes"), std::to_string(5 * kGiB) + "\n");
  const HostMemoryAvailable a = read_host_memory(sources_);
  EXPECT_EQ(a.bytes(), std::optional<std::uint64_t>(3 * kGiB - kGiB / 2));
  EXPECT_NE(a.describe().find("cgroup v1"), std::string::npos) << a.describe();
  EXPECT_NE(a.describe().find("memory.limit_in_bytes 3.0 GiB"), std::string::npos) << a.describe();
}

TEST_F(FakeHost, NothingKnownChecksNothing) {
  const HostMemoryAvailable a = read_host_memory(sources_);  // no file exists
  EXPECT_EQ(a.bytes(), std::nullopt);
  set_host_memory_sources(sources_);
  EXPECT_NO_THROW(check_host_allocation(std::size_t{1} << 40));
}

TEST_F(FakeHost, ALargeTensorPastWhatIsLeftThrowsNamingShapeAndBytesAndSmallOnesAreNotChecked) {
  write(sources_.meminfo, meminfo_with(8 * 1024 * 1024));
  v2("/job");
  write(cg("/job/memory.max"), std::to_string(kGiB));
  write(cg("/job/memory.current"), std::to_string(kGiB - 100 * kMiB));  // 100 MiB left
  set_host_memory_sources(sources_);
  try {
    Tensor big({1000, 50000}, DType::Float32);  // 200 MB
    FAIL() << "allocated past the cgroup's limit";
  } catch (const HostMemoryExhausted& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.requested, 200000000u);
    EXPECT_EQ(e.available, 100 * kMiB);
    EXPECT_NE(what.find("float32 tensor of shape (1000, 50000) needs 190.7 MiB (200000000 bytes)"), std::string::npos)
        << what;
    EXPECT_NE(what.find("100.0 MiB available"), std::string::npos) << what;
    EXPECT_NE(what.find("memory.max 1.0 GiB"), std::string::npos) << what;
  }
  // Below kLargeHostAllocation nothing is read: even with nothing left a 60 MiB tensor is made.
  write(cg("/job/memory.current"), std::to_string(2 * kGiB));
  Tensor small({15, 1 << 20}, DType::Float32);
  EXPECT_EQ(small.nbytes(), 60 * kMiB);
  // The budget comes back with the memory.
  write(cg("/job/memory.current"), std::to_string(100 * kMiB));
  Tensor fits({1000, 50000}, DType::Float32);
  EXPECT_EQ(fits.nbytes(), 200000000u);
}

TEST(ThreadBounds, TeamsAndIntraOpThreadsAreBoundedBeforeAnyThreadStarts) {
  const int limit = cpu::max_threads();
  EXPECT_GE(limit, 256);
  EXPECT_GE(limit, 4 * static_cast<int>(std::thread::hardware_concurrency()));
  try {
    cpu::ThreadTeam team(100000);
    FAIL() << "a team of 100000 threads was made";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[threads] a team of 100000 members exceeds the limit of " +
                                         std::to_string(limit)),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(cpu::ThreadTeam(-1), std::invalid_argument);  // not a length_error from sizing it
  const int before = cpu::intra_op_threads();
  EXPECT_THROW(cpu::set_intra_op_threads(limit + 1), std::invalid_argument);
  EXPECT_EQ(cpu::intra_op_threads(), before);
  cpu::set_intra_op_threads(limit);
  EXPECT_EQ(cpu::intra_op_threads(), limit);
  cpu::set_intra_op_threads(before);
}

}  // namespace
}  // namespace mdtrain
