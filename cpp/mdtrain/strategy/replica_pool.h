#pragma once
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mdtrain {

// Runs one function per replica, all at once: replica 0 on the calling thread, replica r > 0 on
// a persistent worker thread of its own. Workers spin briefly between steps (a blocking wake-up
// costs ~75 us on our VMs, a whole small training step ~100 us) and then sleep, so an idle pool
// does not burn a core while Python runs callbacks. While the replicas run, BLAS is
// single-threaded: N replicas on N cores beat one BLAS call on N threads.
class ReplicaPool {
 public:
  explicit ReplicaPool(int replicas);
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  int size() const { return replicas_; }
  // Calls fn(r) for every replica concurrently and returns when all have finished. If any threw,
  // rethrows the exception thrown first (the cause; later ones are usually peers giving up).
  void run(const std::function<void(int)>& fn);

 private:
  void worker_loop(int replica);
  void record_error(int replica);

  int replicas_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stopping_{false};
  std::vector<std::exception_ptr> errors_;
  std::atomic<int> first_error_{-1};
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace mdtrain
