#include "mdtrain/core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace mdtrain {
namespace {

class AtomicFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mdtrain_atomic_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const auto& name : entries()) ::unlink((dir_ + "/" + name).c_str());
    ::rmdir((dir_ + "/sub").c_str());
    ::rmdir(dir_.c_str());
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(dir_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
      }
      ::closedir(d);
    }
    return names;
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

TEST_F(AtomicFile, WritesAndReadsBack) {
  std::string p = path("a.bin");
  std::string contents("hello\0world", 11);
  write_file_atomically(p, contents);
  EXPECT_EQ(read_file(p), contents);
  EXPECT_EQ(entries(), std::vector<std::string>{"a.bin"});
}

TEST_F(AtomicFile, ReplacesAnExistingFile) {
  std::string p = path("a.txt");
  write_file_atomically(p, std::string(100000, 'x'));
  write_file_atomically(p, "short");
  EXPECT_EQ(read_file(p), "short");
  write_file_atomically(p, "");
  EXPECT_EQ(read_file(p), "");
  EXPECT_EQ(entries().size(), 1u);
}

TEST_F(AtomicFile, MixedSmallAndLargeWritesKeepTheirOrder) {
  // Small writes go through the buffer, blocks past its size bypass it; order must hold.
  std::string expected;
  write_file_atomically(path("m"), [&](std::ostream& out) {
    for (int i = 0; i < 50; ++i) {
      std::string piece(static_cast<std::size_t>(i % 3 == 0 ? 70000 + i : 13 + i), static_cast<char>('a' + i % 26));
      out << i << ':';
      out.write(piece.data(), static_cast<std::streamsize>(piece.size()));
      expected += std::to_string(i) + ":" + piece;
    }
  });
  EXPECT_EQ(read_file(path("m")), expected);
}

TEST_F(AtomicFile, ExceptionMidWriteKeepsTheOldFileAndLeavesNoTemporary) {
  std::string p = path("model.bin");
  write_file_atomically(p, "old contents");
  struct Boom {};
  EXPECT_THROW(write_file_atomically(p,
                                     [](std::ostream& out) {
                                       out << std::string(300000, 'n');  // past the buffer: on disk
                                       throw Boom{};
                                     }),
               Boom);
  EXPECT_EQ(read_file(p), "old contents");
  EXPECT_EQ(entries(), std::vector<std::string>{"model.bin"});
}

TEST_F(AtomicFile, ExceptionOnFirstWriteCreatesNothing) {
  std::string p = path("new.bin");
  EXPECT_THROW(write_file_atomically(p, [](std::ostream&) { throw std::invalid_argument("bad"); }),
               std::invalid_argument);
  EXPECT_TRUE(entries().empty());
}

TEST_F(AtomicFile, DiskErrorsAreReportedWithTheReasonAndCleanedUp) {
  // A file size limit makes write() fail with EFBIG, as a full disk would with ENOSPC.
  std::string p = path("big.bin");
  write_file_atomically(p, "old");
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit limited = saved;
  limited.rlim_cur = 100000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string message;
  try {
    write_file_atomically(p, std::string(200000, 'z'));
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(message, "[io] cannot write '" + p + "': File too large");
  EXPECT_EQ(read_file(p), "old");
  EXPECT_EQ(entries(), std::vector<std::string>{"big.bin"});
}

TEST_F(AtomicFile, MissingDirectoryIsAnIoError) {
  std::string p = path("no/such/dir/f");
  try {
    write_file_atomically(p, "x");
    FAIL() << "expected runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "[io] cannot write '" + p + "': No such file or directory");
  }
}

TEST_F(AtomicFile, TargetThatIsADirectoryFailsAndLeavesNoTemporary) {
  ASSERT_EQ(::mkdir(path("sub").c_str(), 0755), 0);
  EXPECT_THROW(write_file_atomically(path("sub"), "x"), std::runtime_error);
  EXPECT_EQ(entries(), std::vector<std::string>{"sub"});
}

TEST_F(AtomicFile, ReadingAMissingFileNamesIt) {
  std::string p = path("missing");
  try {
    read_file(p);
    FAIL() << "expected runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "[io] cannot read '" + p + "': No such file or directory");
  }
}

TEST_F(AtomicFile, ConcurrentWritersNeverInterleave) {
  // Each thread writes a file made of its own letter; the survivor must be one whole file.
  std::string p = path("shared");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) write_file_atomically(p, std::string(100000, static_cast<char>('a' + t)));
    });
  for (auto& th : threads) th.join();
  std::string result = read_file(p);
  ASSERT_EQ(result.size(), 100000u);
  EXPECT_EQ(result.find_first_not_of(result[0]), std::string::npos);
  EXPECT_EQ(entries(), std::vector<std::string>{"shared"});
}

TEST_F(AtomicFile, RelativePathsUseTheCurrentDirectory) {
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(::chdir(dir_.c_str()), 0);
  struct RestoreCwd {
    const char* dir;
    ~RestoreCwd() { EXPECT_EQ(::chdir(dir), 0); }
  } restore{cwd};
  write_file_atomically("rel.txt", "r");
  std::string back = read_file("rel.txt");
  EXPECT_EQ(back, "r");
  EXPECT_EQ(entries(), std::vector<std::string>{"rel.txt"});
}

// ---- readers never block on, or read forever from, something that is not a regular file ----

// Runs read_file(p) on another thread. If it is still blocked after 20 s (the bug: open() of a
// FIFO waits for a writer), the FIFO is opened for writing once, which releases it, and the test
// fails instead of hanging.
std::string read_error_with_watchdog(const std::string& p) {
  auto result = std::async(std::launch::async, [p]() -> std::string {
    try {
      read_file(p);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "read_file returned normally";
  });
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "read_file('" << p << "') blocked for 20 s";
    int fd = ::open(p.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  return result.get();
}

TEST_F(AtomicFile, ReadingAFifoIsRefusedWithoutBlocking) {
  std::string p = path("pipe");
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  EXPECT_EQ(read_error_with_watchdog(p), "[io] cannot read '" + p + "': it is a named pipe (FIFO), not a regular file");
}

TEST_F(AtomicFile, ReadingADeviceOrADirectoryIsRefused) {
  // /dev/zero never ends: reading it "wholly" would fill memory.
  EXPECT_EQ(read_error_with_watchdog("/dev/zero"),
            "[io] cannot read '/dev/zero': it is a character device, not a regular file");
  EXPECT_EQ(read_error_with_watchdog(dir_), "[io] cannot read '" + dir_ + "': it is a directory, not a regular file");
}

TEST_F(AtomicFile, OpenRegularFileReportsSizeAndMissingFiles) {
  write_file_atomically(path("f"), std::string(1234, 'x'));
  std::uint64_t size = 0;
  std::string why;
  bool missing = true;
  int fd = open_regular_file(path("f"), size, why, missing);
  ASSERT_GE(fd, 0) << why;
  EXPECT_EQ(size, 1234u);
  EXPECT_FALSE(missing);
  EXPECT_EQ(::fcntl(fd, F_GETFL) & O_NONBLOCK, 0) << "the descriptor must be blocking again";
  ::close(fd);
  EXPECT_EQ(open_regular_file(path("nope"), size, why, missing), -1);
  EXPECT_TRUE(missing);
  EXPECT_EQ(why, "No such file or directory");
}

// ---- temporaries left by writers that died mid-write ------------------------------------------

// The pid of a process that has exited and been reaped (so no process has it, barring reuse).
pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

void plant(const std::string& p, const std::string& contents = "left behind") {
  std::ofstream out(p, std::ios::binary);
  out << contents;
}

bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST_F(AtomicFile, TemporariesOfDeadWritersAreRemovedBeforeWriting) {
  pid_t dead = dead_pid();
  std::string stale = "backup.tmp." + std::to_string(dead) + ".0";
  std::string stale_own_pid =
      "backup.tmp." + std::to_string(::getpid()) + ".999999";  // an earlier process with our pid
  plant(path(stale));
  plant(path(stale_own_pid));
  write_file_atomically(path("backup"), "new");
  EXPECT_EQ(entries(), std::vector<std::string>{"backup"});
  EXPECT_EQ(read_file(path("backup")), "new");
}

TEST_F(AtomicFile, TemporariesOfLiveWritersAndOtherFilesAreKept) {
  int gate[2];
  ASSERT_EQ(::pipe(gate), 0);
  pid_t live = ::fork();
  ASSERT_GE(live, 0);
  if (live == 0) {  // a live writer: waits until the parent closes the pipe
    char c;
    ::close(gate[1]);
    while (::read(gate[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::_exit(0);
  }
  ::close(gate[0]);
  pid_t dead = dead_pid();
  std::vector<std::string> kept = {
      "backup.tmp." + std::to_string(live) + ".3",       // live writer
      "other.tmp." + std::to_string(dead) + ".0",        // another target
      "backup.tmp." + std::to_string(dead) + ".0.keep",  // not the writers' spelling
      "backup.tmp.x" + std::to_string(dead) + ".0",
      "backup.tmp." + std::to_string(dead) + ".",
      "backup.tmp.0" + std::to_string(dead) + ".1",
      "backup.tmp.0.0",  // pid 0 would mean "my process group"
  };
  for (const auto& name : kept) plant(path(name));
  write_file_atomically(path("backup"), "new");
  std::vector<std::string> names = entries();
  for (const auto& name : kept) EXPECT_TRUE(has(names, name)) << name;
  EXPECT_EQ(names.size(), kept.size() + 1);
  ::close(gate[1]);
  int status = 0;
  ::waitpid(live, &status, 0);
}

TEST_F(AtomicFile, AWriterKilledMidWriteLeaksNothingOnceTheNextWriteRuns) {
  const std::string p = path("backup");
  write_file_atomically(p, "epoch 1");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t writer = ::fork();
  ASSERT_GE(writer, 0);
  if (writer == 0) {  // writes half a backup, says so, then waits to be killed
    ::close(ready[0]);
    try {
      write_file_atomically(p, [&](std::ostream& out) {
        out << std::string(1 << 20, 'b');
        out.flush();
        char c = 'w';
        if (::write(ready[1], &c, 1) != 1) ::_exit(2);
        for (;;) ::pause();
      });
    } catch (...) {
    }
    ::_exit(3);
  }
  ::close(ready[1]);
  pollfd wait_ready{ready[0], POLLIN, 0};
  bool wrote = ::poll(&wait_ready, 1, 30000) == 1;  // watchdog: fail rather than hang
  ::kill(writer, SIGKILL);
  int status = 0;
  ::waitpid(writer, &status, 0);
  ::close(ready[0]);
  ASSERT_TRUE(wrote) << "the writer never reached the middle of its write";
  const std::string leaked = "backup.tmp." + std::to_string(writer) + ".";
  std::vector<std::string> names = entries();
  ASSERT_EQ(names.size(), 2u);
  EXPECT_TRUE(has(names, "backup"));
  EXPECT_TRUE(std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(leaked, 0) == 0; }));
  EXPECT_EQ(read_file(p), "epoch 1");

  write_file_atomically(p, "epoch 2");
  EXPECT_EQ(entries(), std::vector<std::string>{"backup"});
  EXPECT_EQ(read_file(p), "epoch 2");
}

}  // namespace
}  // namespace mdtrain
