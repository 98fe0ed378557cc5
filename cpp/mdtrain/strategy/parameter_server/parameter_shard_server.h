#pragma once
// One parameter server: owns, for each variable, the rows the ShardLayout gives it, and the
// optimizer state for those rows (a clone of the job's Optimizer applied to Parameters viewing
// the shards, so updates are the optimizer ops themselves: one push applied here gives bitwise
// the rows Optimizer::apply gives on the whole variable). It serves on a ZeroMQ ROUTER from one
// C++ thread of its own (no Python, no GIL): pulls, pushes, assign, save/load, stats, shutdown,
// answered in arrival order, so a fixed order of requests gives fixed weights.
//
// Versions: one per server, +1 per applied update. Asynchronous (default): every push is applied
// when it arrives; with max_staleness, a gradient computed on a version more than max_staleness
// behind is dropped or scaled by 1 / (1 + staleness) (StalenessPolicy). Synchronous: pushes
// computed on the current version are summed until replicas_to_aggregate have come, then their
// mean is applied once; pushes for a version already applied are dropped (counted).
//
// Step tokens: a push may carry the job-wide id of its training step. A token seen before is
// answered Duplicate and not applied, so a step the coordinator retries after its worker died
// (which may or may not have pushed) is applied at most once on every server. Loading a
// checkpoint forgets the tokens (the steps after it will run again).
//
// Authentication (options.auth_key, 32 raw bytes; distribute/frame_auth.h): every request must be
// a frame tagged with the job's key, and every reply is one. A request that does not verify
// (forged, altered, replayed, or from a client without the key) is dropped before it is parsed:
// no reply, nothing changes, and stats().frames_rejected counts it. Without a key the server
// accepts anyone who can reach its endpoint: only for an explicit insecure opt-out and tests.
//
// Malformed or foreign requests that verify get an Error reply (or are dropped when not even the
// sender can be told) and the server keeps serving. The destructor stops and joins the thread.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/core/parameter.h"
#include "mdtrain/core/tensor.h"
#include "mdtrain/distribute/frame_auth.h"
#include "mdtrain/distribute/message_socket.h"
#include "mdtrain/optim/optimizer.h"
#include "mdtrain/strategy/parameter_server/ps_message.h"
#include "mdtrain/strategy/parameter_server/shard_layout.h"

namespace mdtrain {

enum class StalenessPolicy { Drop, Rescale };

struct ParameterServerOptions {
  bool synchronous = false;
  int replicas_to_aggregate = 1;              // synchronous mode
  std::optional<std::int64_t> max_staleness;  // asynchronous mode; unset: any staleness is applied
  StalenessPolicy staleness_policy = StalenessPolicy::Drop;
  // The job's frame key (32 raw bytes); unset: unauthenticated (insecure opt-out, tests).
  std::optional<std::string> auth_key;
};

struct ParameterServerStats {
  std::uint64_t version = 0;
  std::uint64_t pulls = 0;
  std::uint64_t pushes_applied = 0;   // applied as they came (async) or aggregated into a step (sync)
  std::uint64_t pushes_rescaled = 0;  // also counted in pushes_applied
  std::uint64_t pushes_dropped_stale = 0;
  std::uint64_t pushes_dropped_late = 0;
  std::uint64_t pushes_duplicate = 0;  // retried steps already handled (step tokens)
  std::uint64_t updates = 0;           // optimizer steps taken
  std::uint64_t errors = 0;            // requests answered with Error
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  std::uint64_t frames_rejected = 0;  // requests dropped unread: their tag or counter did not verify
  Json to_json() const;
};

class ParameterShardServer {
 public:
  // Server `server_index` of `layout`, initial values cut from `initial_values` (one whole tensor
  // per layout variable, or empty: zeros until an Assign or load()), bound to `endpoint`
  // ("tcp://127.0.0.1:*" picks a port: read endpoint()). Serving starts at once.
  // Throws std::invalid_argument for a bad layout or options (an auth_key that is not 32 bytes), or
  // an optimizer with clipnorm / global_clipnorm (their norms need the whole gradient, which no
  // server sees).
  ParameterShardServer(ShardLayout layout, int server_index, const std::vector<Tensor>& initial_values,
                       const Optimizer& optimizer, const std::string& endpoint, ParameterServerOptions options = {});
  ~ParameterShardServer();
  ParameterShardServer(const ParameterShardServer&) = delete;
  ParameterShardServer& operator=(const ParameterShardServer&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  int server_index() const { return server_; }
  const ShardLayout& layout() const { return layout_; }
  // Stops serving, joins the thread and unbinds the endpoint (also after a Shutdown request).
  // Idempotent.
  void stop();
  bool serving() const { return !stopped_.load(); }

  ParameterServerStats stats() const;
  std::uint64_t version() const;
  // Copies of this server's shards (one per layout variable; 0 rows where it holds none).
  std::vector<Tensor> shard_values() const;
  // Optimizer state of this server's shards (Optimizer::state() of its Parameters).
  Optimizer::State optimizer_state() const;

  // Writes "<directory>/ps-<server>-of-<n>.piece" (see ps_checkpoint.h); creates the directory.
  void save(const std::string& directory) const;
  // Reads every piece in `directory` (any layout) and takes this server's rows, slots, iterations
  // and version. Nothing changes when it throws.
  void load(const std::string& directory);

 private:
  void serve();
  // Answers `request` into `out` (an Error message for anything refused).
  void handle(std::string_view request, MessageBuffer& out);
  void handle_push(const PsMessage& m, PsHeader& reply, MessageBuffer& out);
  // The payload matching `variable` (one or all of this server's shards): expected element count.
  std::uint64_t payload_elements(std::uint32_t variable) const;
  std::vector<std::size_t> selected(std::uint32_t variable) const;
  void apply_gradients();  // params_' grads already hold the gradient

  ShardLayout layout_;
  int server_;
  ParameterServerOptions options_;
  PsDType dtype_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<Parameter> params_;  // one per layout variable; only those with rows are trained
  ParameterList trained_;          // pointers to params_ with rows
  std::vector<Tensor> aggregate_;  // sync mode: running sums, per variable
  int aggregated_ = 0;
  std::set<std::uint64_t> seen_steps_;  // step tokens handled, the most recent kMaxSeenSteps
  ParameterServerStats stats_;
  std::shared_ptr<FrameRejections> rejections_ = std::make_shared<FrameRejections>(0);

  mutable std::mutex mutex_;  // guards everything above against the local API while serving
  std::unique_ptr<MessageServerSocket> socket_;
  std::string endpoint_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> stopped_{false};
  std::mutex join_mutex_;
  std::thread thread_;
};

}  // namespace mdtrain
