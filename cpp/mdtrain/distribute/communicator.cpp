// Argument validation shared by every backend, and the Tensor forms of the collectives.
#include "mdtrain/distribute/communicator.h"

#include <cmath>
#include <cstdint>

#include "mdtrain/core/errors.h"
#include "mdtrain/core/tensor.h"

namespace mdtrain {

const char* name_of(CountedCollective kind) {
  switch (kind) {
    case CountedCollective::AllReduce: return "all_reduce";
    case CountedCollective::Reduce: return "reduce";
    case CountedCollective::Broadcast: return "broadcast";
    case CountedCollective::AllGather: return "all_gather";
    case CountedCollective::ReduceScatter: return "reduce_scatter";
    case CountedCollective::Send: return "send";
    case CountedCollective::Recv: return "recv";
  }
  return "unknown";
}

const char* name_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "unknown";
}

namespace {

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  auto pa = reinterpret_cast<std::uintptr_t>(a);
  auto pb = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

void Communicator::set_timeout(double seconds) {
  MDTRAIN_CHECK(seconds > 0 && !std::isnan(seconds), std::invalid_argument, "[", backend(),
                "] set_timeout: seconds must be > 0 (got ", seconds, ")");
  timeout_ = seconds;
  on_timeout_changed(seconds);
}

void Communicator::check_buffer(const char* op, const void* ptr, std::size_t count, const char* what) const {
  MDTRAIN_CHECK(ptr != nullptr || count == 0, std::invalid_argument, "[", backend(), "] ", op, ": ", what,
                " is null but count is ", count);
}

void Communicator::check_op(const char* op, DType dtype, ReduceOp reduce) const {
  MDTRAIN_CHECK(reduce == ReduceOp::Sum || reduce == ReduceOp::Mean || reduce == ReduceOp::Max ||
                    reduce == ReduceOp::Min,
                std::invalid_argument, "[", backend(), "] ", op, ": unknown reduce op ", static_cast<int>(reduce));
  size_of(dtype);  // rejects an out-of-range dtype
  MDTRAIN_CHECK(reduce != ReduceOp::Mean || is_floating(dtype), std::invalid_argument, "[", backend(), "] ", op,
                ": op mean needs a floating dtype (got ", name_of(dtype), ")");
}

void Communicator::check_device(const Device& device) const {
  MDTRAIN_CHECK(device.is_cpu(), std::invalid_argument, "[", backend(), "] tensors must be on a CPU device (got ",
                device.to_string(), ")");
}

void Communicator::check_tensor(const char* op, const Tensor& tensor, const char* what) const {
  MDTRAIN_CHECK(tensor.defined(), std::invalid_argument, "[", backend(), "] ", op, ": ", what,
                " is an undefined tensor");
  check_device(tensor.device());
}

void Communicator::all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) {
  check_buffer("all_reduce", data, count, "data");
  check_op("all_reduce", dtype, op);
  tally(CountedCollective::AllReduce, count, dtype);
  do_all_reduce(data, count, dtype, op);
}

void Communicator::reduce(void* data, std::size_t count, DType dtype, ReduceOp op, int root) {
  check_buffer("reduce", data, count, "data");
  check_op("reduce", dtype, op);
  MDTRAIN_CHECK(root >= 0 && root < size(), std::invalid_argument, "[", backend(), "] reduce: root must be in [0, ",
                size(), ") (got ", root, ")");
  tally(CountedCollective::Reduce, count, dtype);
  do_reduce(data, count, dtype, op, root);
}

void Communicator::broadcast(void* data, std::size_t count, DType dtype, int root) {
  check_buffer("broadcast", data, count, "data");
  size_of(dtype);
  MDTRAIN_CHECK(root >= 0 && root < size(), std::invalid_argument, "[", backend(), "] broadcast: root must be in [0, ",
                size(), ") (got ", root, ")");
  tally(CountedCollective::Broadcast, count, dtype);
  do_broadcast(data, count, dtype, root);
}

void Communicator::all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype) {
  check_buffer("all_gather", send, count_per_rank, "send");
  check_buffer("all_gather", recv, count_per_rank, "recv");
  const std::size_t block = count_per_rank * size_of(dtype);
  const bool in_place = send == static_cast<const char*>(recv) + rank() * block;
  MDTRAIN_CHECK(in_place || !overlaps(send, block, recv, block * size()), std::invalid_argument, "[", backend(),
                "] all_gather: send overlaps recv but is not recv + rank * ",
                "count_per_rank (the only in-place form)");
  tally(CountedCollective::AllGather, count_per_rank * static_cast<std::size_t>(size()), dtype);
  do_all_gather(send, recv, count_per_rank, dtype);
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype, ReduceOp op) {
  check_buffer("reduce_scatter", send, count_per_rank, "send");
  check_buffer("reduce_scatter", recv, count_per_rank, "recv");
  check_op("reduce_scatter", dtype, op);
  const std::size_t block = count_per_rank * size_of(dtype);
  const bool in_place = recv == static_cast<const char*>(send) + rank() * block;
  MDTRAIN_CHECK(in_place || !overlaps(recv, block, send, block * size()), std::invalid_argument, "[", backend(),
                "] reduce_scatter: recv overlaps send but is not send + rank * ",
                "count_per_rank (the only in-place form)");
  tally(CountedCollective::ReduceScatter, count_per_rank * static_cast<std::size_t>(size()), dtype);
  do_reduce_scatter(send, recv, count_per_rank, dtype, op);
}

void Communicator::barrier() { do_barrier(); }

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  auto child = do_split(color, key);
  // The contract, whatever the backend: a group for a color, none without one.
  MDTRAIN_CHECK((child != nullptr) == (color >= 0), std::logic_error, "[", backend(), "] split: the backend returned ",
                child ? "a group" : "no group", " for color ", color);
  if (child) child->set_timeout(timeout());
  return child;
}

std::unique_ptr<Communicator> Communicator::do_split(int, int) {
  fail<std::logic_error>("[", backend(), "] split: this backend does not implement it");
}

void Communicator::check_peer(const char* op, int peer) const {
  MDTRAIN_CHECK(peer >= 0 && peer < size() && peer != rank(), std::invalid_argument, "[", backend(), "] ", op,
                ": peer must be another rank in [0, ", size(), ") than this rank ", rank(), " (got ", peer, ")");
}

void Communicator::send(const void* data, std::size_t count, DType dtype, int peer) {
  check_buffer("send", data, count, "data");
  size_of(dtype);
  check_peer("send", peer);
  tally(CountedCollective::Send, count, dtype);
  do_send(data, count, dtype, peer);
}

void Communicator::recv(void* data, std::size_t count, DType dtype, int peer) {
  check_buffer("recv", data, count, "data");
  size_of(dtype);
  check_peer("recv", peer);
  tally(CountedCollective::Recv, count, dtype);
  do_recv(data, count, dtype, peer);
}

void Communicator::send_recv(const void* send_data, std::size_t send_count, int send_peer, void* recv_data,
                             std::size_t recv_count, int recv_peer, DType dtype) {
  check_buffer("send_recv", send_data, send_count, "send");
  check_buffer("send_recv", recv_data, recv_count, "recv");
  size_of(dtype);
  check_peer("send_recv", send_peer);
  check_peer("send_recv", recv_peer);
  tally(CountedCollective::Send, send_count, dtype);
  tally(CountedCollective::Recv, recv_count, dtype);
  do_send_recv(send_data, send_count, send_peer, recv_data, recv_count, recv_peer, dtype);
}

void Communicator::do_send_recv(const void* send_data, std::size_t send_count, int send_peer, void* recv_data,
                                std::size_t recv_count, int recv_peer, DType dtype) {
  do_send(send_data, send_count, dtype, send_peer);
  do_recv(recv_data, recv_count, dtype, recv_peer);
}

void Communicator::do_send(const void*, std::size_t, DType, int) {
  fail<std::logic_error>("[", backend(), "] send: this backend does not implement it");
}

void Communicator::do_recv(void*, std::size_t, DType, int) {
  fail<std::logic_error>("[", backend(), "] recv: this backend does not implement it");
}

void Communicator::enqueue_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) {
  check_buffer("enqueue_all_reduce", data, count, "data");
  check_op("enqueue_all_reduce", dtype, op);
  tally(CountedCollective::AllReduce, count, dtype);
  do_enqueue_all_reduce(data, count, dtype, op);
}

void Communicator::wait_enqueued() { do_wait_enqueued(); }

bool Communicator::enqueues_all_reduce(const Device&) const { return false; }

void Communicator::do_enqueue_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) {
  do_all_reduce(data, count, dtype, op);
}

// buffer_owners() for the duration of one Tensor-form call.
class BufferOwnersScope {
 public:
  BufferOwnersScope(Communicator& comm, std::vector<std::shared_ptr<void>> owners) : comm_(comm) {
    comm_.buffer_owners_ = std::move(owners);
  }
  ~BufferOwnersScope() { comm_.buffer_owners_.clear(); }
  BufferOwnersScope(const BufferOwnersScope&) = delete;
  BufferOwnersScope& operator=(const BufferOwnersScope&) = delete;

 private:
  Communicator& comm_;
};

void Communicator::all_reduce(Tensor& tensor, ReduceOp op) {
  check_tensor("all_reduce", tensor, "tensor");
  BufferOwnersScope owners(*this, {tensor.storage()});
  all_reduce(tensor.raw(), static_cast<std::size_t>(tensor.numel()), tensor.dtype(), op);
}

void Communicator::broadcast(Tensor& tensor, int root) {
  check_tensor("broadcast", tensor, "tensor");
  BufferOwnersScope owners(*this, {tensor.storage()});
  broadcast(tensor.raw(), static_cast<std::size_t>(tensor.numel()), tensor.dtype(), root);
}

void Communicator::all_gather(const Tensor& send, Tensor& recv) {
  check_tensor("all_gather", send, "send");
  check_tensor("all_gather", recv, "recv");
  MDTRAIN_CHECK(send.dtype() == recv.dtype(), std::invalid_argument, "[", backend(), "] all_gather: send is ",
                name_of(send.dtype()), " but recv is ", name_of(recv.dtype()));
  MDTRAIN_CHECK(recv.numel() == send.numel() * size(), std::invalid_argument, "[", backend(), "] all_gather: recv ",
                to_string(recv.shape()), " must hold size() = ", size(), " times the elements of send ",
                to_string(send.shape()));
  BufferOwnersScope owners(*this, {send.storage(), recv.storage()});
  all_gather(send.raw(), recv.raw(), static_cast<std::size_t>(send.numel()), send.dtype());
}

void Communicator::reduce_scatter(const Tensor& send, Tensor& recv, ReduceOp op) {
  check_tensor("reduce_scatter", send, "send");
  check_tensor("reduce_scatter", recv, "recv");
  MDTRAIN_CHECK(send.dtype() == recv.dtype(), std::invalid_argument, "[", backend(), "] reduce_scatter: send is ",
                name_of(send.dtype()), " but recv is ", name_of(recv.dtype()));
  MDTRAIN_CHECK(send.numel() == recv.numel() * size(), std::invalid_argument, "[", backend(), "] reduce_scatter: send ",
                to_string(send.shape()), " must hold size() = ", size(), " times the elements of recv ",
                to_string(recv.shape()));
  BufferOwnersScope owners(*this, {send.storage(), recv.storage()});
  reduce_scatter(send.raw(), recv.raw(), static_cast<std::size_t>(recv.numel()), recv.dtype(), op);
}

}  // namespace mdtrain
