// Shard layouts and TF's three partitioners (tf.distribute.experimental.partitioners).
#include <gtest/gtest.h>

#include "mdtrain/strategy/parameter_server/shard_layout.h"

namespace mdtrain {
namespace {

TEST(Partitioners, FixedShardsIsCappedByRows) {
  EXPECT_EQ(fixed_shards(3, {10, 4}), 3);
  EXPECT_EQ(fixed_shards(5, {2, 3}), 2);
  EXPECT_EQ(fixed_shards(1, {7}), 1);
  EXPECT_THROW(fixed_shards(0, {7}), std::invalid_argument);
}

TEST(Partitioners, MinSizeFollowsTheDocumentedExamples) {
  // TF docs: MinSizePartitioner(min_shard_bytes=4, max_shards=2)(TensorShape([6, 1]), float32) == [2, 1]
  EXPECT_EQ(min_size_shards({6, 1}, DType::Float32, 4, 2), 2);
  EXPECT_EQ(min_size_shards({6, 1}, DType::Float32, 4, 10), 6);  // ... max_shards=10 -> [6, 1]
  // defaults (256 KiB, max_shards=1): one shard whatever the size
  EXPECT_EQ(min_size_shards({1000, 100}, DType::Float32), 1);
  // 400000 bytes / 262144 -> ceil(1.53) = 2 shards when allowed
  EXPECT_EQ(min_size_shards({1000, 100}, DType::Float32, 256 << 10, 4), 2);
  EXPECT_EQ(min_size_shards({1000, 100}, DType::Float64, 256 << 10, 4), 4);  // 800000 B -> ceil(3.05) = 4
  // never more shards than rows, never fewer than one
  EXPECT_EQ(min_size_shards({3, 1000}, DType::Float32, 4, 100), 3);
  EXPECT_EQ(min_size_shards({5, 1}, DType::Float32, 1 << 20, 8), 1);
}

TEST(Partitioners, MaxSizeFollowsTheDocumentedExamples) {
  // TF docs: MaxSizePartitioner(max_shard_bytes=4, max_shards=2)(TensorShape([6, 1]), float32) == [2, 1]
  EXPECT_EQ(max_size_shards({6, 1}, DType::Float32, 4, 2), 2);
  // ... max_shards=10 -> [6, 1]; without max_shards -> one row of 4 bytes per shard
  EXPECT_EQ(max_size_shards({6, 1}, DType::Float32, 4, 10), 6);
  EXPECT_EQ(max_size_shards({6, 1}, DType::Float32, 4), 6);
  EXPECT_EQ(max_size_shards({6, 1}, DType::Float32, 1024), 1);  // max_shard_bytes=1024 -> [1, 1]
  // 16-byte rows, 40-byte shards: 2 rows per shard -> 5 shards
  EXPECT_EQ(max_size_shards({10, 4}, DType::Float32, 40), 5);
  // a row larger than the limit still makes one shard per row
  EXPECT_EQ(max_size_shards({10, 4}, DType::Float32, 8), 10);
  EXPECT_EQ(max_size_shards({10, 4}, DType::Float32, 1 << 20), 1);
}

TEST(ShardLayout, RowsAreNearEqualAndPlacedRoundRobin) {
  const ShardLayout l =
      ShardLayout::make(3, {{"a", {5, 2}, DType::Float32}, {"b", {4}, DType::Float32}, {"c", {1, 3}, DType::Float32}},
                        {2, 3, 1});
  l.validate();
  // a: 2 shards of 3 and 2 rows on servers 0, 1
  EXPECT_EQ(l.rows[0][0].begin, 0);
  EXPECT_EQ(l.rows[0][0].end, 3);
  EXPECT_EQ(l.rows[0][1].begin, 3);
  EXPECT_EQ(l.rows[0][1].end, 5);
  EXPECT_TRUE(l.rows[0][2].empty());
  // b: continues at server 2: 2 rows there, then 1 on server 0 and 1 on server 1
  EXPECT_EQ(l.rows[1][2].begin, 0);
  EXPECT_EQ(l.rows[1][2].end, 2);
  EXPECT_EQ(l.rows[1][0].begin, 2);
  EXPECT_EQ(l.rows[1][1].end, 4);
  // c: its one shard lands on server 2
  EXPECT_EQ(l.rows[2][2].size(), 1);
  EXPECT_EQ(l.row_elements(0), 2);
  EXPECT_EQ(l.row_elements(1), 1);
}

TEST(ShardLayout, RefusesImpossibleSplitsAndBrokenTilings) {
  EXPECT_THROW(ShardLayout::make(2, {{"a", {1, 2}, DType::Float32}}, {2}), std::invalid_argument);
  EXPECT_THROW(ShardLayout::make(2, {{"a", {8}, DType::Float32}}, {3}), std::invalid_argument);
  EXPECT_THROW(ShardLayout::make(0, {}, {}), std::invalid_argument);
  ShardLayout l = ShardLayout::make(2, {{"a", {4}, DType::Float32}}, {2});
  l.rows[0][1].begin = 3;  // a gap at row 2
  try {
    l.validate();
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gap or overlap at row 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mdtrain
