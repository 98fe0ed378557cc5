#include "mdtrain/distribute/group_failure.h"

#include <stdexcept>

#include "mdtrain/core/errors.h"

namespace mdtrain {

bool GroupFailure::record(std::string reason, bool timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed_.load(std::memory_order_relaxed)) return false;
  reason_ = std::move(reason);
  timeout_ = timeout;
  failed_.store(true, std::memory_order_release);
  return true;
}

std::string GroupFailure::reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reason_;
}

bool GroupFailure::is_timeout() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timeout_;
}

void GroupFailure::rethrow(const std::string& backend, const std::string& call, int rank, bool entering,
                           const std::string& if_none) const {
  std::string reason;
  bool timeout;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reason = failed_.load(std::memory_order_relaxed) ? reason_ : if_none;
    timeout = timeout_;
  }
  const std::string msg =
      cat("[", backend, "] ", call, " on rank ", rank,
          entering ? " cannot run, the group failed earlier: " : " gave up, the group failed: ", reason);
  if (timeout) throw TimeoutError(msg);
  throw std::runtime_error(msg);
}

std::string timed_out(const std::string& call, int rank, double seconds) {
  return cat(call, " on rank ", rank, " timed out after ", seconds, " s");
}

std::string missing_ranks(const std::vector<MissingRank>& missing, const std::string& verb) {
  std::string who, details;
  for (std::size_t i = 0; i < missing.size(); ++i) {
    who += cat(i ? ", " : "", missing[i].rank);
    details += cat(i ? "; " : "", missing[i].details);
  }
  return cat(missing.size() == 1 ? "rank " : "ranks ", who, " ", verb, " (", details, ")");
}

std::string last_entered(int rank, CollectiveKind kind, unsigned long long seq) {
  if (seq == 0) return cat("rank ", rank, " has entered no collective");
  return cat("rank ", rank, " last entered ", name_of(kind), " #", seq);
}

}  // namespace mdtrain
