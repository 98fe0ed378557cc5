#include "mdtrain/distribute/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>
#include <utility>

#include "mdtrain/core/cuda/device_memory.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/distribute/collective_kind.h"
#include "mdtrain/distribute/group_failure.h"
#include "mdtrain/distribute/nccl/nccl_backend.h"
#include "mdtrain/distribute/nccl/nccl_kernels.h"
#include "mdtrain/distribute/optional_backends.h"
#include "mdtrain/core/cuda/check.h"
#include "mdtrain/core/cuda/runtime.h"

#define MDTRAIN_NCCL_CHECK(call)                                                                                      \
  do {                                                                                                                \
    const ncclResult_t mdtrain_nccl_status_ = (call);                                                                 \
    if (mdtrain_nccl_status_ != ncclSuccess)                                                                          \
      ::mdtrain::cuda::throw_call_error("nccl", #call, ncclGetErrorString(mdtrain_nccl_status_), __FILE__, __LINE__); \
  } while (0)

namespace mdtrain {

namespace {

using Kind = CollectiveKind;

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::UInt8: return ncclUint8;
  }
  fail<std::invalid_argument>("[nccl] unknown dtype ", static_cast<int>(dtype));
}

// Sum, Mean (ncclAvg; validated to be floating), and Max/Min of integers. Floating Max/Min are
// folded by nccl_kernels.cu instead (see the header).
ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Mean: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  fail<std::invalid_argument>("[nccl] unknown reduce op ", static_cast<int>(op));
}

bool folded_here(DType dtype, ReduceOp op) {
  return is_floating(dtype) && (op == ReduceOp::Max || op == ReduceOp::Min);
}

// Runs NCCL calls as one group: one launch for several operations, and the form NCCL needs when one
// thread drives several ranks.
template <class F>
void nccl_group(F&& calls) {
  MDTRAIN_NCCL_CHECK(ncclGroupStart());
  try {
    calls();
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  MDTRAIN_NCCL_CHECK(ncclGroupEnd());
}

}  // namespace

struct NcclCommunicator::Call {
  Kind kind = Kind::None;
  unsigned long long seq = 0;
  std::size_t count = 0;
  DType dtype = DType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
};

namespace {

using Call = NcclCommunicator::Call;

std::string describe(const Call& c) {
  std::string s = cat(name_of(c.kind), " #", c.seq);
  if (c.kind == Kind::Barrier || c.kind == Kind::Split) return s;
  s += cat("(count ", c.count, ", ", name_of(c.dtype));
  if (has_reduce_op(c.kind)) s += cat(", ", name_of(c.op));
  if (has_root(c.kind)) s += cat(", root ", c.root);
  return s + ")";
}

bool same_call(const Call& a, const Call& b) {
  return a.kind == b.kind && a.count == b.count && a.dtype == b.dtype && a.root == b.root &&
         (a.op == b.op || !has_reduce_op(a.kind));
}

}  // namespace

// The calls and the failure of an in-process group, seen by all its ranks.
struct NcclCommunicator::Ledger {
  explicit Ledger(int n) : entered(static_cast<std::size_t>(n)) {}
  std::mutex mutex;
  std::vector<Call> entered;  // per rank: the last collective it entered (seq 0: none yet)
  GroupFailure failure;
  // split: the ledgers of the new in-process groups by (split's seq, color), with how many of
  // their ranks took them so far (dropped when all did). Guarded by mutex.
  std::map<std::pair<unsigned long long, int>, std::pair<std::shared_ptr<Ledger>, int>> children;
};

GroupFailure& NcclCommunicator::ledger_failure() { return ledger_->failure; }

// ---- creation -------------------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(ncclComm* comm, int rank, int size, int device, std::shared_ptr<Ledger> ledger)
    : comm_(comm),
      rank_(rank),
      size_(size),
      device_(device),
      ledger_(std::move(ledger)),
      ready_(device),
      done_(device) {}

std::vector<std::unique_ptr<Communicator>> NcclCommunicator::create_group(const std::vector<int>& devices) {
  MDTRAIN_CHECK(!devices.empty(), std::invalid_argument, "[nccl] create_group: no devices");
  for (int d : devices) cuda::require_device(d);
  const int n = static_cast<int>(devices.size());
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  MDTRAIN_NCCL_CHECK(ncclCommInitAll(comms.data(), n, devices.data()));
  auto ledger = std::make_shared<Ledger>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.emplace_back(new NcclCommunicator(comms[r], r, n, devices[r], ledger));
  return out;
}

std::unique_ptr<Communicator> NcclCommunicator::create_rank(const std::string& unique_id, int rank, int size,
                                                            int device) {
  MDTRAIN_CHECK(unique_id.size() == NCCL_UNIQUE_ID_BYTES, std::invalid_argument, "[nccl] the unique id must be ",
                NCCL_UNIQUE_ID_BYTES, " bytes (from nccl_unique_id()), got ", unique_id.size());
  MDTRAIN_CHECK(size >= 1 && rank >= 0 && rank < size, std::invalid_argument, "[nccl] rank ", rank,
                " is not in a group of ", size);
  cuda::DeviceGuard guard(device);
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), NCCL_UNIQUE_ID_BYTES);
  ncclComm_t comm = nullptr;
  MDTRAIN_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  return std::unique_ptr<Communicator>(new NcclCommunicator(comm, rank, size, device, nullptr));
}

NcclCommunicator::~NcclCommunicator() {
  std::lock_guard<std::mutex> lock(comm_mutex_);
  if (!comm_) return;
  const bool failed = failure().failed();
  // Destroying waits for pending work, which never finishes when a peer is gone: abort instead.
  if (failed) ncclCommAbort(comm_);
  else ncclCommDestroy(comm_);
  comm_ = nullptr;
}

// ---- failures -------------------------------------------------------------------------------

void NcclCommunicator::abort_comm() {
  std::lock_guard<std::mutex> lock(comm_mutex_);
  if (comm_) ncclCommAbort(comm_);  // also stops this rank's kernels that wait for peers
  comm_ = nullptr;
}

void NcclCommunicator::abort(const std::string& reason) {
  const std::string why = cat("rank ", rank_, " aborted the group: ", reason);
  failure().record(why, false);
  abort_comm();
}

void NcclCommunicator::fail_group(const std::string& reason, bool timeout) {
  failure().record(reason, timeout);
  abort_comm();
  if (timeout) throw TimeoutError("[nccl] " + reason);
  throw std::runtime_error("[nccl] " + reason);
}

void NcclCommunicator::throw_failure(const Call& call, bool entering) {
  failure().rethrow("nccl", describe(call), rank_, entering, "the communicator was aborted");
}

ncclComm* NcclCommunicator::comm_locked(const Call& call) {
  if (!comm_) throw_failure(call, true);
  return comm_;
}

// ---- the collective protocol ----------------------------------------------------------------

void NcclCommunicator::enter(const Call& call) {
  if (failure().failed()) throw_failure(call, true);
  if (!ledger_) return;
  std::string mismatch;
  {
    std::lock_guard<std::mutex> lock(ledger_->mutex);
    ledger_->entered[static_cast<std::size_t>(rank_)] = call;
    // Peers already in this collective: their calls must be this one. The last rank to arrive
    // compares with everyone before any rank can finish, so every mismatch is seen before a bad
    // NCCL call can complete.
    for (int r = 0; r < size_ && mismatch.empty(); ++r) {
      const Call& other = ledger_->entered[static_cast<std::size_t>(r)];
      if (r != rank_ && other.seq == call.seq && !same_call(other, call))
        mismatch = cat("collective mismatch: rank ", rank_, " called ", describe(call), " but rank ", r, " called ",
                       describe(other));
    }
  }
  if (!mismatch.empty()) fail_group(mismatch, false);
}

template <class F>
void NcclCommunicator::run(const Call& call, F&& enqueue) {
  enter(call);
  launch_and_wait(call, std::forward<F>(enqueue));
}

template <class F>
void NcclCommunicator::launch_and_wait(const Call& call, F&& enqueue) {
  cuda::DeviceGuard guard(device_);
  const cuda::Stream& compute = cuda::compute_stream(device_);
  const cuda::Stream& comm_stream = cuda::communication_stream(device_);
  // After the compute stream's work (which produced the data), before its later work.
  ready_.record(compute);
  comm_stream.wait(ready_);
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    enqueue(comm_locked(call), comm_stream.handle());
  }
  done_.record(comm_stream);
  compute.wait(done_);
  wait_for(done_, call);
}

std::string NcclCommunicator::who_is_missing(const Call& call) const {
  std::vector<MissingRank> missing;
  for (int r = 0; r < size_; ++r) {
    const Call& e = ledger_->entered[static_cast<std::size_t>(r)];
    if (e.seq < call.seq) missing.push_back({r, last_entered(r, e.kind, e.seq)});
  }
  return missing.empty() ? std::string("every rank entered it; NCCL did not finish") : missing_ranks(missing);
}

void NcclCommunicator::wait_for(const cuda::Event& done, const Call& call) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const double limit = timeout();
  int polls = 0;
  while (!done.query()) {
    if (ledger_ && ledger_->failure.failed()) {
      abort_comm();
      throw_failure(call, false);
    }
    ncclResult_t async = ncclSuccess;
    std::string detail;
    {
      std::lock_guard<std::mutex> lock(comm_mutex_);
      ncclComm* comm = comm_locked(call);
      MDTRAIN_NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
      if (async != ncclSuccess && async != ncclInProgress) detail = ncclGetLastError(comm);
    }
    if (async != ncclSuccess && async != ncclInProgress)
      fail_group(cat(describe(call), " on rank ", rank_, " failed: ", ncclGetErrorString(async),
                     detail.empty() ? "" : " (" + detail + ")"),
                 false);
    const double waited = std::chrono::duration<double>(clock::now() - start).count();
    if (waited > limit) {
      std::string missing;
      if (ledger_) {
        std::lock_guard<std::mutex> lock(ledger_->mutex);
        missing = who_is_missing(call);
      } else {
        missing = "a peer process did not join it or is stuck (NCCL cannot tell which)";
      }
      fail_group(timed_out(describe(call), rank_, limit) + ": " + missing, true);
    }
    // Spin briefly (a collective usually finishes within microseconds of the last arrival), then
    // back off to sleeping so a long wait costs no core.
    if (++polls < 200) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(polls < 2000 ? 50 : 1000));
  }
}

// ---- buffers --------------------------------------------------------------------------------

void NcclCommunicator::check_device(const Device& device) const {
  MDTRAIN_CHECK(device.is_cpu() || device.index == device_, std::invalid_argument, "[nccl] rank ", rank_,
                " drives /device:GPU:", device_, "; a tensor on ", device.to_string(), " cannot take part");
}

namespace {

// True for memory of `device` (used in place), false for host memory (staged).
bool on_device(const void* ptr, int device, int rank) {
  if (!ptr) return false;
  cudaPointerAttributes attr{};
  MDTRAIN_CUDA_CHECK(cudaPointerGetAttributes(&attr, ptr));
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) return false;
  MDTRAIN_CHECK(attr.device == device, std::invalid_argument, "[nccl] rank ", rank, " drives /device:GPU:", device,
                " but a buffer is on /device:GPU:", attr.device);
  return true;
}

}  // namespace

void* NcclCommunicator::device_scratch(std::size_t bytes, int which) {
  if (device_scratch_.size() <= static_cast<std::size_t>(which))
    device_scratch_.resize(static_cast<std::size_t>(which) + 1);
  auto& s = device_scratch_[static_cast<std::size_t>(which)];
  if (s.second < bytes || !s.first) {
    s.first = cuda::allocate(Device{DeviceKind::CUDA, device_}, bytes);
    s.second = bytes;
  }
  return s.first.get();
}

void* NcclCommunicator::pinned_scratch(std::size_t bytes, int which) {
  if (pinned_scratch_.size() <= static_cast<std::size_t>(which))
    pinned_scratch_.resize(static_cast<std::size_t>(which) + 1);
  auto& s = pinned_scratch_[static_cast<std::size_t>(which)];
  if (s.second < bytes || !s.first) {
    s.first = cuda::allocate_pinned(bytes);
    s.second = bytes;
  }
  return s.first.get();
}

// ---- collectives ----------------------------------------------------------------------------

namespace {

// In-place all-reduce of `buf` (device memory) with any op; `gather` is scratch of size * count
// elements for the folded ops.
void enqueue_reduce(ncclComm* comm, void* buf, std::size_t count, DType dtype, ReduceOp op, int size, void* gather,
                    cudaStream_t s) {
  if (folded_here(dtype, op)) {
    nccl_group([&] { MDTRAIN_NCCL_CHECK(ncclAllGather(buf, gather, count, nccl_type(dtype), comm, s)); });
    nccl_detail::fold_ranks(gather, count, 0, count, size, dtype, op, buf, s);
    return;
  }
  nccl_group([&] { MDTRAIN_NCCL_CHECK(ncclAllReduce(buf, buf, count, nccl_type(dtype), nccl_op(op), comm, s)); });
}

}  // namespace

void NcclCommunicator::do_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) {
  const Call call{Kind::AllReduce, ++seq_, count, dtype, op, 0};
  const std::size_t bytes = count * size_of(dtype);
  const bool dev = on_device(data, device_, rank_);
  void* buf = dev ? data : device_scratch(bytes, 0);
  void* pinned = dev ? nullptr : pinned_scratch(bytes, 0);
  void* gather = folded_here(dtype, op) ? device_scratch(bytes * static_cast<std::size_t>(size_), 1) : nullptr;
  if (!dev && bytes) std::memcpy(pinned, data, bytes);
  run(call, [&](ncclComm* comm, cudaStream_t s) {
    if (!dev && bytes) MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(buf, pinned, bytes, cudaMemcpyHostToDevice, s));
    enqueue_reduce(comm, buf, count, dtype, op, size_, gather, s);
    if (!dev && bytes) MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(pinned, buf, bytes, cudaMemcpyDeviceToHost, s));
  });
  if (!dev && bytes) std::memcpy(data, pinned, bytes);
}

void NcclCommunicator::do_reduce(void* data, std::size_t count, DType dtype, ReduceOp op, int root) {
  // An all-reduce whose result only the root keeps: the same bits as all_reduce, as the contract
  // asks (ncclReduce may take another path through the ranks).
  const Call call{Kind::Reduce, ++seq_, count, dtype, op, root};
  const std::size_t bytes = count * size_of(dtype);
  const bool dev = on_device(data, device_, rank_);
  const bool keep = rank_ == root;
  void* buf = keep && dev ? data : device_scratch(bytes, 0);
  void* pinned = dev ? nullptr : pinned_scratch(bytes, 0);
  void* gather = folded_here(dtype, op) ? device_scratch(bytes * static_cast<std::size_t>(size_), 1) : nullptr;
  if (!dev && bytes) std::memcpy(pinned, data, bytes);
  run(call, [&](ncclComm* comm, cudaStream_t s) {
    if (bytes && buf != data)
      MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(buf, dev ? data : pinned, bytes, cudaMemcpyDefault, s));
    enqueue_reduce(comm, buf, count, dtype, op, size_, gather, s);
    if (keep && !dev && bytes) MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(pinned, buf, bytes, cudaMemcpyDeviceToHost, s));
  });
  if (keep && !dev && bytes) std::memcpy(data, pinned, bytes);
}

void NcclCommunicator::do_broadcast(void* data, std::size_t count, DType dtype, int root) {
  const Call call{Kind::Broadcast, ++seq_, count, dtype, ReduceOp::Sum, root};
  const std::size_t bytes = count * size_of(dtype);
  const bool dev = on_device(data, device_, rank_);
  void* buf = dev ? data : device_scratch(bytes, 0);
  void* pinned = dev ? nullptr : pinned_scratch(bytes, 0);
  if (!dev && bytes && rank_ == root) std::memcpy(pinned, data, bytes);
  run(call, [&](ncclComm* comm, cudaStream_t s) {
    if (!dev && bytes && rank_ == root)
      MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(buf, pinned, bytes, cudaMemcpyHostToDevice, s));
    nccl_group([&] { MDTRAIN_NCCL_CHECK(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, comm, s)); });
    if (!dev && bytes) MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(pinned, buf, bytes, cudaMemcpyDeviceToHost, s));
  });
  if (!dev && bytes) std::memcpy(data, pinned, bytes);
}

void NcclCommunicator::do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype) {
  const Call call{Kind::AllGather, ++seq_, count_per_rank, dtype, ReduceOp::Sum, 0};
  const std::size_t block = count_per_rank * size_of(dtype), total = block * static_cast<std::size_t>(size_);
  const bool recv_dev = on_device(recv, device_, rank_);
  void* rbuf = recv_dev ? recv : device_scratch(total, 0);
  void* mine = static_cast<char*>(rbuf) + block * static_cast<std::size_t>(rank_);
  const bool in_place = send == static_cast<const char*>(recv) + block * static_cast<std::size_t>(rank_);
  const bool send_dev = !in_place && on_device(send, device_, rank_);
  void* pinned = recv_dev ? nullptr : pinned_scratch(total, 0);
  // A host send (or a staged in-place one) goes into this rank's block of the device recv, and
  // NCCL runs in place.
  const bool stage_send = block && !send_dev && !(in_place && recv_dev);
  if (stage_send) std::memcpy(pinned ? pinned : pinned_scratch(block, 1), send, block);
  run(call, [&](ncclComm* comm, cudaStream_t s) {
    const void* sbuf = send_dev ? send : mine;
    if (stage_send)
      MDTRAIN_CUDA_CHECK(
          cudaMemcpyAsync(mine, pinned ? pinned : pinned_scratch(block, 1), block, cudaMemcpyHostToDevice, s));
    nccl_group([&] { MDTRAIN_NCCL_CHECK(ncclAllGather(sbuf, rbuf, count_per_rank, nccl_type(dtype), comm, s)); });
    if (!recv_dev && total) MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(pinned, rbuf, total, cudaMemcpyDeviceToHost, s));
  });
  if (!recv_dev && total) std::memcpy(recv, pinned, total);
}

void NcclCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype,
                                         ReduceOp op) {
  const Call call{Kind::ReduceScatter, ++seq_, count_per_rank, dtype, op, 0};
  const std::size_t block = count_per_rank * size_of(dtype), total = block * static_cast<std::size_t>(size_);
  const bool send_dev = on_device(send, device_, rank_);
  const bool recv_dev = on_device(recv, device_, rank_);
  const void* sbuf = send_dev ? send : device_scratch(total, 0);
  void* rbuf = recv_dev ? recv : device_scratch(block, 2);
  void* pin_send = send_dev ? nullptr : pinned_scratch(total, 0);
  void* pin_recv = recv_dev ? nullptr : pinned_scratch(block, 1);
  const bool folded = folded_here(dtype, op);
  void* gather = folded ? device_scratch(total * static_cast<std::size_t>(size_), 1) : nullptr;
  if (!send_dev && total) std::memcpy(pin_send, send, total);
  run(call, [&](ncclComm* comm, cudaStream_t s) {
    if (!send_dev && total)
      MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(const_cast<void*>(sbuf), pin_send, total, cudaMemcpyHostToDevice, s));
    if (folded) {
      // Every rank's whole send, then this rank's block folded in rank order.
      nccl_group([&] {
        MDTRAIN_NCCL_CHECK(
            ncclAllGather(sbuf, gather, count_per_rank * static_cast<std::size_t>(size_), nccl_type(dtype), comm, s));
      });
      nccl_detail::fold_ranks(gather, count_per_rank * static_cast<std::size_t>(size_),
                              count_per_rank * static_cast<std::size_t>(rank_), count_per_rank, size_, dtype, op, rbuf,
                              s);
    } else {
      nccl_group([&] {
        MDTRAIN_NCCL_CHECK(ncclReduceScatter(sbuf, rbuf, count_per_rank, nccl_type(dtype), nccl_op(op), comm, s));
      });
    }
    if (!recv_dev && block) MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(pin_recv, rbuf, block, cudaMemcpyDeviceToHost, s));
  });
  if (!recv_dev && block) std::memcpy(recv, pin_recv, block);
}

void NcclCommunicator::do_barrier() {
  const Call call{Kind::Barrier, ++seq_, 0, DType::Int32, ReduceOp::Sum, 0};
  void* one = device_scratch(sizeof(std::int32_t), 3);
  run(call, [&](ncclComm* comm, cudaStream_t s) {
    nccl_group([&] { MDTRAIN_NCCL_CHECK(ncclAllReduce(one, one, 1, ncclInt32, ncclSum, comm, s)); });
  });
}

bool NcclCommunicator::enqueues_all_reduce(const Device& device) const { return !device.is_cpu(); }

void NcclCommunicator::do_enqueue_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) {
  // Host memory, and ops NCCL does not reduce itself, run at once like any backend's.
  if (!(op == ReduceOp::Sum || op == ReduceOp::Mean) || count == 0 || !on_device(data, device_, rank_))
    return do_all_reduce(data, count, dtype, op);
  const Call call{Kind::AllReduce, ++seq_, count, dtype, op, 0};
  enter(call);
  cuda::DeviceGuard guard(device_);
  const cuda::Stream& compute = cuda::compute_stream(device_);
  const cuda::Stream& comm_stream = cuda::communication_stream(device_);
  ready_.record(compute);
  comm_stream.wait(ready_);
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    ncclComm* comm = comm_locked(call);
    nccl_group([&] {
      MDTRAIN_NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(dtype), nccl_op(op), comm, comm_stream.handle()));
    });
  }
  pending_.push_back(call);
}

void NcclCommunicator::do_wait_enqueued() {
  if (pending_.empty()) return;
  const Call last = pending_.back();
  pending_.clear();
  cuda::DeviceGuard guard(device_);
  done_.record(cuda::communication_stream(device_));
  cuda::compute_stream(device_).wait(done_);
  wait_for(done_, last);
}

void NcclCommunicator::wait_for_peers(const Call& call) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const double limit = timeout();
  for (int polls = 0;; ++polls) {
    {
      // One lock for the whole decision: a rank that times out marks the group failed before any
      // peer can see everyone arrived, so either all go on or none does.
      std::lock_guard<std::mutex> lock(ledger_->mutex);
      if (!ledger_->failure.failed()) {
        bool all = true;
        for (const Call& e : ledger_->entered) all = all && e.seq >= call.seq;
        if (all) return;
        const double waited = std::chrono::duration<double>(clock::now() - start).count();
        if (waited > limit)
          ledger_->failure.record(timed_out(describe(call), rank_, limit) + ": " + who_is_missing(call), true);
      }
    }
    if (ledger_->failure.failed()) throw_failure(call, false);
    if (polls < 200) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(polls < 2000 ? 50 : 1000));
  }
}

std::unique_ptr<Communicator> NcclCommunicator::do_split(int color, int key) {
  const Call call{Kind::Split, ++seq_, 0, DType::Int32, ReduceOp::Sum, 0};
  enter(call);
  // ncclCommSplit blocks until every rank calls it: in-process groups first see every rank
  // arrive (or time out naming the missing ones, or fail on a mismatch).
  if (ledger_) wait_for_peers(call);
  ncclComm_t child = nullptr;
  {
    cuda::DeviceGuard guard(device_);
    std::lock_guard<std::mutex> lock(comm_mutex_);
    ncclComm* comm = comm_locked(call);
    MDTRAIN_NCCL_CHECK(ncclCommSplit(comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, nullptr));
  }
  if (child == nullptr) return nullptr;
  int new_rank = 0, new_size = 0;
  MDTRAIN_NCCL_CHECK(ncclCommUserRank(child, &new_rank));
  MDTRAIN_NCCL_CHECK(ncclCommCount(child, &new_size));
  std::shared_ptr<Ledger> child_ledger;
  if (ledger_) {
    // The new group's ranks are in this process too: its first member here makes its ledger.
    std::lock_guard<std::mutex> lock(ledger_->mutex);
    auto& entry = ledger_->children[{call.seq, color}];
    if (!entry.first) entry.first = std::make_shared<Ledger>(new_size);
    child_ledger = entry.first;
    if (++entry.second == new_size) ledger_->children.erase({call.seq, color});
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(child, new_rank, new_size, device_, child_ledger));
}

// ---- the backend's entry points (optional_backends.h, nccl_backend.h) ------------------------

bool nccl_available() { return true; }

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(int local_size) {
  const int gpus = cuda::device_count();
  MDTRAIN_CHECK(gpus > 0, std::runtime_error, "[nccl] needs one GPU per rank: ", cuda::unavailable_reason());
  MDTRAIN_CHECK(local_size >= 1 && local_size <= gpus, std::invalid_argument, "[nccl] ", local_size,
                " ranks need as many GPUs; this process sees ", gpus);
  std::vector<int> devices;
  for (int d = 0; d < local_size; ++d) devices.push_back(d);
  return NcclCommunicator::create_group(devices);
}

std::string nccl_unique_id() {
  ncclUniqueId id;
  MDTRAIN_NCCL_CHECK(ncclGetUniqueId(&id));
  return std::string(id.internal, NCCL_UNIQUE_ID_BYTES);
}

std::unique_ptr<Communicator> make_nccl_rank_communicator(const std::string& unique_id, int rank, int size,
                                                          int device) {
  return NcclCommunicator::create_rank(unique_id, rank, size, device);
}

int nccl_version() {
  int v = 0;
  MDTRAIN_NCCL_CHECK(ncclGetVersion(&v));
  return v;
}

// ---- point to point --------------------------------------------------------------------------

void NcclCommunicator::do_send(const void* data, std::size_t count, DType dtype, int peer) {
  point_to_point(data, count, peer, nullptr, 0, -1, dtype);
}

void NcclCommunicator::do_recv(void* data, std::size_t count, DType dtype, int peer) {
  point_to_point(nullptr, 0, -1, data, count, peer, dtype);
}

void NcclCommunicator::do_send_recv(const void* send_data, std::size_t send_count, int send_peer, void* recv_data,
                                    std::size_t recv_count, int recv_peer, DType dtype) {
  point_to_point(send_data, send_count, send_peer, recv_data, recv_count, recv_peer, dtype);
}

void NcclCommunicator::point_to_point(const void* send, std::size_t send_count, int send_peer, void* recv,
                                      std::size_t recv_count, int recv_peer, DType dtype) {
  // Only two ranks take part: no ledger entry (the peers' collective sequences are untouched), but
  // a failed or aborted group still throws, and the wait polls for failures and times out.
  const bool sends = send_peer >= 0, recvs = recv_peer >= 0;
  const Call call{Kind::None, 0, sends ? send_count : recv_count, dtype, ReduceOp::Sum, sends ? send_peer : recv_peer};
  if (failure().failed()) throw_failure(call, true);
  const std::size_t send_bytes = sends ? send_count * size_of(dtype) : 0;
  const std::size_t recv_bytes = recvs ? recv_count * size_of(dtype) : 0;
  const bool send_dev = send_bytes && on_device(send, device_, rank_);
  const bool recv_dev = recv_bytes && on_device(recv, device_, rank_);
  // Host buffers go through this rank's scratch (pinned, then device memory): send's is copied
  // before the call returns, so the caller may reuse its buffer at once.
  const void* sbuf = send_dev ? send : (send_bytes ? device_scratch(send_bytes, 0) : nullptr);
  void* rbuf = recv_dev ? recv : (recv_bytes ? device_scratch(recv_bytes, 1) : nullptr);
  void* send_pinned = send_bytes && !send_dev ? pinned_scratch(send_bytes, 0) : nullptr;
  void* recv_pinned = recv_bytes && !recv_dev ? pinned_scratch(recv_bytes, 1) : nullptr;
  if (send_pinned) std::memcpy(send_pinned, send, send_bytes);
  launch_and_wait(call, [&](ncclComm* comm, cudaStream_t s) {
    if (send_pinned)
      MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(const_cast<void*>(sbuf), send_pinned, send_bytes, cudaMemcpyHostToDevice, s));
    // One group: a send and a recv with (possibly) the same peer progress together.
    nccl_group([&] {
      if (sends) MDTRAIN_NCCL_CHECK(ncclSend(sbuf, send_count, nccl_type(dtype), send_peer, comm, s));
      if (recvs) MDTRAIN_NCCL_CHECK(ncclRecv(rbuf, recv_count, nccl_type(dtype), recv_peer, comm, s));
    });
    if (recv_pinned) MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(recv_pinned, rbuf, recv_bytes, cudaMemcpyDeviceToHost, s));
  });
  if (recv_pinned) std::memcpy(recv, recv_pinned, recv_bytes);
}

}  // namespace mdtrain
