#pragma once
// Where each variable's rows live across parameter servers. Variables are split along axis 0
// into near-equal shards (TF's partitioned variables: the first rows % n shards get one row more)
// and the shards are placed on servers round-robin, continuing from where the previous variable
// stopped (as TF's ParameterServerStrategy places variables), so small unsplit variables spread
// over the servers too.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mdtrain/core/dtype.h"
#include "mdtrain/core/shape.h"

namespace mdtrain {

struct PsVariableSpec {
  std::string name;
  Shape shape;  // logical (unsharded); at least 1-D
  DType dtype = DType::Float32;
};

struct RowRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

struct ShardLayout {
  int num_servers = 0;
  std::vector<PsVariableSpec> variables;
  // rows[v][s]: the rows of variable v held by server s (empty when it holds none).
  std::vector<std::vector<RowRange>> rows;

  // Splits variable v into shards[v] shards (1 <= shards[v] <= rows) placed round-robin.
  // Throws std::invalid_argument("[ps] ...") on bad counts or shapes.
  static ShardLayout make(int num_servers, std::vector<PsVariableSpec> variables, const std::vector<int>& shards);
  // Elements in one row of variable v (the product of the dims after the first).
  std::int64_t row_elements(std::size_t v) const;
  // Throws std::invalid_argument naming the problem unless every variable's ranges tile [0, rows).
  void validate() const;
};

// TF's partitioners (tf.distribute.experimental.partitioners): the number of axis-0 shards of a
// variable of this shape and dtype.
// FixedShardsPartitioner(num_shards): min(num_shards, rows).
int fixed_shards(int num_shards, const Shape& shape);
// MinSizePartitioner(min_shard_bytes=256 KiB, max_shards=1): as many shards as keep each at least
// min_shard_bytes, max(1, min(rows, max_shards, ceil(bytes / min_shard_bytes))).
int min_size_shards(const Shape& shape, DType dtype, std::int64_t min_shard_bytes = 256 << 10, int max_shards = 1);
// MaxSizePartitioner(max_shard_bytes, max_shards=None): the fewest shards of at most
// max_shard_bytes each (whole rows, at least one row per shard), capped at max_shards.
int max_size_shards(const Shape& shape, DType dtype, std::int64_t max_shard_bytes,
                    std::optional<int> max_shards = std::nullopt);

}  // namespace mdtrain
