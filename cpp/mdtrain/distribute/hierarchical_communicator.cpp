#include "mdtrain/distribute/hierarchical_communicator.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>

#include "mdtrain/core/dtype_dispatch.h"
#include "mdtrain/core/errors.h"

namespace mdtrain {

HierarchicalCommunicator::HierarchicalCommunicator(std::unique_ptr<Communicator> local,
                                                   std::unique_ptr<Communicator> cross, int num_workers,
                                                   int worker_index)
    : local_(std::move(local)), cross_(std::move(cross)), workers_(num_workers), worker_(worker_index) {
  MDTRAIN_CHECK(local_ != nullptr, std::invalid_argument, "[hierarchical] a local communicator is required");
  MDTRAIN_CHECK(num_workers >= 1 && worker_index >= 0 && worker_index < num_workers, std::invalid_argument,
                "[hierarchical] worker index ", worker_index, " out of range for ", num_workers, " workers");
  if (leader()) {
    MDTRAIN_CHECK(cross_ != nullptr, std::invalid_argument,
                  "[hierarchical] local rank 0 (the leader) needs the cross-worker communicator");
    MDTRAIN_CHECK(cross_->size() == num_workers && cross_->rank() == worker_index, std::invalid_argument,
                  "[hierarchical] the cross-worker communicator is rank ", cross_->rank(), " of ", cross_->size(),
                  ", expected worker ", worker_index, " of ", num_workers);
  } else {
    MDTRAIN_CHECK(cross_ == nullptr, std::invalid_argument,
                  "[hierarchical] only local rank 0 talks to other workers (local rank ", local_->rank(),
                  " was given a cross-worker communicator)");
  }
  on_timeout_changed(timeout());
}

std::string HierarchicalCommunicator::backend() const { return "hierarchical"; }

void HierarchicalCommunicator::on_timeout_changed(double seconds) {
  local_->set_timeout(seconds);
  if (cross_) cross_->set_timeout(seconds);
}

void HierarchicalCommunicator::abort(const std::string& reason) {
  // Release this worker's other ranks, and, through the leader's link, the other workers.
  if (cross_) cross_->abort(reason);
  local_->abort(reason);
}

template <class F>
void HierarchicalCommunicator::guarded(const char* op, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    // A failure at one level must release the ranks waiting at the other: the leader passes it
    // across workers, every rank passes it inside its worker.
    const std::string reason = std::string("worker ") + std::to_string(worker_) + ", local rank " +
                               std::to_string(local_->rank()) + ": " + e.what();
    if (cross_) cross_->abort(reason);
    local_->abort(reason);
    if (dynamic_cast<const TimeoutError*>(&e))
      throw TimeoutError("[hierarchical] " + std::string(op) + " on " + reason);
    if (dynamic_cast<const std::invalid_argument*>(&e)) throw;
    throw std::runtime_error("[hierarchical] " + std::string(op) + " on " + reason);
  }
}

void HierarchicalCommunicator::divide_by_size(void* data, std::size_t count, DType dtype) const {
  const double n = static_cast<double>(size());
  dispatch_floating(dtype, "hierarchical", [&](auto tag) {
    using T = decltype(tag);
    auto* p = static_cast<T*>(data);
    for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / n);
  });
}

void HierarchicalCommunicator::all_reduce_levels(void* data, std::size_t count, DType dtype, ReduceOp op) {
  const ReduceOp level = level_op(op);
  if (local_->size() > 1) local_->reduce(data, count, dtype, level, 0);
  if (cross_) cross_->all_reduce(data, count, dtype, level);
  if (local_->size() > 1) local_->broadcast(data, count, dtype, 0);
  if (op == ReduceOp::Mean) divide_by_size(data, count, dtype);
}

void HierarchicalCommunicator::do_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) {
  guarded("all_reduce", [&] { all_reduce_levels(data, count, dtype, op); });
}

void HierarchicalCommunicator::do_reduce(void* data, std::size_t count, DType dtype, ReduceOp op, int root) {
  guarded("reduce", [&] {
    // Reduced as an all-reduce on a copy, so that non-root ranks keep their data (the contract).
    const std::size_t bytes = count * size_of(dtype);
    scratch_.resize(bytes);
    if (bytes) std::memcpy(scratch_.data(), data, bytes);
    all_reduce_levels(scratch_.data(), count, dtype, op);
    if (rank() == root && bytes) std::memcpy(data, scratch_.data(), bytes);
  });
}

void HierarchicalCommunicator::do_broadcast(void* data, std::size_t count, DType dtype, int root) {
  guarded("broadcast", [&] {
    const int L = local_->size();
    const int root_worker = root / L, root_local = root % L;
    // Inside the root's worker, bring the data to the leader first (other workers' local groups
    // are separate, so only this one takes that step).
    if (worker_ == root_worker && root_local != 0) local_->broadcast(data, count, dtype, root_local);
    if (cross_) cross_->broadcast(data, count, dtype, root_worker);
    if (L > 1) local_->broadcast(data, count, dtype, 0);
  });
}

void HierarchicalCommunicator::do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype) {
  guarded("all_gather", [&] { all_gather_levels(send, recv, count_per_rank, dtype); });
}

void HierarchicalCommunicator::all_gather_levels(const void* send, void* recv, std::size_t count_per_rank,
                                                 DType dtype) {
  const std::size_t elem = size_of(dtype);
  const std::size_t worker_count = count_per_rank * static_cast<std::size_t>(local_->size());
  char* mine = static_cast<char*>(recv) + static_cast<std::size_t>(worker_) * worker_count * elem;
  // This worker's ranks land in its contiguous block of recv (in place when send is already there).
  local_->all_gather(send, mine, count_per_rank, dtype);
  if (cross_) cross_->all_gather(mine, recv, worker_count, dtype);
  if (local_->size() > 1) local_->broadcast(recv, worker_count * static_cast<std::size_t>(workers_), dtype, 0);
}

void HierarchicalCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype,
                                                 ReduceOp op) {
  guarded("reduce_scatter", [&] {
    const std::size_t elem = size_of(dtype);
    const std::size_t total = count_per_rank * static_cast<std::size_t>(size());
    const std::size_t worker_count = count_per_rank * static_cast<std::size_t>(local_->size());
    const ReduceOp level = level_op(op);
    scratch_.resize(total * elem);
    if (total) std::memcpy(scratch_.data(), send, total * elem);
    if (local_->size() > 1) local_->reduce(scratch_.data(), total, dtype, level, 0);
    char* block = scratch_.data() + static_cast<std::size_t>(worker_) * worker_count * elem;
    // The leader's block of the cross reduce-scatter is this worker's L ranks' blocks.
    if (cross_) cross_->reduce_scatter(scratch_.data(), block, worker_count, dtype, level);
    if (local_->size() > 1) local_->broadcast(block, worker_count, dtype, 0);
    if (count_per_rank)
      std::memmove(recv, block + static_cast<std::size_t>(local_->rank()) * count_per_rank * elem,
                   count_per_rank * elem);
    if (op == ReduceOp::Mean) divide_by_size(recv, count_per_rank, dtype);
  });
}

void HierarchicalCommunicator::do_barrier() {
  guarded("barrier", [&] {
    if (local_->size() > 1) local_->barrier();
    if (cross_) cross_->barrier();
    if (local_->size() > 1) local_->barrier();
  });
}

namespace {

// One new group of a split, as every rank sees it from the gathered (color, key) table.
struct SplitGroup {
  std::vector<int> members;  // global ranks in new-rank order: (key, global rank)
  std::vector<int> workers;  // the workers it spans, in the order their ranks come
  int per_worker = 0;        // its ranks in each of those workers
};

}  // namespace

std::unique_ptr<Communicator> HierarchicalCommunicator::do_split(int color, int key) {
  const int n = size(), L = local_->size();
  std::vector<std::int64_t> table(2 * static_cast<std::size_t>(n));
  const std::int64_t mine[2] = {color, key};
  guarded("split", [&] { all_gather_levels(mine, table.data(), 2, DType::Int64); });

  // Every rank sees the same table, so every rank checks every group and all agree.
  std::map<std::int64_t, SplitGroup> groups;
  for (int r = 0; r < n; ++r) {
    if (table[2 * static_cast<std::size_t>(r)] >= 0)
      groups[table[2 * static_cast<std::size_t>(r)]].members.push_back(r);
  }
  for (auto& [c, g] : groups) {
    std::stable_sort(g.members.begin(), g.members.end(), [&](int a, int b) {
      return table[2 * static_cast<std::size_t>(a) + 1] < table[2 * static_cast<std::size_t>(b) + 1];
    });
    std::vector<int> run_lengths;  // ranks of each run of one worker in the new order
    for (int m : g.members) {
      if (g.workers.empty() || g.workers.back() != m / L) {
        g.workers.push_back(m / L);
        run_lengths.push_back(0);
      }
      ++run_lengths.back();
    }
    g.per_worker = run_lengths.front();
    std::vector<int> seen = g.workers;
    std::sort(seen.begin(), seen.end());
    const bool together = std::adjacent_find(seen.begin(), seen.end()) == seen.end();
    const bool even = std::all_of(run_lengths.begin(), run_lengths.end(), [&](int k) { return k == g.per_worker; });
    MDTRAIN_CHECK(together && even, std::invalid_argument, "[hierarchical] split: the ranks of color ", c,
                  together ? " are spread unevenly over the workers"
                           : " would take turns between workers in the new order (key)",
                  "; a hierarchical group needs as many ranks in every worker it spans, each worker's together");
  }

  std::unique_ptr<Communicator> out;
  guarded("split", [&] {
    // Inside the worker, ordered by (key, local rank): the new order restricted to this worker.
    std::unique_ptr<Communicator> local_child = local_->split(color, key);
    // The cross groups of the colors that span workers, made by the leaders (one split per color,
    // in color order, the same on every worker) and handed to each color's first rank in this
    // worker. The ranks of a worker share one process, so a pointer crosses the local group as is.
    const bool any_cross =
        std::any_of(groups.begin(), groups.end(), [](const auto& cg) { return cg.second.workers.size() > 1; });
    std::unique_ptr<Communicator> cross_child;
    if (any_cross) {
      std::vector<std::uint64_t> handoff(static_cast<std::size_t>(L), 0);
      if (cross_) {
        for (auto& [c, g] : groups) {
          if (g.workers.size() < 2) continue;
          const auto at = std::find(g.workers.begin(), g.workers.end(), worker_);
          const bool here = at != g.workers.end();
          auto comm = cross_->split(here ? 0 : -1, static_cast<int>(at - g.workers.begin()));
          if (!here) continue;
          const int first = *std::find_if(g.members.begin(), g.members.end(), [&](int m) { return m / L == worker_; });
          // Released before the hand-over: if it fails, the group is aborted and the child leaks
          // rather than being freed by two owners.
          handoff[static_cast<std::size_t>(first % L)] = reinterpret_cast<std::uintptr_t>(comm.release());
        }
      }
      if (L > 1) local_->broadcast(handoff.data(), handoff.size(), DType::Int64, 0);
      cross_child.reset(reinterpret_cast<Communicator*>(
          static_cast<std::uintptr_t>(handoff[static_cast<std::size_t>(local_->rank())])));
    }
    if (color < 0) return;
    const SplitGroup& g = groups.at(color);
    if (g.workers.size() == 1) {
      out = std::move(local_child);
    } else if (g.per_worker == 1) {
      out = std::move(cross_child);
    } else {
      const int index = static_cast<int>(std::find(g.workers.begin(), g.workers.end(), worker_) - g.workers.begin());
      out = std::make_unique<HierarchicalCommunicator>(std::move(local_child), std::move(cross_child),
                                                       static_cast<int>(g.workers.size()), index);
    }
  });
  return out;
}

}  // namespace mdtrain
