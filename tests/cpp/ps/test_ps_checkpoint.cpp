// Logical checkpoint pieces, without servers: assembling whole variables from pieces of any
// layout, and refusing overlapping, missing, inconsistent or damaged pieces.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "mdtrain/core/atomic_file.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/strategy/parameter_server/ps_checkpoint.h"

namespace mdtrain {
namespace {

class PsCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / ("mdtrain_ps_pieces_" + std::to_string(::getpid()) + "_" +
                                                      ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    whole_ = Tensor({5, 2}, DType::Float32);
    momentum_ = Tensor({5, 2}, DType::Float32);
    for (int i = 0; i < 10; ++i) {
      whole_.data<float>()[i] = static_cast<float>(i);
      momentum_.data<float>()[i] = static_cast<float>(100 + i);
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes server s of n holding rows [b, e) of the variable.
  void write_piece(int s, int n, std::int64_t b, std::int64_t e, std::int64_t iterations = 3) {
    PsPieceFile f;
    f.server = s;
    f.num_servers = n;
    f.version = 7;
    f.iterations = iterations;
    f.optimizer = "SGD";
    f.pieces.push_back({"w", {5, 2}, {b, e}, whole_.rows(b, e), {{"momentum", momentum_.rows(b, e)}}});
    write_ps_piece_file(dir_ + "/" + ps_piece_file_name(s, n), f);
  }

  void expect_refused(const std::string& fragment) {
    try {
      read_ps_checkpoint(dir_);
      ADD_FAILURE() << "read a checkpoint that should be refused for: " << fragment;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }

  std::string dir_;
  Tensor whole_, momentum_;
};

TEST_F(PsCheckpointTest, PiecesOfAnyLayoutAssembleTheWholeVariable) {
  write_piece(1, 3, 2, 4);  // out of order on purpose
  write_piece(0, 3, 0, 2);
  write_piece(2, 3, 4, 5);
  const PsCheckpoint ck = read_ps_checkpoint(dir_);
  EXPECT_EQ(ck.iterations, 3);
  EXPECT_EQ(ck.version, 7u);
  EXPECT_EQ(ck.optimizer, "SGD");
  const auto& w = ck.at("w");
  EXPECT_EQ(std::memcmp(w.value.raw(), whole_.raw(), whole_.nbytes()), 0);
  ASSERT_EQ(w.slots.size(), 1u);
  EXPECT_EQ(w.slots[0].first, "momentum");
  EXPECT_EQ(std::memcmp(w.slots[0].second.raw(), momentum_.raw(), momentum_.nbytes()), 0);
  EXPECT_THROW(ck.at("nope"), std::invalid_argument);
}

TEST_F(PsCheckpointTest, TwoCheckpointsInOneDirectoryAreRefusedAsOverlapping) {
  write_piece(0, 2, 0, 3);
  write_piece(1, 2, 3, 5);
  write_piece(0, 1, 0, 5);
  expect_refused("overlap");
}

TEST_F(PsCheckpointTest, AMissingServerFileIsNamedAsUncoveredRows) {
  write_piece(0, 2, 0, 3);
  expect_refused("cover 3 of the 5 rows of 'w'");
}

TEST_F(PsCheckpointTest, PiecesFromDifferentStepsAreRefused) {
  write_piece(0, 2, 0, 3, 3);
  write_piece(1, 2, 3, 5, 4);
  expect_refused("different states");
}

TEST_F(PsCheckpointTest, AnEmptyDirectoryAndDamagedFilesAreRefused) {
  expect_refused("no parameter server pieces");
  write_piece(0, 1, 0, 5);
  const std::string path = dir_ + "/" + ps_piece_file_name(0, 1);
  const std::string good = read_file(path);
  write_file_atomically(path, good.substr(0, good.size() - 4));
  expect_refused("truncated");
  write_file_atomically(path, good + "x");
  expect_refused("trailing bytes");
  write_file_atomically(path, "MDPSPIECE0\n" + good.substr(11));
  expect_refused("not a parameter server piece file");
  // a header claiming a huge variable must be refused before anything is allocated
  std::string huge = good;
  const auto at = huge.find("[5,2]");
  ASSERT_NE(at, std::string::npos);
  huge.replace(at, 5, "[5,9]");  // same length: the JSON stays parseable
  write_file_atomically(path, huge);
  expect_refused("truncated");
}

}  // namespace
}  // namespace mdtrain
