#include "mdtrain/distribute/threads/threads_communicator.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "mdtrain/core/errors.h"
#include "mdtrain/core/threading/spin_wait.h"
#include "mdtrain/distribute/collective_kind.h"
#include "mdtrain/distribute/group_failure.h"
#include "mdtrain/distribute/reduce_kernels.h"

namespace mdtrain {

namespace {

using Kind = CollectiveKind;

constexpr std::size_t kCacheLine = 64;

}  // namespace

// What one rank asked for in one collective; read by the other ranks after the first phase.
struct ThreadsCommunicator::Call {
  Kind kind = Kind::None;
  unsigned long long seq = 0;
  DType dtype = DType::Float32;
  ReduceOp op = ReduceOp::Sum;
  std::size_t count = 0;
  int root = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  int color = 0, key = 0;  // split only; may differ between ranks
};

namespace {

std::string describe(Kind kind, unsigned long long seq, std::size_t count, DType dtype, ReduceOp op, int root) {
  std::string s = cat(name_of(kind), " #", seq);
  if (kind == Kind::Barrier || kind == Kind::Split) return s;
  s += cat("(count ", count, ", ", name_of(dtype));
  if (has_reduce_op(kind)) s += cat(", ", name_of(op));
  if (has_root(kind)) s += cat(", root ", root);
  return s + ")";
}

}  // namespace

// Per-rank shared state on its own cache line, so one rank's stores do not slow the others'
// spinning loads. `call` is written by its rank before the first phase of a collective and read
// by the others after it. A rank cannot overwrite it with its next call while a peer still reads
// it: every collective ends with a phase that each rank reaches only after its last read.
struct alignas(kCacheLine) RankSlot {
  std::atomic<unsigned long long> phase{0};
  // (seq << 8) | kind of the last collective entered: read only for timeout reports.
  std::atomic<unsigned long long> entered{0};
  ThreadsCommunicator::Call call;
  // split: the new group this rank made for its color when it is the color's first member,
  // taken by the other members between the split's second and third phase.
  std::shared_ptr<ThreadsCommunicator::Group> child;
};

// Messages from one rank to another, oldest first.
struct Mailbox {
  struct Message {
    std::size_t count;
    DType dtype;
    std::vector<char> bytes;
  };
  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<Message> messages;
  std::atomic<std::size_t> queued{0};  // messages.size(), readable without the mutex (recv spins on it)
};

struct ThreadsCommunicator::Group {
  explicit Group(int n)
      : size(n),
        may_spin(detail::fits_on_cores(n)),
        slots(new RankSlot[static_cast<std::size_t>(n)]),
        mailboxes(new Mailbox[static_cast<std::size_t>(n) * static_cast<std::size_t>(n)]) {}

  Mailbox& mailbox(int from, int to) { return mailboxes[static_cast<std::size_t>(from) * size + to]; }

  const int size;
  const bool may_spin;  // ranks fit on the cores
  std::unique_ptr<RankSlot[]> slots;
  std::unique_ptr<Mailbox[]> mailboxes;  // [from * size + to]
  GroupFailure failure;
};

std::vector<std::unique_ptr<Communicator>> ThreadsCommunicator::create_group(int n) {
  MDTRAIN_CHECK(n >= 1, std::invalid_argument, "[threads] create_group: n must be >= 1 (got ", n, ")");
  auto group = std::make_shared<Group>(n);
  std::vector<std::unique_ptr<Communicator>> comms;
  comms.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) comms.emplace_back(new ThreadsCommunicator(group, r));
  return comms;
}

ThreadsCommunicator::ThreadsCommunicator(std::shared_ptr<Group> group, int rank)
    : group_(std::move(group)), rank_(rank) {}

ThreadsCommunicator::~ThreadsCommunicator() = default;

int ThreadsCommunicator::size() const { return group_->size; }

void ThreadsCommunicator::abort(const std::string& reason) {
  group_->failure.record(cat("rank ", rank_, " aborted the group: ", reason), false);
}

const ThreadsCommunicator::Call& ThreadsCommunicator::call_of(int rank) const { return group_->slots[rank].call; }

void ThreadsCommunicator::throw_group_failure(bool entering) {
  group_->failure.rethrow("threads", cat(name_of(kind_), " #", seq_), rank_, entering);
}

void ThreadsCommunicator::time_out(unsigned long long target_phase) {
  if (group_->failure.failed()) throw_group_failure(false);
  std::vector<MissingRank> missing;
  for (int r = 0; r < group_->size; ++r) {
    if (group_->slots[r].phase.load(std::memory_order_acquire) >= target_phase) continue;
    const unsigned long long entered = group_->slots[r].entered.load(std::memory_order_relaxed);
    missing.push_back({r, last_entered(r, static_cast<Kind>(entered & 0xff), entered >> 8)});
  }
  const std::string reason =
      timed_out(cat(name_of(kind_), " #", seq_), rank_, timeout()) + ": " + missing_ranks(missing);
  group_->failure.record(reason, true);
  throw TimeoutError("[threads] " + reason);
}

void ThreadsCommunicator::arrive_and_wait() {
  RankSlot* slots = group_->slots.get();
  const int n = group_->size;
  const unsigned long long target = ++phase_;
  slots[rank_].phase.store(target, std::memory_order_release);
  detail::SpinWait wait(group_->may_spin);
  int next = 0;  // ranks below `next` are known to have arrived
  for (;;) {
    while (next < n && slots[next].phase.load(std::memory_order_acquire) >= target) ++next;
    if (next == n) return;
    if (wait.step()) {
      if (group_->failure.failed()) throw_group_failure(false);
      const auto now = std::chrono::steady_clock::now();
      if (!deadline_set_) {
        // Measured from the first slow wait of this collective (a few microseconds after entry)
        // to keep the clock read off the fast path.
        deadline_set_ = true;
        const double t = timeout();
        deadline_ = t > 1e9 ? std::chrono::steady_clock::time_point::max()
                            : now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        std::chrono::duration<double>(t));
      } else if (now >= deadline_) {
        time_out(target);
      }
    }
  }
}

void ThreadsCommunicator::begin(const Call& call) {
  kind_ = call.kind;
  ++seq_;
  if (group_->failure.failed()) throw_group_failure(true);
  deadline_set_ = false;
  RankSlot& me = group_->slots[rank_];
  Call& mine = me.call;
  mine = call;
  mine.seq = seq_;
  me.entered.store((seq_ << 8) | static_cast<unsigned long long>(call.kind), std::memory_order_relaxed);
  arrive_and_wait();
  for (int r = 0; r < group_->size; ++r) {
    const Call& other = call_of(r);
    const bool same = other.kind == mine.kind && other.seq == mine.seq && other.count == mine.count &&
                      other.dtype == mine.dtype && other.op == mine.op && other.root == mine.root;
    if (!same) {
      // Every rank sees the same calls here, so all of them fail at this same phase.
      std::string reason =
          cat("collective mismatch: rank ", r, " called ",
              describe(other.kind, other.seq, other.count, other.dtype, other.op, other.root), " but rank ", rank_,
              " called ", describe(mine.kind, mine.seq, mine.count, mine.dtype, mine.op, mine.root));
      group_->failure.record(reason, false);
      throw std::runtime_error("[threads] " + reason);
    }
  }
}

namespace {

// Rank r's share [begin, end) of count elements: equal chunks rounded to whole cache lines, so
// no two ranks write the same line.
struct Chunk {
  std::size_t begin, end;
};

Chunk chunk_of(int r, int n, std::size_t count, std::size_t elem) {
  const std::size_t align = elem >= kCacheLine ? 1 : kCacheLine / elem;
  std::size_t per = (count + static_cast<std::size_t>(n) - 1) / static_cast<std::size_t>(n);
  per = (per + align - 1) / align * align;
  const std::size_t begin = std::min(count, per * static_cast<std::size_t>(r));
  return {begin, std::min(count, begin + per)};
}

// The ranks' buffer addresses, without a heap allocation on the latency path for small groups.
template <class P>
class PointerArray {
 public:
  explicit PointerArray(int n) {
    if (n > kInline) heap_.resize(static_cast<std::size_t>(n));
    ptr_ = n > kInline ? heap_.data() : inline_;
  }
  P& operator[](int r) { return ptr_[r]; }
  const P* data() const { return ptr_; }

 private:
  static constexpr int kInline = 16;
  P inline_[kInline];
  std::vector<P> heap_;
  P* ptr_;
};
using InputPointers = PointerArray<const void*>;
using OutputPointers = PointerArray<void*>;

}  // namespace

void ThreadsCommunicator::do_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) {
  Call call;
  call.kind = Kind::AllReduce;
  call.count = count;
  call.dtype = dtype;
  call.op = op;
  call.recv = data;
  begin(call);
  const int n = group_->size;
  const std::size_t elem = size_of(dtype);
  OutputPointers buffers(n);
  for (int r = 0; r < n; ++r) buffers[r] = call_of(r).recv;

  // Rank r owns chunk r: it reads that chunk from every rank's buffer and writes the result
  // back into every rank's buffer. No other rank touches chunk r during this phase, so the
  // owner's push needs no second phase of copies (two barriers in all, and each rank moves
  // about one buffer's worth of data in and out, like a memcpy).
  const Chunk mine = chunk_of(rank_, n, count, elem);
  if (mine.end > mine.begin && (n > 1 || op == ReduceOp::Mean)) {
    OutputPointers outputs(n);
    for (int i = 0; i < n; ++i) {
      // Own buffer last: its lines stay hot for the caller.
      const int r = (rank_ + 1 + i) % n;
      outputs[i] = static_cast<char*>(buffers[r]) + mine.begin * elem;
    }
    detail::reduce_in_rank_order(outputs.data(), n, buffers.data(), n, mine.begin, mine.end - mine.begin, dtype, op);
  }
  arrive_and_wait();  // every chunk is in every buffer; nobody touches this rank's buffer now
}

void ThreadsCommunicator::do_reduce(void* data, std::size_t count, DType dtype, ReduceOp op, int root) {
  Call call;
  call.kind = Kind::Reduce;
  call.count = count;
  call.dtype = dtype;
  call.op = op;
  call.root = root;
  call.recv = data;
  begin(call);
  const int n = group_->size;
  if (rank_ == root && count > 0 && (n > 1 || op == ReduceOp::Mean)) {
    OutputPointers buffers(n);
    for (int r = 0; r < n; ++r) buffers[r] = call_of(r).recv;
    void* out[1] = {data};
    detail::reduce_in_rank_order(out, 1, buffers.data(), n, 0, count, dtype, op);
  }
  arrive_and_wait();  // the root has read every buffer; they may change again
}

void ThreadsCommunicator::do_broadcast(void* data, std::size_t count, DType dtype, int root) {
  Call call;
  call.kind = Kind::Broadcast;
  call.count = count;
  call.dtype = dtype;
  call.root = root;
  call.recv = data;
  begin(call);
  if (rank_ != root && count > 0) std::memcpy(data, call_of(root).recv, count * size_of(dtype));
  arrive_and_wait();
}

void ThreadsCommunicator::do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype) {
  Call call;
  call.kind = Kind::AllGather;
  call.count = count_per_rank;
  call.dtype = dtype;
  call.send = send;
  begin(call);
  const int n = group_->size;
  const std::size_t block = count_per_rank * size_of(dtype);
  if (block > 0) {
    for (int i = 0; i < n; ++i) {
      const int r = (rank_ + i) % n;
      const void* src = call_of(r).send;
      char* dst = static_cast<char*>(recv) + static_cast<std::size_t>(r) * block;
      if (src != dst) std::memcpy(dst, src, block);
    }
  }
  arrive_and_wait();
}

void ThreadsCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype,
                                            ReduceOp op) {
  Call call;
  call.kind = Kind::ReduceScatter;
  call.count = count_per_rank;
  call.dtype = dtype;
  call.op = op;
  call.send = send;
  begin(call);
  const int n = group_->size;
  InputPointers inputs(n);
  for (int r = 0; r < n; ++r) inputs[r] = call_of(r).send;
  void* out[1] = {recv};
  detail::reduce_in_rank_order(out, 1, inputs.data(), n, static_cast<std::size_t>(rank_) * count_per_rank,
                               count_per_rank, dtype, op);
  arrive_and_wait();
}

void ThreadsCommunicator::do_barrier() {
  Call call;
  call.kind = Kind::Barrier;
  begin(call);
  // A second phase, so that no rank starts its next call (overwriting a call slot) while a
  // slower rank still checks this one.
  arrive_and_wait();
}

void ThreadsCommunicator::do_send(const void* data, std::size_t count, DType dtype, int peer) {
  ++sends_;
  const std::string call = cat("send #", sends_, " to rank ", peer);
  if (group_->failure.failed()) group_->failure.rethrow("threads", call, rank_, true);
  Mailbox::Message message{count, dtype, std::vector<char>(count * size_of(dtype))};
  if (count > 0) std::memcpy(message.bytes.data(), data, message.bytes.size());
  Mailbox& box = group_->mailbox(rank_, peer);
  {
    std::lock_guard<std::mutex> lock(box.mutex);
    box.messages.push_back(std::move(message));
    box.queued.fetch_add(1, std::memory_order_release);
  }
  box.arrived.notify_one();
}

void ThreadsCommunicator::do_recv(void* data, std::size_t count, DType dtype, int peer) {
  ++recvs_;
  const std::string call = cat("recv #", recvs_, " from rank ", peer);
  if (group_->failure.failed()) group_->failure.rethrow("threads", call, rank_, true);
  Mailbox& box = group_->mailbox(peer, rank_);
  const double t = timeout();
  const auto start = std::chrono::steady_clock::now();
  // Spin (then yield) for up to a millisecond before blocking: waking a blocked thread costs ~75 us
  // on our VMs, and a pipeline stage receives an activation or a gradient every few hundred us
  // (2 stages x 16 micro-batches: 32 receives a step), so blocking put that latency into the bubble.
  detail::SpinWait spin(group_->may_spin);
  while (box.queued.load(std::memory_order_acquire) == 0) {
    if (spin.step() && std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(1)) break;
  }
  std::unique_lock<std::mutex> lock(box.mutex);
  while (box.messages.empty()) {
    box.arrived.wait_for(lock, std::chrono::milliseconds(1));
    if (!box.messages.empty()) break;
    if (group_->failure.failed()) group_->failure.rethrow("threads", call, rank_, false);
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= t) {
      const std::string reason = timed_out(call, rank_, t) + cat(": rank ", peer, " sent nothing");
      group_->failure.record(reason, true);
      throw TimeoutError("[threads] " + reason);
    }
  }
  Mailbox::Message message = std::move(box.messages.front());
  box.messages.pop_front();
  box.queued.fetch_sub(1, std::memory_order_relaxed);
  lock.unlock();
  if (message.count != count || message.dtype != dtype) {
    const std::string reason =
        cat("point-to-point mismatch: ", call, " on rank ", rank_, " expects ", count, " ", name_of(dtype),
            " but rank ", peer, " sent ", message.count, " ", name_of(message.dtype));
    group_->failure.record(reason, false);
    throw std::runtime_error("[threads] " + reason);
  }
  if (count > 0) std::memcpy(data, message.bytes.data(), message.bytes.size());
}

}  // namespace mdtrain

namespace mdtrain {

std::unique_ptr<Communicator> ThreadsCommunicator::do_split(int color, int key) {
  Call call;
  call.kind = Kind::Split;
  call.color = color;
  call.key = key;
  begin(call);  // first phase: every rank's color and key are visible
  // This rank's new group, in new-rank order: (key, rank here), as MPI_Comm_split.
  std::vector<int> members;
  if (color >= 0) {
    for (int r = 0; r < group_->size; ++r) {
      if (call_of(r).color == color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return call_of(a).key < call_of(b).key; });
  }
  // Each new group gets fresh shared state, made once by its first member.
  const bool maker = !members.empty() && members.front() == rank_;
  RankSlot* slots = group_->slots.get();
  if (maker) slots[rank_].child = std::make_shared<Group>(static_cast<int>(members.size()));
  arrive_and_wait();  // second phase: every made group is visible
  std::shared_ptr<Group> child = members.empty() ? nullptr : slots[members.front()].child;
  arrive_and_wait();  // third phase: every member holds its group
  if (maker) slots[rank_].child.reset();
  if (!child) return nullptr;
  const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  return std::unique_ptr<Communicator>(new ThreadsCommunicator(std::move(child), new_rank));
}

}  // namespace mdtrain
