// The MPI communicator (see mpi_communicator.h for what it guarantees). The only file that
// includes mpi.h; CMake compiles it instead of no_mpi.cpp when MPI is found.
#include "mdtrain/distribute/mpi/mpi_communicator.h"

// Only MPI's C API: the deprecated C++ bindings that mpi.h would add in a C++ file do not build
// warning-free.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
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

using Clock = std::chrono::steady_clock;

// Kinds as headers and status replies carry them: the values of the shared CollectiveKind.
constexpr int wire(CollectiveKind kind) { return static_cast<int>(kind); }
constexpr int kNone = wire(CollectiveKind::None);
constexpr int kAllReduce = wire(CollectiveKind::AllReduce);
constexpr int kReduce = wire(CollectiveKind::Reduce);
constexpr int kBroadcast = wire(CollectiveKind::Broadcast);
constexpr int kAllGather = wire(CollectiveKind::AllGather);
constexpr int kReduceScatter = wire(CollectiveKind::ReduceScatter);
constexpr int kBarrier = wire(CollectiveKind::Barrier);
constexpr int kSplit = wire(CollectiveKind::Split);

const char* kind_name(std::int64_t kind) { return name_of(static_cast<CollectiveKind>(kind)); }

// A collective first waits for every rank's header (kHeaderPhase: this is where a missing rank
// makes it wait), then, when the data did not fit in the header block, moves it (kDataPhase).
enum Phase : int { kHeaderPhase = 0, kDataPhase = 1 };

// Messages on a communicator's control duplicate.
// A failure notice carries the reason; an abandon notice says that the sender gave up its part
// of collective #seq, so peers moving that collective's data must stop waiting for it.
enum Tag : int { kTagQuery = 1, kTagReply = 2, kTagFailure = 3, kTagAbandoned = 4 };

// What a rank called, as exchanged before every collective. Fields a kind does not use are 0.
struct Header {
  std::int64_t seq, kind, count, dtype, op, root, payload_bytes, unused;
};
constexpr std::size_t kHeaderBytes = sizeof(Header);
static_assert(kHeaderBytes == 64, "the header is one cache line");
constexpr int kTagHeader = 1;        // header messages on the data communicator (libnbc's tags are < 0)
constexpr int kTagPointToPoint = 2;  // send/recv messages on the data communicator
// What a point-to-point message carries before its payload, so a recv can check the call.
struct PointToPointHeader {
  std::int64_t count, dtype;
};
// A rank that made no MPI call for this long may have notices waiting (see service()).
constexpr auto kAway = std::chrono::milliseconds(1);

bool same_call(const Header& a, const Header& b) {
  return a.seq == b.seq && a.kind == b.kind && a.count == b.count && a.dtype == b.dtype && a.op == b.op &&
         a.root == b.root;
}

std::string describe(const Header& h) {
  const auto kind = static_cast<CollectiveKind>(h.kind);
  std::string s = cat(name_of(kind), " #", h.seq);
  if (h.kind == kBarrier || h.kind == kSplit) return s;
  s += cat("(count ", h.count, ", ", name_of(static_cast<DType>(h.dtype)));
  if (has_reduce_op(kind)) s += cat(", ", name_of(static_cast<ReduceOp>(h.op)));
  if (has_root(kind)) s += cat(", root ", h.root);
  return s + ")";
}

// A status answer: what the answering rank is doing on the asked communicator, and on another
// of its MPI communicators when it is waiting there instead.
struct Reply {
  std::int64_t query, seq, kind, phase, last_kind, other_id, other_seq, other_kind;
};

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    case DType::UInt8: return MPI_UINT8_T;
  }
  fail<std::invalid_argument>("[mpi] unsupported dtype ", static_cast<int>(dtype));
}

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  return cat(std::string(text, static_cast<std::size_t>(len)), " (error ", rc, ")");
}

void check_mpi(int rc, const char* call) {
  if (rc != MPI_SUCCESS) fail<std::runtime_error>("[mpi] ", call, " failed: ", mpi_error_text(rc));
}

int to_int(std::size_t n) { return static_cast<int>(n); }  // callers keep n <= INT_MAX

// Memory an abandoned collective's MPI requests may still use. MPI cannot cancel a collective,
// so it stays allocated until the requests complete (reap_graveyard), possibly forever.
//
// No MPI request ever reads or writes the caller's buffers: a collective that throws has to
// leave its pending requests behind (a peer that gave up never posts their partners, so they
// may never complete), and the caller frees its buffers as soon as the call returns. Open MPI
// keeps moving a matched rendezvous transfer whenever this process makes progress (any later
// MPI call), so a request left on caller memory reads freed memory (observed: a segfault in
// mca_pml_ob1_send_request_schedule_once, and a peer's CMA read failing with EFAULT) or writes
// into memory the caller reused. So every data-phase send goes out of a copy in `staging` and
// every receive lands there, then is copied out once its request completed: the memory an
// abandoned request uses is then always the graveyard's. The alternative, draining the abandoned
// requests before throwing, is unsound: a request whose partner is not posted yet looks the same
// whether that peer gave up in its header phase (it never posts it: the drain waits forever) or is
// merely slow (it posts it later: the drain is needed), and telling them apart takes an agreement
// round among all ranks on every failure. The copies cost one memcpy of each piece in and/or out
// (all_reduce: the (n-1)/n of a chunk other ranks reduce, and the slices they send back), which
// matters most where transfers are memcpys too: shared memory (see docs/communicator.md).
//
// Except when the caller's buffers have known owners (the Tensor forms: buffer_owners()): then
// all_reduce and broadcast post their requests on the caller's memory directly, and a collective
// given up on puts the owners in the graveyard with its requests, so the memory outlives them
// (as PyTorch's ProcessGroupMPI keeps the tensors in its Work objects).
struct Scratch {
  std::vector<unsigned char> mine;                  // this rank's header block
  std::vector<unsigned char> blocks;                // every rank's header block
  std::vector<std::vector<unsigned char>> staging;  // per pipeline slot: MPI's only data buffers
  std::vector<std::vector<int>> counts;             // per slot: 4 x size ints for v-collectives
  std::vector<std::vector<char>> sends;             // bodies of control messages in flight
  MPI_Comm comms[1] = {MPI_COMM_NULL};              // where MPI_Comm_idup writes the new communicator
};

struct Abandoned {
  std::vector<MPI_Request> requests;
  std::unique_ptr<Scratch> scratch;
  std::vector<std::shared_ptr<void>> owners;  // of caller buffers the requests use (direct)
};

// Set when any MPI group of this process failed (a timeout, an abort, a peer's notice): MPI_Finalize
// could then wait forever for a rank that is stuck outside MPI. Written under different locks.
std::atomic<bool>& any_group_failed() {
  static std::atomic<bool> failed{false};
  return failed;
}

}  // namespace

struct MpiCommunicator::State {
  MpiCommunicator* owner = nullptr;
  MpiOptions options;
  int id = 0;
  int rank = 0;
  int size = 1;
  bool may_spin = true;
  std::size_t fused = 0;             // MpiCommunicator::fused_bytes(size)
  MPI_Comm data = MPI_COMM_NULL;     // header exchanges, single-stage collectives, first stages
  MPI_Comm data2 = MPI_COMM_NULL;    // second stages of pipelined collectives (see run)
  MPI_Comm control = MPI_COMM_NULL;  // status queries, replies, failure notices

  // Progress, read by other threads answering status queries: guarded by the runtime mutex.
  unsigned long long seq = 0;               // collectives entered
  unsigned long long sends = 0, recvs = 0;  // point-to-point calls (for messages)
  int kind = kNone;                         // the collective in progress
  int last_kind = kNone;                    // kind of collective #seq once it ended
  int phase = kHeaderPhase;

  GroupFailure failure;  // the group's first failure, seen here or told by a peer

  Clock::time_point last_active{};  // when the last collective ended
  std::vector<bool> arrived;        // whose header of the current collective came in

  std::int64_t query = 0;  // id of this rank's last status query
  std::vector<bool> answered;
  std::vector<Reply> replies;
  std::vector<MPI_Request> send_requests;  // control messages in flight (bodies in scratch)
  bool tainted = false;                    // requests were abandoned: the communicators must never be freed
  std::int64_t abandoned_by_peer = 0;      // highest collective a peer gave up (kTagAbandoned)

  std::unique_ptr<Scratch> scratch = std::make_unique<Scratch>();
  // The collective in progress uses the caller's buffers directly: their owners, kept alive by
  // the graveyard if it is given up (see Scratch). Empty: everything goes through staging.
  std::vector<std::shared_ptr<void>> owners;
  std::function<bool(bool issued)> data_phase_hook;  // MpiCommunicator::set_data_phase_hook

  // ---- everything below runs with the runtime mutex held, unless said otherwise ----

  // Whether the group failed (mutex held: a peer's notice is recorded by whichever thread
  // services this communicator).
  bool failed() const { return failure.failed(); }

  // Every failure of the group is recorded here: the group's record, and the process's flag.
  void record_failure(const std::string& reason, bool timeout) {
    failure.record(reason, timeout);
    any_group_failed() = true;
  }

  [[noreturn]] void throw_group_failure(bool entering) const {
    failure.rethrow("mpi", cat(kind_name(kind), " #", seq), rank, entering);
  }

  // An MPI error leaves the communicator unusable.
  void check(int rc, const char* call) {
    if (rc == MPI_SUCCESS) return;
    const std::string reason = cat(call, " failed on rank ", rank, ": ", mpi_error_text(rc));
    record_failure(reason, false);
    throw std::runtime_error("[mpi] " + reason);
  }

  void post(int to, int tag, const void* body, std::size_t bytes) {
    auto& buffer = scratch->sends.emplace_back(static_cast<const char*>(body), static_cast<const char*>(body) + bytes);
    MPI_Request request;
    check(MPI_Isend(buffer.data(), to_int(bytes), MPI_BYTE, to, tag, control, &request), "MPI_Isend");
    send_requests.push_back(request);
  }

  void reap_sends() {
    if (send_requests.empty()) return;
    int done = 0;
    check(MPI_Testall(to_int(send_requests.size()), send_requests.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (done) {
      send_requests.clear();
      scratch->sends.clear();
    }
  }

  void notify_peers(const std::string& reason, bool timeout) {
    std::string body = (timeout ? "T" : "A") + reason;
    for (int p = 0; p < size; ++p) {
      if (p != rank) post(p, kTagFailure, body.data(), body.size());
    }
  }

  void notify_abandoned() {
    std::string body(sizeof(std::int64_t), '\0');
    const auto s = static_cast<std::int64_t>(seq);
    std::memcpy(body.data(), &s, sizeof s);
    body += (failure.is_timeout() ? "T" : "A") + failure.reason();
    for (int p = 0; p < size; ++p) {
      if (p != rank) post(p, kTagAbandoned, body.data(), body.size());
    }
  }

  // Answers queries and records replies and notices that reached this communicator. `current`
  // is the communicator whose collective is polling, if any: its state goes into the answers.
  void service(const State* current) {
    // Open MPI's MPI_Improbe looks at the matched messages before it makes progress, so a message
    // that arrived while this process made no MPI call shows at the second probe, not the first.
    for (int misses = 0; misses < 2;) {
      int flag = 0;
      MPI_Message message;
      MPI_Status status;
      check(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, control, &flag, &message, &status), "MPI_Improbe");
      if (!flag) {
        ++misses;
        continue;
      }
      misses = 0;
      int bytes = 0;
      check(MPI_Get_count(&status, MPI_BYTE, &bytes), "MPI_Get_count");
      std::vector<char> body(static_cast<std::size_t>(std::max(bytes, 1)));
      check(MPI_Mrecv(body.data(), bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
      const int from = status.MPI_SOURCE;
      if (status.MPI_TAG == kTagQuery && bytes == sizeof(std::int64_t)) {
        Reply reply{};
        std::memcpy(&reply.query, body.data(), sizeof(std::int64_t));
        reply.seq = static_cast<std::int64_t>(seq);
        reply.kind = kind;
        reply.phase = phase;
        reply.last_kind = kind == kNone ? last_kind : kind;
        if (current != nullptr && current != this && current->kind != kNone) {
          reply.other_id = current->id;
          reply.other_seq = static_cast<std::int64_t>(current->seq);
          reply.other_kind = current->kind;
        }
        post(from, kTagReply, &reply, sizeof reply);
      } else if (status.MPI_TAG == kTagReply && bytes == sizeof(Reply)) {
        Reply reply;
        std::memcpy(&reply, body.data(), sizeof reply);
        if (reply.query == query && static_cast<std::size_t>(from) < answered.size()) {
          answered[static_cast<std::size_t>(from)] = true;
          replies[static_cast<std::size_t>(from)] = reply;
        }
      } else if (status.MPI_TAG == kTagFailure && bytes >= 1) {
        record_failure(std::string(body.data() + 1, static_cast<std::size_t>(bytes - 1)), body[0] == 'T');
      } else if (status.MPI_TAG == kTagAbandoned && bytes > static_cast<int>(sizeof(std::int64_t))) {
        std::int64_t s = 0;
        std::memcpy(&s, body.data(), sizeof s);
        abandoned_by_peer = std::max(abandoned_by_peer, s);
        const std::size_t at = sizeof s + 1;
        record_failure(std::string(body.data() + at, static_cast<std::size_t>(bytes) - at), body[sizeof s] == 'T');
      }
    }
    reap_sends();
  }

  // Takes `comm` (every rank of it just made it) as this state's data communicator, with its two
  // private duplicates. Blocking, collective over `comm`.
  void adopt(MPI_Comm comm);
  void abandon(std::vector<MPI_Request>& requests);
  void give_up(std::vector<MPI_Request>& requests);
  void service_all();
  void begin(int k);
  void end();
  void ensure_usable() const;

  // ---- these take the runtime mutex themselves ----

  struct Engine {
    int chunks = 1;
    int stages = 1;
    int slots = 1;
    // Starts step `stage` of `chunk` in `slot` (any local work included); leaves *request null
    // when the step issued no MPI request.
    std::function<void(int chunk, int stage, int slot, MPI_Request* request)> step;
    std::function<void(int chunk, int stage, int slot)> on_complete;  // optional
  };
  void run(const Engine& engine);
  void ask_peers();
  std::string timeout_report() const;
  void exchange(const Header& header, const void* payload, std::size_t payload_bytes);
  void enter_data_phase();
  void finish_data_phase();
  void finish_fused();
  // An MPI_Ibarrier polled like any data transfer: once it completed here, every rank finished
  // the header exchange (none gave up) and takes the next, blocking step too.
  void confirm_everyone_stays();
  std::unique_ptr<State> split_state(int color, int key);
  std::size_t block_bytes() const { return kHeaderBytes + fused; }
  const unsigned char* payload_of(int r) const {
    return scratch->blocks.data() + static_cast<std::size_t>(r) * block_bytes() + kHeaderBytes;
  }
  Header header_of(int r) const {
    Header h;
    std::memcpy(&h, scratch->blocks.data() + static_cast<std::size_t>(r) * block_bytes(), sizeof h);
    return h;
  }
  Header make_header(int k, std::size_t count, DType dtype, ReduceOp op, int root, std::size_t payload_bytes) const {
    Header h{};
    h.seq = static_cast<std::int64_t>(seq);
    h.kind = k;
    h.count = static_cast<std::int64_t>(count);
    h.dtype = static_cast<std::int64_t>(dtype);
    h.op = static_cast<std::int64_t>(op);
    h.root = root;
    h.payload_bytes = static_cast<std::int64_t>(payload_bytes);
    return h;
  }
  // Folds payloads (every rank's, in rank order) at element `offset` into `out`.
  void reduce_payloads(void* out, std::size_t offset, std::size_t count, DType dtype, ReduceOp op) const {
    std::vector<const void*> inputs(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) inputs[static_cast<std::size_t>(r)] = payload_of(r);
    void* outputs[1] = {out};
    detail::reduce_in_rank_order(outputs, 1, inputs.data(), size, offset, count, dtype, op);
  }
  void reduce_chunks(void* data, std::size_t count, DType dtype, ReduceOp op, int root);
  // Takes the caller's buffer owners for the collective in progress (locks the mutex): true, and
  // the data phase may post requests on the caller's memory, when there are some and each owns
  // something (a Tensor wrapping memory without an owner has a pointer but no control block).
  bool hold(const std::vector<std::shared_ptr<void>>& given);
  void bytes_per_slot(std::size_t staging_bytes, std::size_t count_ints);
};

namespace {

struct Runtime {
  std::mutex mutex;  // every MPI call mdtrain makes holds it (MPI_THREAD_SERIALIZED)
  bool initialized_by_us = false;
  bool ready = false;      // initialized, not finalized by mpi_finalize
  bool finalized = false;  // by mpi_finalize: MPI cannot be initialized again
  MpiWorldInfo world;
  int made = 0;  // MPI communicators made in this process
  std::vector<MpiCommunicator::State*> live;
  bool end_job_on_failure = false;  // mpi_end_job_on_failure
  std::vector<std::unique_ptr<Abandoned>> graveyard;
  // Caller buffer owners whose requests completed: dropped only once the mutex is released (see
  // MpiCollective), since an owner's deleter may wait (a NumPy array's takes the GIL, which a
  // Python thread waiting for this mutex may hold).
  std::vector<std::shared_ptr<void>> released;
};

// Never destroyed: the atexit finalizer and communicators outliving static destruction use it.
Runtime& runtime() {
  static Runtime* rt = new Runtime();
  return *rt;
}

void finalize_at_exit() {
  // A group failed and the caller asked for it (a multi-worker job): end the whole job, so the
  // launcher returns, instead of MPI_Finalize waiting for a rank that may be stuck outside MPI.
  if (runtime().end_job_on_failure && any_group_failed()) MPI_Abort(MPI_COMM_WORLD, 1);
  try {
    mpi_finalize();
  } catch (...) {
    // Nothing useful can be done about a failing MPI_Finalize during exit.
  }
}

void initialize_locked(Runtime& rt) {
  if (rt.ready) return;
  MDTRAIN_CHECK(!rt.finalized, std::runtime_error,
                "[mpi] MPI was finalized (mpi_finalize() or process exit) and cannot be "
                "initialized again in this process");
  int finalized = 0;
  check_mpi(MPI_Finalized(&finalized), "MPI_Finalized");
  MDTRAIN_CHECK(!finalized, std::runtime_error,
                "[mpi] MPI was finalized by other code in this process and cannot be used again");
  int initialized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // Collectives run on replica threads but never two at once per process (mdtrain's own mutex
    // serializes its MPI calls), which is exactly MPI_THREAD_SERIALIZED: cheaper than MULTIPLE.
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    rt.initialized_by_us = true;
    std::atexit(finalize_at_exit);
  } else {
    check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  MDTRAIN_CHECK(provided >= MPI_THREAD_SERIALIZED, std::runtime_error, "[mpi] MPI provides thread level ", provided,
                " but mdtrain calls MPI from replica "
                "threads and needs MPI_THREAD_SERIALIZED (",
                MPI_THREAD_SERIALIZED, ") or more",
                initialized ? ": initialize MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)" : "");
  MpiWorldInfo world;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world.rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &world.size), "MPI_Comm_size");
  // Collective, but every process runs it right after MPI_Init, whatever made it initialize.
  MPI_Comm host = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host), "MPI_Comm_split_type");
  check_mpi(MPI_Comm_rank(host, &world.local_rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(host, &world.local_size), "MPI_Comm_size");
  check_mpi(MPI_Comm_free(&host), "MPI_Comm_free");
  rt.world = world;
  rt.ready = true;
}

// Frees abandoned memory whose requests completed after all (a late peer arrived).
void reap_graveyard(Runtime& rt) {
  auto& g = rt.graveyard;
  for (auto& a : g) {
    int done = 0;
    if (MPI_Testall(to_int(a->requests.size()), a->requests.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS ||
        !done) {
      continue;
    }
    for (auto& owner : a->owners) rt.released.push_back(std::move(owner));
    a.reset();
  }
  g.erase(std::remove(g.begin(), g.end(), nullptr), g.end());
}

// Elements per pipeline piece: `wanted`, or more when count would need over INT_MAX pieces.
std::size_t piece_size(std::size_t count, std::size_t wanted) {
  return std::max({wanted, std::size_t{1}, (count + INT_MAX - 1) / INT_MAX});
}

Clock::time_point deadline_after(Clock::time_point t, double limit) {
  if (limit > 1e9) return Clock::time_point::max();
  return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit));
}

}  // namespace

// ---- State: bookkeeping with the mutex held
// ------------------------------------------------------

void MpiCommunicator::State::ensure_usable() const {
  MDTRAIN_CHECK(runtime().ready, std::runtime_error, "[mpi] ", kind_name(kind), " #", seq, " on rank ", rank,
                ": MPI was finalized (mpi_finalize() or process exit)");
}

void MpiCommunicator::State::service_all() {
  for (State* s : runtime().live) s->service(this);
}

void MpiCommunicator::State::abandon(std::vector<MPI_Request>& requests) {
  auto a = std::make_unique<Abandoned>();
  for (MPI_Request r : requests) {
    if (r != MPI_REQUEST_NULL) a->requests.push_back(r);
  }
  std::fill(requests.begin(), requests.end(), MPI_REQUEST_NULL);
  if (a->requests.empty()) return;
  tainted = true;
  a->owners = owners;
  // The control messages in flight keep their bodies in the fresh scratch.
  auto fresh = std::make_unique<Scratch>();
  fresh->sends = std::move(scratch->sends);
  a->scratch = std::move(scratch);
  scratch = std::move(fresh);
  Runtime& rt = runtime();
  rt.graveyard.push_back(std::move(a));
  reap_graveyard(rt);
}

// Leaves the collective in progress (failed is set): its requests to the graveyard, and every
// peer told, so that peers already moving its data stop waiting for this rank.
void MpiCommunicator::State::give_up(std::vector<MPI_Request>& requests) {
  abandon(requests);
  try {
    notify_abandoned();
  } catch (const std::exception&) {
    // An MPI error while telling the peers: they time out instead.
  }
}

void MpiCommunicator::State::begin(int k) {
  ++seq;
  kind = k;
  phase = kHeaderPhase;
  ensure_usable();
  // Back-to-back collectives skip this: a peer's failure notice then shows while waiting.
  if (Clock::now() - last_active > kAway) service_all();
  if (failed()) throw_group_failure(true);
}

void MpiCommunicator::State::end() {
  owners.clear();  // normally moved out already by ~MpiCollective, to be dropped without the mutex
  last_active = Clock::now();
  last_kind = kind;
  kind = kNone;
  phase = kHeaderPhase;
}

// ---- State: waiting
// ------------------------------------------------------------------------------

void MpiCommunicator::State::run(const Engine& e) {
  Runtime& rt = runtime();
  // Chunk c lives in slot c % slots. Every rank must issue the collectives of a communicator in
  // the same order, but completions come in any order: so stage s of chunk c is issued only
  // after stage s of chunk c-1 (and stage 0 of chunk c only once chunk c-slots left its slot),
  // and each stage has its own communicator (data_comm(s)). Per communicator the order is then
  // ascending chunks on every rank.
  const int slots = std::max(1, std::min(e.slots, e.chunks));
  const int stages = e.stages;
  std::vector<MPI_Request> requests(static_cast<std::size_t>(slots * stages), MPI_REQUEST_NULL);
  std::vector<int> chunk_in(static_cast<std::size_t>(slots), -1);
  std::vector<int> stages_done(static_cast<std::size_t>(slots), 0);
  std::vector<int> issued(static_cast<std::size_t>(stages), 0);
  std::vector<int> completed(requests.size(), 0);
  int finished = 0;
  auto complete = [&](int slot, int stage) {
    const auto i = static_cast<std::size_t>(slot);
    if (e.on_complete) e.on_complete(chunk_in[i], stage, slot);
    stages_done[i] = stage + 1;
    if (stage + 1 == stages) {
      chunk_in[i] = -1;
      ++finished;
    }
  };
  auto issue = [&] {
    for (bool any = true; any;) {
      any = false;
      for (int stage = 0; stage < stages; ++stage) {
        auto& next = issued[static_cast<std::size_t>(stage)];
        while (next < e.chunks) {
          const int c = next, slot = c % slots;
          const auto i = static_cast<std::size_t>(slot);
          if (stage == 0) {
            if (chunk_in[i] != -1) break;
            chunk_in[i] = c;
            stages_done[i] = 0;
          } else if (chunk_in[i] != c || stages_done[i] < stage) {
            break;
          }
          MPI_Request& request = requests[i * static_cast<std::size_t>(stages) + static_cast<std::size_t>(stage)];
          e.step(c, stage, slot, &request);
          ++next;
          any = true;
          if (request == MPI_REQUEST_NULL) complete(slot, stage);
        }
      }
    }
  };
  // Tests the requests in flight; true when some completed.
  auto test = [&] {
    int n_done = 0;
    check(MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &n_done, completed.data(),
                       MPI_STATUSES_IGNORE),
          "MPI_Testsome");
    if (n_done == MPI_UNDEFINED || n_done == 0) return false;
    for (int k = 0; k < n_done; ++k) {
      const int index = completed[static_cast<std::size_t>(k)];
      complete(index / stages, index % stages);
    }
    issue();
    return true;
  };
  // A step that throws (an MPI error, which marks the group failed) gives the collective up.
  auto guarded = [&](auto&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      record_failure(e.what(), false);
      give_up(requests);
      throw;
    }
  };

  // set_data_phase_hook: called without the lock, so that it may use other communicators.
  auto hook = [&](bool issued) {
    if (phase != kDataPhase || !data_phase_hook || !data_phase_hook(issued)) return;
    std::lock_guard<std::mutex> lock(rt.mutex);
    record_failure(cat("rank ", rank, " gave up ", kind_name(kind), " #", seq, " (data phase hook)"), false);
    give_up(requests);
    throw_group_failure(false);
  };

  const double limit = owner->timeout();
  const Clock::time_point started = Clock::now();
  Clock::time_point deadline = deadline_after(started, limit);
  detail::SpinWait wait(may_spin);
  hook(false);
  bool first = true;
  for (;;) {
    bool progressed = false;
    const bool issuing = first;
    {
      std::lock_guard<std::mutex> lock(rt.mutex);
      ensure_usable();
      guarded([&] {
        if (first) issue();
        first = false;
        if (finished < e.chunks) progressed = test();
      });
      if (finished == e.chunks) return;
    }
    if (issuing) hook(true);
    if (progressed) {
      wait = detail::SpinWait(may_spin);
      // The data phase times out on a lack of progress, not on its length.
      if (phase == kDataPhase) deadline = deadline_after(Clock::now(), limit);
      continue;
    }
    if (!wait.step()) continue;  // still spinning: no clock read, no control traffic

    {
      std::lock_guard<std::mutex> lock(rt.mutex);
      guarded([&] { service_all(); });
      // While data moves, every peer is in this collective and needs this rank: a failure
      // noticed now is thrown after the transfer (finish_data_phase), unless a peer gave this
      // collective up, which it cannot finish then.
      if (failed() && (phase == kHeaderPhase || abandoned_by_peer >= static_cast<std::int64_t>(seq))) {
        give_up(requests);
        throw_group_failure(false);
      }
    }
    if (Clock::now() < deadline) continue;

    ask_peers();
    std::lock_guard<std::mutex> lock(rt.mutex);
    // A late peer may have arrived while we asked: then this was no timeout after all.
    bool progressed_meanwhile = false;
    guarded([&] { progressed_meanwhile = test(); });
    if (finished == e.chunks) return;
    if (progressed_meanwhile) {
      deadline = deadline_after(Clock::now(), limit);
      continue;
    }
    if (failed()) {  // a peer's notice came first: report its diagnosis
      give_up(requests);
      throw_group_failure(false);
    }
    const std::string reason = timeout_report();
    record_failure(reason, true);
    give_up(requests);  // tells the peers why, too
    throw TimeoutError("[mpi] " + reason);
  }
}

// Asks every peer what it is doing; waits until all answered or a short bounded time passed.
void MpiCommunicator::State::ask_peers() {
  Runtime& rt = runtime();
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    ++query;
    answered.assign(static_cast<std::size_t>(size), false);
    replies.assign(static_cast<std::size_t>(size), Reply{});
    for (int p = 0; p < size; ++p) {
      if (p != rank) post(p, kTagQuery, &query, sizeof query);
    }
  }
  const double window = std::clamp(owner->timeout() / 4, 0.05, 1.0);
  const Clock::time_point until = deadline_after(Clock::now(), window);
  while (Clock::now() < until) {
    {
      std::lock_guard<std::mutex> lock(rt.mutex);
      service_all();
      int missing = 0;
      for (int p = 0; p < size; ++p) missing += p != rank && !answered[static_cast<std::size_t>(p)];
      if (missing == 0) return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::string MpiCommunicator::State::timeout_report() const {
  const double window = std::clamp(owner->timeout() / 4, 0.05, 1.0);
  std::vector<MissingRank> missing;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    const auto i = static_cast<std::size_t>(p);
    const bool answer = answered[i];
    const Reply& r = replies[i];
    // Waiting for headers, a rank whose header came in is here; moving data, one that answered
    // from inside this collective is.
    if (phase == kHeaderPhase ? arrived[i] : answer && r.kind == kind && r.seq == static_cast<std::int64_t>(seq)) {
      continue;
    }
    std::string d;
    if (answer && r.kind != kNone) {
      d = cat("rank ", p, " is in ", kind_name(r.kind), " #", r.seq,
              r.phase == kDataPhase ? " (moving data)" : " (waiting for its peers)");
    } else if (answer) {
      d = last_entered(p, static_cast<CollectiveKind>(r.last_kind), static_cast<unsigned long long>(r.seq));
      d += cat(" and is inside no collective of MPI communicator ", id);
      if (r.other_id != 0) {
        d += cat("; it waits in ", kind_name(r.other_kind), " #", r.other_seq, " of MPI communicator ", r.other_id);
      }
    } else if (phase == kDataPhase) {
      d = cat("rank ", p, " entered ", kind_name(kind), " #", seq, " but did not answer within ", window,
              " s: it stopped calling MPI (stuck, or dead)");
    } else {
      // Every rank entered collective #seq-1, or this rank would not have left it.
      d = last_entered(p, static_cast<CollectiveKind>(last_kind), seq - 1);
      d += cat(" and did not answer within ", window,
               " s: it is in no MPI collective of mdtrain (computing, blocked elsewhere, or dead)");
    }
    missing.push_back({p, d});
  }
  const std::string head = timed_out(cat(kind_name(kind), " #", seq), rank, owner->timeout());
  if (missing.empty()) {
    return head + ": every rank is inside this collective, but MPI did not complete it";
  }
  if (phase == kDataPhase) {
    return head + " without progress while moving data: " + missing_ranks(missing, "stopped");
  }
  return head + ": " + missing_ranks(missing);
}

// ---- State: the collectives' building blocks
// -----------------------------------------------------

void MpiCommunicator::State::exchange(const Header& header, const void* payload, std::size_t payload_bytes) {
  // Point to point rather than MPI_Iallgather: half the latency (Open MPI 4.1, 2 ranks), a
  // message only as long as its payload, and it shows exactly whose header came in.
  Scratch& sc = *scratch;
  const std::size_t block = block_bytes();
  const std::size_t bytes = kHeaderBytes + payload_bytes;
  sc.mine.resize(block);
  sc.blocks.resize(static_cast<std::size_t>(size) * block);
  std::memcpy(sc.mine.data(), &header, sizeof header);
  if (payload_bytes > 0) std::memcpy(sc.mine.data() + kHeaderBytes, payload, payload_bytes);
  std::memcpy(sc.blocks.data() + static_cast<std::size_t>(rank) * block, sc.mine.data(), bytes);
  arrived.assign(static_cast<std::size_t>(size), false);
  arrived[static_cast<std::size_t>(rank)] = true;
  const int peers = size - 1;
  auto peer = [&](int c) { return (rank + 1 + c % peers) % size; };
  Engine e;
  e.chunks = 2 * peers;  // receives from every peer first, then sends
  e.slots = 2 * peers;
  e.step = [&](int c, int, int, MPI_Request* request) {
    const int p = peer(c);
    if (c < peers) {
      check(MPI_Irecv(sc.blocks.data() + static_cast<std::size_t>(p) * block, to_int(block), MPI_BYTE, p, kTagHeader,
                      data, request),
            "MPI_Irecv");
    } else {
      check(MPI_Isend(sc.mine.data(), to_int(bytes), MPI_BYTE, p, kTagHeader, data, request), "MPI_Isend");
    }
  };
  e.on_complete = [&](int c, int, int) {
    if (c < peers) arrived[static_cast<std::size_t>(peer(c))] = true;
  };
  // Completed: every rank sent its header, so every rank goes on to the data phase (if any), and
  // this one must too, even if abort() was called meanwhile (finish() throws afterwards).
  run(e);
  for (int r = 0; r < size; ++r) {
    const Header other = header_of(r);
    if (same_call(other, header)) continue;
    // Every rank sees the same headers, so all of them fail here, at the same collective.
    const std::string reason = cat("collective mismatch: rank ", r, " called ", describe(other), " but rank ", rank,
                                   " called ", describe(header));
    std::lock_guard<std::mutex> lock(runtime().mutex);
    service_all();
    if (failed()) throw_group_failure(false);  // a peer gave up first: its reason explains more
    record_failure(reason, false);
    throw std::runtime_error("[mpi] " + reason);
  }
}

bool MpiCommunicator::State::hold(const std::vector<std::shared_ptr<void>>& given) {
  const bool known = !given.empty() && std::all_of(given.begin(), given.end(),
                                                   [](const std::shared_ptr<void>& o) { return o.use_count() > 0; });
  std::lock_guard<std::mutex> lock(runtime().mutex);
  owners = known ? given : std::vector<std::shared_ptr<void>>{};
  return known;
}

void MpiCommunicator::State::enter_data_phase() {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  phase = kDataPhase;
}

void MpiCommunicator::State::finish_data_phase() {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  service_all();
  if (failed()) throw_group_failure(false);
}

void MpiCommunicator::State::finish_fused() {
  // abort() from another thread while the exchange completed; peers' notices show when waiting.
  std::lock_guard<std::mutex> lock(runtime().mutex);
  if (failed()) throw_group_failure(false);
}

void MpiCommunicator::State::adopt(MPI_Comm comm) {
  data = comm;
  check_mpi(MPI_Comm_dup(data, &data2), "MPI_Comm_dup");
  check_mpi(MPI_Comm_dup(data, &control), "MPI_Comm_dup");
  // Errors become exceptions (State::check) instead of MPI's default of ending the job.
  for (MPI_Comm c : {data, data2, control}) {
    check_mpi(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  check_mpi(MPI_Comm_rank(data, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(data, &size), "MPI_Comm_size");
  fused = std::min(fused_bytes(size), options.max_fused_bytes);
}

void MpiCommunicator::State::confirm_everyone_stays() {
  Engine e;
  e.step = [&](int, int, int, MPI_Request* request) { check(MPI_Ibarrier(data, request), "MPI_Ibarrier"); };
  run(e);
}

std::unique_ptr<MpiCommunicator::State> MpiCommunicator::State::split_state(int color, int key) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  // Numbered on every process, with or without a new group, so ids stay the same everywhere.
  const int child_id = ++runtime().made;
  // Nothing between here and the end may give up: the peers are in these blocking calls too.
  MPI_Comm comm = MPI_COMM_NULL;
  check(MPI_Comm_split(data, color < 0 ? MPI_UNDEFINED : color, key, &comm), "MPI_Comm_split");
  if (comm == MPI_COMM_NULL) return nullptr;
  auto child = std::make_unique<State>();
  child->options = options;
  child->id = child_id;
  child->may_spin = may_spin;
  child->adopt(comm);
  return child;
}

void MpiCommunicator::State::bytes_per_slot(std::size_t staging_bytes, std::size_t count_ints) {
  const auto slots = static_cast<std::size_t>(options.chunks_in_flight);
  scratch->staging.resize(slots);
  scratch->counts.resize(slots);
  for (auto& s : scratch->staging) {
    if (s.size() < staging_bytes) s.resize(staging_bytes);
  }
  for (auto& c : scratch->counts) c.resize(count_ints);
}

// all_reduce (root < 0) or reduce to `root`, chunk by chunk: rank r receives slice r of every
// rank's chunk (MPI_Ialltoallv), folds them in rank order, and sends the result to every rank
// (MPI_Iallgatherv, in place) or to the root (MPI_Igatherv). Each element is reduced by one
// rank, in rank order, so every rank (and reduce's root) ends with the same bits. MPI sees only
// a copy of the chunk (see Scratch): the other ranks' slices are copied in before the exchange,
// the reduced slice is written there, and the gathered chunk is copied back once complete.
// Direct (owners known), MPI sends from and gathers into the caller's chunk, without copies.
void MpiCommunicator::State::reduce_chunks(void* data_ptr, std::size_t count, DType dtype, ReduceOp op, int root) {
  const bool direct = !owners.empty();
  const std::size_t elem = size_of(dtype);
  const auto n = static_cast<std::size_t>(size);
  const std::size_t chunk = piece_size(count, std::max(options.chunk_bytes / elem, n));
  const std::size_t chunks = (count + chunk - 1) / chunk;
  const std::size_t slice_max = (chunk + n - 1) / n;
  // Staging: n received slices (this rank's place unused), then (reduce, non-root) the reduced
  // slice, then the copy of the chunk. Counts: the exchange's, then the gather's.
  bytes_per_slot((n + 1) * slice_max * elem + (direct ? 0 : std::min(chunk, count) * elem), 6 * n);
  const MPI_Datatype type = mpi_type(dtype);
  char* base = static_cast<char*>(data_ptr);
  Engine e;
  e.chunks = static_cast<int>(chunks);
  e.stages = 2;
  e.slots = options.chunks_in_flight;
  e.step = [&](int c, int stage, int slot, MPI_Request* request) {
    const std::size_t off = static_cast<std::size_t>(c) * chunk;
    const std::size_t len = std::min(chunk, count - off);
    const std::size_t slice = (len + n - 1) / n;
    const std::size_t my_begin = std::min(len, static_cast<std::size_t>(rank) * slice);
    const std::size_t my_len = std::min(len, my_begin + slice) - my_begin;
    int* send_counts = scratch->counts[static_cast<std::size_t>(slot)].data();
    int* send_displs = send_counts + n;
    int* recv_counts = send_counts + 2 * n;
    int* recv_displs = send_counts + 3 * n;
    int* counts = send_counts + 4 * n;  // every rank's slice, for the gather
    int* displs = send_counts + 5 * n;
    unsigned char* staging = scratch->staging[static_cast<std::size_t>(slot)].data();
    unsigned char* reduced = staging + n * slice_max * elem;
    char* chunk_ptr = base + off * elem;
    // Where MPI reads this rank's contribution and gathers the result.
    void* copy = direct ? static_cast<void*>(chunk_ptr) : reduced + slice_max * elem;
    if (stage == 0) {
      for (std::size_t q = 0; q < n; ++q) {
        const std::size_t b = std::min(len, q * slice);
        counts[q] = to_int(std::min(len, b + slice) - b);
        displs[q] = to_int(b);
        // This rank's own slice stays where it is: no copy to itself.
        const bool self = q == static_cast<std::size_t>(rank);
        send_counts[q] = self ? 0 : counts[q];
        send_displs[q] = displs[q];
        recv_counts[q] = self ? 0 : to_int(my_len);
        recv_displs[q] = to_int(q * my_len);
      }
      if (!direct) {
        // What goes to the others: all but this rank's slice, which the fold reads in place.
        std::memcpy(copy, chunk_ptr, my_begin * elem);
        const std::size_t my_end = my_begin + my_len;
        std::memcpy(static_cast<char*>(copy) + my_end * elem, chunk_ptr + my_end * elem, (len - my_end) * elem);
      }
      check(MPI_Ialltoallv(copy, send_counts, send_displs, type, staging, recv_counts, recv_displs, type, data,
                           request),
            "MPI_Ialltoallv");
      return;
    }
    const bool keep = root < 0 || rank == root;
    void* out = keep ? static_cast<void*>(static_cast<char*>(copy) + my_begin * elem) : reduced;
    if (my_len > 0) {
      std::vector<const void*> inputs(n);
      for (std::size_t q = 0; q < n; ++q) inputs[q] = staging + q * my_len * elem;
      inputs[static_cast<std::size_t>(rank)] = chunk_ptr + my_begin * elem;
      // Kept, the slice goes to the caller too, in the same pass. That output aliases this
      // rank's input: the kernel reads each tile from every input first.
      // Direct, out is that slice of the caller's chunk already.
      void* outputs[2] = {out, base + (off + my_begin) * elem};
      detail::reduce_in_rank_order(outputs, keep && !direct ? 2 : 1, inputs.data(), size, 0, my_len, dtype, op);
    }
    if (root < 0) {
      check(MPI_Iallgatherv(MPI_IN_PLACE, 0, type, copy, counts, displs, type, data2, request), "MPI_Iallgatherv");
    } else {
      check(MPI_Igatherv(rank == root ? MPI_IN_PLACE : out, to_int(my_len), type, copy, counts, displs, type, root,
                         data2, request),
            "MPI_Igatherv");
    }
  };
  // The gathered slices (every rank for all_reduce, the root for reduce) go back to the caller.
  if (!direct && (root < 0 || rank == root)) {
    e.on_complete = [&](int c, int stage, int slot) {
      if (stage != 1) return;
      const std::size_t off = static_cast<std::size_t>(c) * chunk;
      const std::size_t len = std::min(chunk, count - off);
      const std::size_t slice = (len + n - 1) / n;
      const std::size_t my_begin = std::min(len, static_cast<std::size_t>(rank) * slice);
      const std::size_t my_end = std::min(len, my_begin + slice);
      const unsigned char* copy = scratch->staging[static_cast<std::size_t>(slot)].data() + (n + 1) * slice_max * elem;
      std::memcpy(base + off * elem, copy, my_begin * elem);
      std::memcpy(base + (off + my_end) * elem, copy + my_end * elem, (len - my_end) * elem);
    };
  }
  run(e);
}

// The collective in progress, from entry (sequence number, status answers) to its end.
class MpiCollective {
 public:
  MpiCollective(MpiCommunicator::State& s, int kind) : s_(s) {
    std::lock_guard<std::mutex> lock(runtime().mutex);
    try {
      s_.begin(kind);
    } catch (...) {
      s_.end();
      throw;
    }
  }
  ~MpiCollective() {
    std::vector<std::shared_ptr<void>> released;
    {
      std::lock_guard<std::mutex> lock(runtime().mutex);
      released = std::move(s_.owners);
      s_.end();
      for (auto& owner : runtime().released) released.push_back(std::move(owner));
      runtime().released.clear();
    }
    // Dropped here, without the mutex (see Runtime::released).
  }
  MpiCollective(const MpiCollective&) = delete;
  MpiCollective& operator=(const MpiCollective&) = delete;

 private:
  MpiCommunicator::State& s_;
};

// ---- MpiCommunicator
// -----------------------------------------------------------------------------

MpiCommunicator::MpiCommunicator(const MpiOptions& options) : state_(std::make_unique<State>()) {
  MDTRAIN_CHECK(options.chunk_bytes >= 64 && options.chunk_bytes <= (std::size_t{1} << 30), std::invalid_argument,
                "[mpi] MpiOptions: chunk_bytes must be in [64, 2^30] (got ", options.chunk_bytes, ")");
  MDTRAIN_CHECK(options.chunks_in_flight >= 1, std::invalid_argument,
                "[mpi] MpiOptions: chunks_in_flight must be >= 1 (got ", options.chunks_in_flight, ")");
  State& s = *state_;
  s.owner = this;
  s.options = options;
  Runtime& rt = runtime();
  auto handles = std::make_unique<Scratch>();  // where MPI_Comm_idup writes the new handle
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    initialize_locked(rt);
    s.id = ++rt.made;
    s.may_spin = detail::fits_on_cores(rt.world.local_size);
    // Nonblocking, so that a process that never makes its communicator is reported instead of
    // hanging this one. One at a time: Open MPI 4.1 can hang with several MPI_Comm_idup of one
    // communicator outstanding.
    check_mpi(MPI_Comm_idup(MPI_COMM_WORLD, &handles->comms[0], &request), "MPI_Comm_idup");
  }
  const Clock::time_point deadline = deadline_after(Clock::now(), timeout());
  detail::SpinWait wait(s.may_spin);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(rt.mutex);
      int done = 0;
      check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) break;
      if (Clock::now() >= deadline) {
        auto a = std::make_unique<Abandoned>();
        a->requests.push_back(request);
        a->scratch = std::move(handles);
        rt.graveyard.push_back(std::move(a));
        fail<TimeoutError>("[mpi] making MPI communicator ", s.id, " on rank ", rt.world.rank, " timed out after ",
                           timeout(),
                           " s: not every process of the job "
                           "made it (making MPI communicators is collective: every process makes "
                           "them in the same order)");
      }
    }
    if (wait.step()) {
      std::lock_guard<std::mutex> lock(rt.mutex);
      for (State* other : rt.live) other->service(nullptr);
    }
  }
  std::lock_guard<std::mutex> lock(rt.mutex);
  // Every process is past the MPI_Comm_idup, so the blocking duplicates cannot wait for a
  // process that is elsewhere.
  s.adopt(handles->comms[0]);
  rt.live.push_back(&s);
}

MpiCommunicator::MpiCommunicator(std::unique_ptr<State> state) : state_(std::move(state)) {
  state_->owner = this;
  std::lock_guard<std::mutex> lock(runtime().mutex);
  runtime().live.push_back(state_.get());
}

MpiCommunicator::~MpiCommunicator() {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  State& s = *state_;
  rt.live.erase(std::remove(rt.live.begin(), rt.live.end(), &s), rt.live.end());
  int finalized = 0;
  if (!rt.ready || MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  try {
    s.reap_sends();
  } catch (...) {
    // An MPI error while tidying up: the sends go to the graveyard below.
  }
  if (!s.send_requests.empty()) {
    // MPI_Request_free would do for sends, but their bodies must outlive them all the same.
    auto a = std::make_unique<Abandoned>();
    a->requests = std::move(s.send_requests);
    a->scratch = std::move(s.scratch);
    rt.graveyard.push_back(std::move(a));
    s.tainted = true;
  }
  // A message that reaches this process after its communicator was freed is kept by Open MPI 4.1
  // and delivered to the next communicator that gets the same context id here (or, when its
  // sender's rank does not exist there, crashes MPI_Comm_dup: observed with split groups of one
  // rank). Context ids are reused as soon as every member of a new communicator has them free,
  // which groups of other ranks (splits) make likely. So:
  // - The control communicator is never freed: a peer's failure or abandon notice, or status
  //   query, may come at any time, also after this rank's last collective.
  // - Neither are the data communicators of a group that failed (peers' headers of collectives
  //   this rank never joined may still come) or whose requests were abandoned: Open MPI 4.1's
  //   pending nonblocking collectives do not keep their communicator alive either (observed: the
  //   next MPI_Comm_dup hung).
  if (s.tainted || s.failed()) return;
  MPI_Comm_free(&s.data);
  MPI_Comm_free(&s.data2);
  reap_graveyard(rt);
}

std::size_t MpiCommunicator::fused_bytes(int size) {
  // Every rank receives everyone's payload and reduces all of it: cheap while it stays small,
  // and one message each way beats the three collectives of the pipelined path.
  const auto peers = static_cast<std::size_t>(std::max(1, size - 1));
  return std::clamp<std::size_t>((std::size_t{256} << 10) / peers, std::size_t{4} << 10, std::size_t{64} << 10);
}

int MpiCommunicator::rank() const { return state_->rank; }
int MpiCommunicator::size() const { return state_->size; }
int MpiCommunicator::id() const { return state_->id; }
const MpiOptions& MpiCommunicator::options() const { return state_->options; }

void MpiCommunicator::set_data_phase_hook(std::function<bool(bool issued)> hook) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  state_->data_phase_hook = std::move(hook);
}

void MpiCommunicator::abort(const std::string& reason) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  State& s = *state_;
  if (s.failed()) return;
  const std::string why = cat("rank ", s.rank, " aborted the group: ", reason);
  s.record_failure(why, false);
  if (rt.ready) s.notify_peers(why, false);
}

void MpiCommunicator::do_all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op) {
  State& s = *state_;
  MpiCollective collective(s, kAllReduce);
  const std::size_t bytes = count * size_of(dtype);
  const bool fused = bytes <= s.fused;
  s.exchange(s.make_header(kAllReduce, count, dtype, op, 0, fused ? bytes : 0), data, fused ? bytes : 0);
  if (fused) {
    if (count > 0) s.reduce_payloads(data, 0, count, dtype, op);
    return s.finish_fused();
  }
  // A fold over one rank (Mean divides by 1) leaves the data as it is.
  if (s.size == 1) return s.finish_fused();
  s.enter_data_phase();
  s.hold(buffer_owners());
  s.reduce_chunks(data, count, dtype, op, -1);
  s.finish_data_phase();
}

void MpiCommunicator::do_reduce(void* data, std::size_t count, DType dtype, ReduceOp op, int root) {
  State& s = *state_;
  MpiCollective collective(s, kReduce);
  const std::size_t bytes = count * size_of(dtype);
  const bool fused = bytes <= s.fused;
  s.exchange(s.make_header(kReduce, count, dtype, op, root, fused ? bytes : 0), data, fused ? bytes : 0);
  if (fused) {
    if (count > 0 && s.rank == root) s.reduce_payloads(data, 0, count, dtype, op);
    return s.finish_fused();
  }
  if (s.size == 1) return s.finish_fused();
  s.enter_data_phase();
  s.reduce_chunks(data, count, dtype, op, root);
  s.finish_data_phase();
}

void MpiCommunicator::do_broadcast(void* data, std::size_t count, DType dtype, int root) {
  State& s = *state_;
  MpiCollective collective(s, kBroadcast);
  const std::size_t elem = size_of(dtype);
  const std::size_t bytes = count * elem;
  const bool fused = bytes <= s.fused;
  const std::size_t payload = fused && s.rank == root ? bytes : 0;
  s.exchange(s.make_header(kBroadcast, count, dtype, ReduceOp::Sum, root, 0), data, payload);
  if (fused) {
    if (s.rank != root && bytes > 0) std::memcpy(data, s.payload_of(root), bytes);
    return s.finish_fused();
  }
  if (s.size == 1) return s.finish_fused();
  s.enter_data_phase();
  const std::size_t chunk = piece_size(count, s.options.chunk_bytes / elem);
  const MPI_Datatype type = mpi_type(dtype);
  // Through staging (see Scratch): the root copies each piece in, the others copy it out.
  // Direct (owners known): MPI_Ibcast on the caller's pieces.
  const bool direct = s.hold(buffer_owners());
  s.bytes_per_slot(direct ? 0 : std::min(chunk, count) * elem, 0);
  char* out = static_cast<char*>(data);
  State::Engine e;
  e.chunks = static_cast<int>((count + chunk - 1) / chunk);
  e.slots = s.options.chunks_in_flight;
  e.step = [&](int c, int, int slot, MPI_Request* request) {
    const std::size_t off = static_cast<std::size_t>(c) * chunk;
    const std::size_t len = std::min(chunk, count - off);
    if (direct) return s.check(MPI_Ibcast(out + off * elem, to_int(len), type, root, s.data, request), "MPI_Ibcast");
    unsigned char* staging = s.scratch->staging[static_cast<std::size_t>(slot)].data();
    if (s.rank == root) std::memcpy(staging, out + off * elem, len * elem);
    s.check(MPI_Ibcast(staging, to_int(len), type, root, s.data, request), "MPI_Ibcast");
  };
  if (!direct && s.rank != root) {
    e.on_complete = [&](int c, int, int slot) {
      const std::size_t off = static_cast<std::size_t>(c) * chunk;
      std::memcpy(out + off * elem, s.scratch->staging[static_cast<std::size_t>(slot)].data(),
                  std::min(chunk, count - off) * elem);
    };
  }
  s.run(e);
  s.finish_data_phase();
}

namespace {

// all_gather and reduce_scatter address rank q's block at q * count_per_rank elements through
// MPI's int displacements.
void check_displacements(const char* op, int size, std::size_t count_per_rank) {
  MDTRAIN_CHECK(count_per_rank <= static_cast<std::size_t>(INT_MAX) / std::max(1, size - 1), std::invalid_argument,
                "[mpi] ", op, ": (size() - 1) * count_per_rank = ", static_cast<std::size_t>(size - 1), " * ",
                count_per_rank, " elements exceeds MPI's int displacements (", INT_MAX, "); split the call");
}

}  // namespace

void MpiCommunicator::do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType dtype) {
  State& s = *state_;
  const std::size_t elem = size_of(dtype);
  const std::size_t bytes = count_per_rank * elem;
  const bool fused = bytes <= s.fused;
  if (!fused) check_displacements("all_gather", s.size, count_per_rank);
  MpiCollective collective(s, kAllGather);
  const bool in_place = send == static_cast<const char*>(recv) + static_cast<std::size_t>(s.rank) * bytes;
  s.exchange(s.make_header(kAllGather, count_per_rank, dtype, ReduceOp::Sum, 0, fused ? bytes : 0), send,
             fused ? bytes : 0);
  char* out = static_cast<char*>(recv);
  if (fused) {
    if (bytes == 0) return s.finish_fused();
    for (int r = 0; r < s.size; ++r) {
      std::memcpy(out + static_cast<std::size_t>(r) * bytes, s.payload_of(r), bytes);
    }
    return s.finish_fused();
  }
  if (s.size == 1) {
    if (!in_place) std::memcpy(recv, send, bytes);
    return s.finish_fused();
  }
  s.enter_data_phase();
  const auto n = static_cast<std::size_t>(s.size);
  const std::size_t piece = piece_size(count_per_rank, s.options.chunk_bytes / elem / n);
  const MPI_Datatype type = mpi_type(dtype);
  // Through staging (see Scratch): rank q's block of piece c at q * len, gathered in place there
  // after this rank copied its own in, then copied out to the caller's blocks.
  s.bytes_per_slot(n * std::min(piece, count_per_rank) * elem, 2 * n);
  State::Engine e;
  e.chunks = static_cast<int>((count_per_rank + piece - 1) / piece);
  e.slots = s.options.chunks_in_flight;
  e.step = [&](int c, int, int slot, MPI_Request* request) {
    const std::size_t off = static_cast<std::size_t>(c) * piece;
    const std::size_t len = std::min(piece, count_per_rank - off);
    int* counts = s.scratch->counts[static_cast<std::size_t>(slot)].data();
    int* displs = counts + n;
    for (std::size_t q = 0; q < n; ++q) {
      counts[q] = to_int(len);
      displs[q] = to_int(q * len);
    }
    unsigned char* staging = s.scratch->staging[static_cast<std::size_t>(slot)].data();
    std::memcpy(staging + static_cast<std::size_t>(s.rank) * len * elem, static_cast<const char*>(send) + off * elem,
                len * elem);
    s.check(MPI_Iallgatherv(MPI_IN_PLACE, 0, type, staging, counts, displs, type, s.data, request), "MPI_Iallgatherv");
  };
  e.on_complete = [&](int c, int, int slot) {
    const std::size_t off = static_cast<std::size_t>(c) * piece;
    const std::size_t len = std::min(piece, count_per_rank - off);
    const unsigned char* staging = s.scratch->staging[static_cast<std::size_t>(slot)].data();
    for (std::size_t q = 0; q < n; ++q) {
      if (in_place && q == static_cast<std::size_t>(s.rank)) continue;  // already there
      std::memcpy(out + (q * count_per_rank + off) * elem, staging + q * len * elem, len * elem);
    }
  };
  s.run(e);
  s.finish_data_phase();
}

void MpiCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType dtype,
                                        ReduceOp op) {
  State& s = *state_;
  const std::size_t elem = size_of(dtype);
  const auto n = static_cast<std::size_t>(s.size);
  const std::size_t total = n * count_per_rank * elem;
  const bool fused = total <= s.fused;
  if (!fused) check_displacements("reduce_scatter", s.size, count_per_rank);
  MpiCollective collective(s, kReduceScatter);
  s.exchange(s.make_header(kReduceScatter, count_per_rank, dtype, op, 0, fused ? total : 0), send, fused ? total : 0);
  const std::size_t mine = static_cast<std::size_t>(s.rank) * count_per_rank;
  if (fused) {
    if (count_per_rank > 0) s.reduce_payloads(recv, mine, count_per_rank, dtype, op);
    return s.finish_fused();
  }
  if (s.size == 1) {
    if (recv != send) std::memcpy(recv, send, count_per_rank * elem);
    return s.finish_fused();
  }
  s.enter_data_phase();
  const std::size_t piece = piece_size(count_per_rank, s.options.chunk_bytes / elem / n);
  const MPI_Datatype type = mpi_type(dtype);
  // Staging: the received blocks of the piece (this rank's place unused), then the copies of the
  // blocks this rank sends (see Scratch), at the same places.
  const std::size_t piece_bytes = n * std::min(piece, count_per_rank) * elem;
  s.bytes_per_slot(2 * piece_bytes, 4 * n);
  State::Engine e;
  e.chunks = static_cast<int>((count_per_rank + piece - 1) / piece);
  e.stages = 2;
  e.slots = s.options.chunks_in_flight;
  e.step = [&](int c, int stage, int slot, MPI_Request* request) {
    const std::size_t off = static_cast<std::size_t>(c) * piece;
    const std::size_t len = std::min(piece, count_per_rank - off);
    unsigned char* staging = s.scratch->staging[static_cast<std::size_t>(slot)].data();
    if (stage == 0) {
      unsigned char* copy = staging + piece_bytes;
      int* counts = s.scratch->counts[static_cast<std::size_t>(slot)].data();
      int* displs = counts + n;
      int* recv_counts = counts + 2 * n;
      int* recv_displs = counts + 3 * n;
      for (std::size_t q = 0; q < n; ++q) {
        const bool self = q == static_cast<std::size_t>(s.rank);  // read in place below
        counts[q] = self ? 0 : to_int(len);
        displs[q] = to_int(q * len);
        recv_counts[q] = self ? 0 : to_int(len);
        recv_displs[q] = to_int(q * len);
        if (!self) {
          std::memcpy(copy + q * len * elem, static_cast<const char*>(send) + (q * count_per_rank + off) * elem,
                      len * elem);
        }
      }
      s.check(MPI_Ialltoallv(copy, counts, displs, type, staging, recv_counts, recv_displs, type, s.data, request),
              "MPI_Ialltoallv");
      return;
    }
    // In place, recv is this rank's block of send, which the output may alias (the kernel reads
    // each tile from every input first); no other piece in flight touches piece c.
    std::vector<const void*> inputs(n);
    for (std::size_t q = 0; q < n; ++q) inputs[q] = staging + q * len * elem;
    inputs[static_cast<std::size_t>(s.rank)] =
        static_cast<const char*>(send) + (static_cast<std::size_t>(s.rank) * count_per_rank + off) * elem;
    void* outputs[1] = {static_cast<char*>(recv) + off * elem};
    detail::reduce_in_rank_order(outputs, 1, inputs.data(), s.size, 0, len, dtype, op);
  };
  s.run(e);
  s.finish_data_phase();
}

void MpiCommunicator::do_barrier() {
  State& s = *state_;
  MpiCollective collective(s, kBarrier);
  // Nobody leaves an all-gather before everybody entered it: the header exchange is a barrier.
  s.exchange(s.make_header(kBarrier, 0, DType::Float32, ReduceOp::Sum, 0, 0), nullptr, 0);
  s.finish_fused();
}

void MpiCommunicator::do_send(const void* data, std::size_t count, DType dtype, int peer) {
  State& s = *state_;
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  const std::string call = cat("send #", ++s.sends, " to rank ", peer);
  MDTRAIN_CHECK(rt.ready, std::runtime_error, "[mpi] ", call, " on rank ", s.rank, ": MPI was finalized");
  s.service_all();
  if (s.failed()) s.failure.rethrow("mpi", call, s.rank, true);
  const std::size_t bytes = count * size_of(dtype);
  MDTRAIN_CHECK(bytes + sizeof(PointToPointHeader) <= static_cast<std::size_t>(INT_MAX), std::invalid_argument,
                "[mpi] ", call, ": messages are limited to 2 GB (got ", bytes, " bytes)");
  // Buffered like the control messages: the body lives in scratch until the send completed.
  auto& body = s.scratch->sends.emplace_back(sizeof(PointToPointHeader) + bytes);
  const PointToPointHeader header{static_cast<std::int64_t>(count), static_cast<std::int64_t>(dtype)};
  std::memcpy(body.data(), &header, sizeof header);
  if (bytes > 0) std::memcpy(body.data() + sizeof header, data, bytes);
  MPI_Request request;
  s.check(MPI_Isend(body.data(), to_int(body.size()), MPI_BYTE, peer, kTagPointToPoint, s.data, &request), "MPI_Isend");
  s.send_requests.push_back(request);
}

void MpiCommunicator::do_recv(void* data, std::size_t count, DType dtype, int peer) {
  State& s = *state_;
  Runtime& rt = runtime();
  std::string call;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    call = cat("recv #", ++s.recvs, " from rank ", peer);
    MDTRAIN_CHECK(rt.ready, std::runtime_error, "[mpi] ", call, " on rank ", s.rank, ": MPI was finalized");
    s.service_all();
    if (s.failed()) s.failure.rethrow("mpi", call, s.rank, true);
  }
  const double limit = timeout();
  const Clock::time_point deadline = deadline_after(Clock::now(), limit);
  std::vector<char> body;
  MPI_Request request = MPI_REQUEST_NULL;
  // An MPI error with the message being received: the request keeps its body (see Scratch).
  struct AbandonOnThrow {
    MPI_Request& request;
    std::vector<char>& body;
    ~AbandonOnThrow() {
      if (request == MPI_REQUEST_NULL) return;
      auto a = std::make_unique<Abandoned>();
      a->requests.push_back(request);
      a->scratch = std::make_unique<Scratch>();
      a->scratch->sends.push_back(std::move(body));
      std::lock_guard<std::mutex> lock(runtime().mutex);
      runtime().graveyard.push_back(std::move(a));
    }
  } abandon_on_throw{request, body};
  detail::SpinWait wait(s.may_spin);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(rt.mutex);
      if (request == MPI_REQUEST_NULL) {
        int flag = 0;
        MPI_Message message;
        MPI_Status status;
        s.check(MPI_Improbe(peer, kTagPointToPoint, s.data, &flag, &message, &status), "MPI_Improbe");
        if (flag) {
          int bytes = 0;
          s.check(MPI_Get_count(&status, MPI_BYTE, &bytes), "MPI_Get_count");
          body.resize(static_cast<std::size_t>(bytes));
          s.check(MPI_Imrecv(body.data(), bytes, MPI_BYTE, &message, &request), "MPI_Imrecv");
        }
      }
      if (request != MPI_REQUEST_NULL) {
        int done = 0;
        s.check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done) break;  // MPI_Test set the request null
      }
    }
    if (!wait.step()) continue;
    std::lock_guard<std::mutex> lock(rt.mutex);
    s.service_all();
    // A message already being received finishes: its sender is done with it.
    if (request == MPI_REQUEST_NULL && s.failed()) s.failure.rethrow("mpi", call, s.rank, false);
    if (request == MPI_REQUEST_NULL && Clock::now() >= deadline) {
      const std::string reason = timed_out(call, s.rank, limit) + cat(": rank ", peer, " sent nothing");
      s.record_failure(reason, true);
      try {
        s.notify_peers(reason, true);
      } catch (const std::exception&) {
        // An MPI error while telling the peers: they time out instead.
      }
      throw TimeoutError("[mpi] " + reason);
    }
  }
  PointToPointHeader header{};
  if (body.size() >= sizeof header) std::memcpy(&header, body.data(), sizeof header);
  if (body.size() < sizeof header || header.count != static_cast<std::int64_t>(count) ||
      header.dtype != static_cast<std::int64_t>(dtype)) {
    std::lock_guard<std::mutex> lock(rt.mutex);
    const std::string reason =
        cat("point-to-point mismatch: ", call, " on rank ", s.rank, " expects ", count, " ", name_of(dtype),
            " but rank ", peer, " sent ", header.count, " ", name_of(static_cast<DType>(header.dtype)));
    s.record_failure(reason, false);
    try {
      s.notify_peers(reason, false);
    } catch (const std::exception&) {
      // They time out instead.
    }
    throw std::runtime_error("[mpi] " + reason);
  }
  if (count > 0) std::memcpy(data, body.data() + sizeof header, count * size_of(dtype));
}

std::unique_ptr<Communicator> MpiCommunicator::do_split(int color, int key) {
  State& s = *state_;
  MpiCollective collective(s, kSplit);
  s.exchange(s.make_header(kSplit, 0, DType::Float32, ReduceOp::Sum, 0, 0), nullptr, 0);
  // MPI_Comm_split blocks, and a rank blocked in it cannot hear that a peer gave up: so it
  // starts only once every rank is known to reach it.
  s.enter_data_phase();
  if (s.size > 1) s.confirm_everyone_stays();
  std::unique_ptr<State> state = s.split_state(color, key);
  std::unique_ptr<Communicator> child;
  if (state) child.reset(new MpiCommunicator(std::move(state)));
  s.finish_data_phase();  // a failure noticed meanwhile: the new group is dropped (freed)
  return child;
}

// ---- optional_backends.h
// -------------------------------------------------------------------------

bool mpi_available() { return true; }

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

MpiWorldInfo mpi_world_info() {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  initialize_locked(rt);
  return rt.world;
}

void mpi_end_job_on_failure(bool on) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  rt.end_job_on_failure = on;
}

void mpi_finalize() {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (!rt.initialized_by_us || rt.finalized) return;
  rt.finalized = true;
  rt.ready = false;
  int finalized = 0;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
}

}  // namespace mdtrain
