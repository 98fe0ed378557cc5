#include "mdtrain/strategy/parameter_server/shard_layout.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "mdtrain/core/errors.h"

namespace mdtrain {

namespace {
void check_shape(const Shape& shape) {
  MDTRAIN_CHECK(!shape.empty(), std::invalid_argument, "[ps] a sharded variable needs at least one dimension");
  for (auto d : shape) MDTRAIN_CHECK(d >= 0, std::invalid_argument, "[ps] negative dimension ", d);
}
}  // namespace

ShardLayout ShardLayout::make(int num_servers, std::vector<PsVariableSpec> variables, const std::vector<int>& shards) {
  MDTRAIN_CHECK(num_servers >= 1, std::invalid_argument, "[ps] need at least one parameter server, got ", num_servers);
  MDTRAIN_CHECK(shards.size() == variables.size(), std::invalid_argument, "[ps] ", shards.size(), " shard counts for ",
                variables.size(), " variables");
  ShardLayout layout;
  layout.num_servers = num_servers;
  int next_server = 0;
  for (std::size_t v = 0; v < variables.size(); ++v) {
    check_shape(variables[v].shape);
    const std::int64_t rows = variables[v].shape[0];
    const int n = shards[v];
    MDTRAIN_CHECK(n >= 1 && (n <= rows || (rows == 0 && n == 1)), std::invalid_argument, "[ps] variable '",
                  variables[v].name, "' with ", rows, " rows cannot be cut into ", n, " shards");
    MDTRAIN_CHECK(n <= num_servers, std::invalid_argument, "[ps] variable '", variables[v].name, "' has ", n,
                  " shards but there are only ", num_servers, " servers");
    std::vector<RowRange> ranges(num_servers);
    std::int64_t begin = 0;
    for (int i = 0; i < n; ++i) {
      const std::int64_t size = rows / n + (i < rows % n ? 1 : 0);
      ranges[next_server] = {begin, begin + size};
      begin += size;
      next_server = (next_server + 1) % num_servers;
    }
    layout.rows.push_back(std::move(ranges));
  }
  layout.variables = std::move(variables);
  return layout;
}

std::int64_t ShardLayout::row_elements(std::size_t v) const {
  const Shape& s = variables.at(v).shape;
  return numel(Shape(s.begin() + 1, s.end()));
}

void ShardLayout::validate() const {
  MDTRAIN_CHECK(num_servers >= 1, std::invalid_argument, "[ps] layout has no servers");
  MDTRAIN_CHECK(rows.size() == variables.size(), std::invalid_argument, "[ps] layout has ", rows.size(),
                " row lists for ", variables.size(), " variables");
  for (std::size_t v = 0; v < variables.size(); ++v) {
    check_shape(variables[v].shape);
    MDTRAIN_CHECK(rows[v].size() == static_cast<std::size_t>(num_servers), std::invalid_argument, "[ps] variable '",
                  variables[v].name, "' has ranges for ", rows[v].size(), " servers, not ", num_servers);
    std::vector<RowRange> sorted;
    for (const auto& r : rows[v]) {
      MDTRAIN_CHECK(r.begin >= 0 && r.end >= r.begin, std::invalid_argument, "[ps] variable '", variables[v].name,
                    "' has a bad row range [", r.begin, ", ", r.end, ")");
      if (!r.empty()) sorted.push_back(r);
    }
    std::sort(sorted.begin(), sorted.end(), [](const RowRange& a, const RowRange& b) { return a.begin < b.begin; });
    std::int64_t at = 0;
    for (const auto& r : sorted) {
      MDTRAIN_CHECK(r.begin == at, std::invalid_argument, "[ps] variable '", variables[v].name,
                    "': shards do not tile its rows (gap or overlap at row ", at, ")");
      at = r.end;
    }
    MDTRAIN_CHECK(at == variables[v].shape[0], std::invalid_argument, "[ps] variable '", variables[v].name,
                  "': shards cover ", at, " of ", variables[v].shape[0], " rows");
  }
}

int fixed_shards(int num_shards, const Shape& shape) {
  check_shape(shape);
  MDTRAIN_CHECK(num_shards >= 1, std::invalid_argument, "[ps] num_shards must be >= 1, got ", num_shards);
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(num_shards, shape[0])));
}

int min_size_shards(const Shape& shape, DType dtype, std::int64_t min_shard_bytes, int max_shards) {
  check_shape(shape);
  MDTRAIN_CHECK(min_shard_bytes >= 1, std::invalid_argument, "[ps] min_shard_bytes must be >= 1, got ",
                min_shard_bytes);
  MDTRAIN_CHECK(max_shards >= 1, std::invalid_argument, "[ps] max_shards must be >= 1, got ", max_shards);
  // TF: partitions = total_bytes / min_slice_size; max(1, min(rows, max_partitions, ceil(partitions)))
  const double total = static_cast<double>(numel(shape)) * static_cast<double>(size_of(dtype));
  const auto wanted = static_cast<std::int64_t>(std::ceil(total / static_cast<double>(min_shard_bytes)));
  return static_cast<int>(
      std::max<std::int64_t>(1, std::min({shape[0], static_cast<std::int64_t>(max_shards), wanted})));
}

int max_size_shards(const Shape& shape, DType dtype, std::int64_t max_shard_bytes, std::optional<int> max_shards) {
  check_shape(shape);
  MDTRAIN_CHECK(max_shard_bytes >= 1, std::invalid_argument, "[ps] max_shard_bytes must be >= 1, got ",
                max_shard_bytes);
  MDTRAIN_CHECK(!max_shards || *max_shards >= 1, std::invalid_argument, "[ps] max_shards must be >= 1");
  // TF's variable_axis_size_partitioner: slices_per_shard = max(1, floor(max_shard_bytes / bytes_per_row));
  // shards = ceil(rows / slices_per_shard), capped by max_shards.
  const std::int64_t row_bytes =
      numel(Shape(shape.begin() + 1, shape.end())) * static_cast<std::int64_t>(size_of(dtype));
  const std::int64_t per_shard = row_bytes == 0 ? shape[0] : std::max<std::int64_t>(1, max_shard_bytes / row_bytes);
  std::int64_t shards = per_shard == 0 ? 1 : (shape[0] + per_shard - 1) / per_shard;
  if (max_shards) shards = std::min<std::int64_t>(shards, *max_shards);
  return static_cast<int>(std::max<std::int64_t>(1, shards));
}

}  // namespace mdtrain
