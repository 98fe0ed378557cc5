#include "mdtrain/data/prefetcher.h"

#include <string>
#include <utility>

#include "mdtrain/core/errors.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain::data {

namespace {
std::vector<Tensor> checked_sources(std::vector<Tensor> sources) {
  MDTRAIN_CHECK(!sources.empty(), std::invalid_argument, "[data] Prefetcher needs at least one source tensor");
  for (std::size_t k = 0; k < sources.size(); ++k) {
    const Tensor& t = sources[k];
    MDTRAIN_CHECK(t.defined() && t.ndim() >= 1, std::invalid_argument, "[data] Prefetcher source ", k,
                  " must be a tensor of rank >= 1");
    MDTRAIN_CHECK(t.device().is_cpu(), std::invalid_argument, "[data] Prefetcher source ", k, " is on ",
                  t.device().to_string(), "; sources must be in host memory");
    MDTRAIN_CHECK(t.dim(0) == sources[0].dim(0), std::invalid_argument,
                  "[data] Prefetcher sources must share the first dimension, got ", to_string(sources[0].shape()),
                  " and ", to_string(t.shape()), " (source ", k, ")");
  }
  return sources;
}

int checked_depth(int depth) {
  MDTRAIN_CHECK(depth >= 1, std::invalid_argument, "[data] Prefetcher depth must be >= 1, got ", depth);
  return depth;
}
}  // namespace

Prefetcher::Prefetcher(std::vector<Tensor> sources, int depth)
    : sources_(checked_sources(std::move(sources))), depth_(checked_depth(depth)) {
  thread_ = std::thread([this] { run(); });
}

Prefetcher::Prefetcher(std::vector<Tensor> sources, std::vector<std::int64_t> indices,
                       std::vector<std::int64_t> offsets, int depth)
    : Prefetcher(std::move(sources), depth) {
  // If add() throws, the delegated-to constructor has finished, so the destructor joins the thread.
  add(std::move(indices), std::move(offsets));
  close();
}

Prefetcher::~Prefetcher() { cancel(); }

void Prefetcher::add(std::vector<std::int64_t> indices, std::vector<std::int64_t> offsets) {
  const auto count = static_cast<std::int64_t>(indices.size());
  MDTRAIN_CHECK(!offsets.empty() && offsets.front() == 0 && offsets.back() == count, std::invalid_argument,
                "[data] Prefetcher::add: offsets must start at 0 and end at the number of indices (", count, "), got ",
                offsets.empty() ? std::string("an empty array")
                                : cat(offsets.size(), " offsets from ", offsets.front(), " to ", offsets.back()));
  for (std::size_t b = 1; b < offsets.size(); ++b)
    MDTRAIN_CHECK(offsets[b] >= offsets[b - 1], std::invalid_argument,
                  "[data] Prefetcher::add: offsets must not decrease, got ", offsets[b - 1], " then ", offsets[b],
                  " at batch ", b - 1);
  const auto batches = static_cast<std::int64_t>(offsets.size()) - 1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    MDTRAIN_CHECK(!closed_, std::logic_error, "[data] Prefetcher::add after close()");
    if (cancelled_ || batches == 0) return;
    work_.push_back(std::make_shared<const Work>(Work{std::move(indices), std::move(offsets)}));
    added_ += batches;
  }
  work_ready_.notify_one();
}

void Prefetcher::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  work_ready_.notify_one();
}

std::int64_t Prefetcher::unconsumed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return added_ - returned_;
}

std::size_t Prefetcher::ready() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

std::optional<std::vector<Tensor>> Prefetcher::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (cancelled_) return std::nullopt;
  // With one consumer feeding the work, nothing can arrive while it waits here: fail loudly
  // rather than hang.
  MDTRAIN_CHECK(closed_ || returned_ < added_ || error_, std::logic_error,
                "[data] Prefetcher::next would wait forever: all ", added_,
                " added batches were returned and close() was not called");
  batch_ready_.wait(lock, [this] { return !queue_.empty() || producer_done_ || cancelled_; });
  if (!queue_.empty()) {
    std::vector<Tensor> batch = std::move(queue_.front());
    queue_.pop_front();
    ++returned_;
    lock.unlock();
    work_ready_.notify_one();  // a slot is free
    return batch;
  }
  if (cancelled_) return std::nullopt;
  if (error_) std::rethrow_exception(error_);
  return std::nullopt;
}

void Prefetcher::cancel() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_ = true;
  }
  work_ready_.notify_all();
  batch_ready_.notify_all();
  std::lock_guard<std::mutex> join_lock(join_mutex_);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

std::vector<Tensor> Prefetcher::gather(const std::int64_t* rows, std::int64_t count) const {
  std::vector<Tensor> out;
  out.reserve(sources_.size());
  for (const Tensor& source : sources_) {
    Shape shape = source.shape();
    shape[0] = count;
    Tensor batch(std::move(shape), source.dtype(), source.device());
    ops::gather_rows(source, rows, count, batch);
    out.push_back(std::move(batch));
  }
  return out;
}

void Prefetcher::run() {
  std::exception_ptr error;
  try {
    for (;;) {
      std::shared_ptr<const Work> work;
      std::size_t b = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_ready_.wait(lock, [this] {
          return cancelled_ || (closed_ && work_.empty()) ||
                 (!work_.empty() && queue_.size() < static_cast<std::size_t>(depth_));
        });
        if (cancelled_ || work_.empty()) break;
        work = work_.front();
        b = next_batch_in_front_++;
        if (next_batch_in_front_ + 1 == work->offsets.size()) {
          work_.pop_front();
          next_batch_in_front_ = 0;
        }
      }
      // Gathered without the lock: the consumer pops and adds meanwhile.
      const std::int64_t first = work->offsets[b];
      std::vector<Tensor> batch = gather(work->indices.data() + first, work->offsets[b + 1] - first);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (cancelled_) break;
        queue_.push_back(std::move(batch));
      }
      batch_ready_.notify_one();
    }
  } catch (...) {
    error = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = error;
    producer_done_ = true;
  }
  batch_ready_.notify_all();
}

}  // namespace mdtrain::data
