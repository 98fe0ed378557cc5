#pragma once
// Prefetcher: gathers batches of rows from source tensors on a background thread, so the next
// batches are ready while the consumer works on the current one (tf.data's prefetch for
// pipelines that are pure row gathers: shuffle / batch / repeat / take / skip / shard plans).
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "mdtrain/core/tensor.h"

namespace mdtrain::data {

// One consumer, one producer thread. The consumer hands over work with add() (any number of
// times) and says close() when no more will come; next() returns each batch's components in
// order — component k of a batch is sources[k] gathered at that batch's rows, a fresh tensor of
// shape (rows, sources[k].shape[1:]...) — then std::nullopt at the end.
//
// At most `depth` gathered batches wait in the queue; the producer sleeps while it is full.
// An error in the producer (a row out of range, an allocation failure) is raised by the
// next() that would have returned that batch, after the batches gathered before it.
// cancel() and the destructor stop and join the thread promptly, whatever the queue holds.
//
// The producer never copies or releases the source tensors, so sources whose owner needs a
// lock (a NumPy array needs the GIL) are safe to pass: they are released by the consumer's
// thread when the Prefetcher is destroyed.
class Prefetcher {
 public:
  // sources: one or more CPU tensors of rank >= 1 sharing dim(0); depth >= 1.
  Prefetcher(std::vector<Tensor> sources, int depth);
  // As above, then add(indices, offsets) and close(): one fixed sequence of batches.
  Prefetcher(std::vector<Tensor> sources, std::vector<std::int64_t> indices, std::vector<std::int64_t> offsets,
             int depth);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Appends batches: batch b is rows indices[offsets[b] .. offsets[b+1]), so offsets has one
  // entry more than there are batches, starts at 0, never decreases and ends at indices.size().
  // Row numbers are checked when gathered (an out-of-range row fails that batch's next()).
  // Ignored after cancel(); std::logic_error after close().
  void add(std::vector<std::int64_t> indices, std::vector<std::int64_t> offsets);
  // No more add(): next() returns std::nullopt once every added batch was returned.
  void close();
  // The next batch's components; std::nullopt at the end or after cancel(). Blocks while the
  // producer gathers. Throws std::logic_error instead of waiting forever when nothing was
  // added that is still to come and close() was not called.
  std::optional<std::vector<Tensor>> next();
  // Stops the producer and joins it; later next() calls return std::nullopt. Idempotent.
  void cancel();

  int depth() const { return depth_; }
  std::size_t num_sources() const { return sources_.size(); }
  // Batches added but not yet returned by next(): the consumer adds more when this runs low.
  std::int64_t unconsumed() const;
  // Batches gathered and waiting in the queue (at most depth()).
  std::size_t ready() const;

 private:
  struct Work {
    std::vector<std::int64_t> indices;
    std::vector<std::int64_t> offsets;
  };

  void run();
  std::vector<Tensor> gather(const std::int64_t* rows, std::int64_t count) const;

  const std::vector<Tensor> sources_;
  const int depth_;

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;   // producer waits: work and a free slot, or cancel
  std::condition_variable batch_ready_;  // consumer waits: a batch, the end, an error
  std::deque<std::shared_ptr<const Work>> work_;
  std::size_t next_batch_in_front_ = 0;  // batches of work_.front() already gathered
  std::deque<std::vector<Tensor>> queue_;
  std::int64_t added_ = 0;
  std::int64_t returned_ = 0;
  bool closed_ = false;
  bool cancelled_ = false;
  bool producer_done_ = false;
  std::exception_ptr error_;
  std::mutex join_mutex_;  // cancel() may race with the destructor's cancel()
  std::thread thread_;
};

}  // namespace mdtrain::data
