#pragma once
// A worker's connection to every parameter server of a job: pull the whole variables (one request
// per server, all sent before any reply is awaited, so the servers work concurrently), push
// gradients (each server gets the rows of its shards), and the job's control requests (assign,
// save, load, stats, shutdown). Every wait has a timeout naming the server:
//
//   [ps] ps 1 at tcp://127.0.0.1:5601 did not answer a pull within 30 s
//
// (mdtrain::TimeoutError); an Error reply throws std::runtime_error("[ps] ps 1 at ... refused a
// push: <reason>"). Replies to requests that already timed out are recognised by their request id
// and discarded; after a timeout the connection to that server is replaced, so requests still
// queued for it are never delivered. Requests that change nothing (pull, stats) are sent again on
// a fresh connection after each quarter of the timeout without an answer, since ZeroMQ can lose a
// message with a connection that drops (a server restarting); pushes and the other requests are
// sent once. Thread-safe (calls are serialized: ZeroMQ sockets must not be used by two threads at
// once); for concurrent pulls, use one client per thread.
//
// With an auth_key (the job's 32 raw bytes; distribute/frame_auth.h) every request is a tagged
// frame and a reply that does not verify is dropped unread (frames_rejected() counts them), so a
// server without the key, or anyone forging replies, looks like a server that does not answer.
// Every connection, including those made again after a timeout, uses the key.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "mdtrain/core/json.h"
#include "mdtrain/core/tensor.h"
#include "mdtrain/distribute/frame_auth.h"
#include "mdtrain/distribute/message_socket.h"
#include "mdtrain/strategy/parameter_server/ps_message.h"
#include "mdtrain/strategy/parameter_server/shard_layout.h"

namespace mdtrain {

// What each server did with one push.
struct PushResult {
  std::vector<PsStatus> status;         // per server
  std::vector<std::uint64_t> versions;  // each server's version after it
};

class ParameterServerClient {
 public:
  // `endpoints[s]` is server s of `layout`; `worker` is this worker's task id (sent with every
  // request, for the servers' logs and stats). `auth_key`: the job's frame key (32 raw bytes,
  // else std::invalid_argument); unset: unauthenticated (insecure opt-out, tests).
  ParameterServerClient(ShardLayout layout, std::vector<std::string> endpoints, int worker, double timeout_seconds = 30,
                        std::optional<std::string> auth_key = std::nullopt);

  // Fills `values` (one whole tensor per layout variable, allocated here when undefined or of the
  // wrong shape) and returns each server's weights version, to be passed back with the gradients.
  std::vector<std::uint64_t> pull(std::vector<Tensor>& values);
  // Sends each server the rows of its shards of `gradients` (whole tensors, one per variable)
  // computed on `versions` (what pull returned). `step`: the job-wide token of this training step
  // (0: none); a server that handled the token already answers Duplicate (see the server).
  PushResult push(const std::vector<Tensor>& gradients, const std::vector<std::uint64_t>& versions,
                  std::uint64_t step = 0);
  // Each server's weights version (a Stats request: no weights move).
  std::vector<std::uint64_t> versions();
  // Sets the servers' shards from whole tensors (the chief's initial values).
  void assign(const std::vector<Tensor>& values);
  // Every server writes its piece into `directory` / reads its rows from it (see ps_checkpoint.h).
  void save(const std::string& directory);
  void load(const std::string& directory);
  Json stats(int server);
  // Asks every server to stop serving.
  void shutdown();

  const ShardLayout& layout() const { return layout_; }
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  double timeout_seconds() const { return timeout_seconds_; }
  void set_timeout_seconds(double seconds);
  bool authenticated() const { return key_.has_value(); }
  // Replies dropped because they did not verify, over every connection this client made.
  std::uint64_t frames_rejected() const { return rejections_->load(); }

 private:
  // Sends requests_[s] to every server s with one (empty messages are skipped), then collects the
  // replies into replies_[s]; throws naming the first server that failed or timed out.
  void exchange(PsKind kind, std::vector<PsHeader>& headers);
  // A request without payload to every server (pull, stats, shutdown); replies as exchange().
  void ask_every_server(PsKind kind, std::vector<PsHeader>& headers);
  std::string describe(int server) const;
  PsHeader header(PsKind kind, int server);
  // A fresh connection to server s (authenticated when there is a key).
  std::unique_ptr<MessageClientSocket> connect(int server) const;

  ShardLayout layout_;
  std::vector<std::string> endpoints_;
  int worker_;
  double timeout_seconds_;
  std::uint64_t next_request_ = 1;
  std::optional<FrameKey> key_;
  std::shared_ptr<FrameRejections> rejections_ = std::make_shared<FrameRejections>(0);
  std::vector<std::unique_ptr<MessageClientSocket>> sockets_;
  // One request and one reply buffer per server, kept across calls (and reconnections): their
  // capacity is reused, so a push's or pull's megabytes are not allocated afresh per call.
  std::vector<MessageBuffer> requests_, replies_;
  mutable std::mutex mutex_;  // one call at a time
};

}  // namespace mdtrain
