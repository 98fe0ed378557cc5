#include "mdtrain/core/atomic_file.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
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

}  // namespace
}  // namespace mdtrain
