#include "mdtrain/strategy/parameter_server/parameter_shard_server.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "mdtrain/core/errors.h"
#include "mdtrain/strategy/parameter_server/ps_checkpoint.h"

namespace mdtrain {

namespace {

// How often the serving thread looks at stop_requested_ while idle.
constexpr int kPollMs = 20;
// Step tokens remembered for deduplication; a retry comes within a few steps of the original, and
// tokens grow, so the oldest are forgotten first.
constexpr std::size_t kMaxSeenSteps = 1 << 16;

Shape shard_shape(const Shape& full, const RowRange& rows) {
  Shape s = full;
  s[0] = rows.size();
  return s;
}

template <class T>
void scale_in_place(Tensor& t, double factor) {
  T* p = t.data<T>();
  const T f = static_cast<T>(factor);
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] *= f;
}
void scale(Tensor& t, double factor) {
  if (t.dtype() == DType::Float32) scale_in_place<float>(t, factor);
  else scale_in_place<double>(t, factor);
}
template <class T>
void add_in_place(Tensor& sum, const Tensor& x) {
  T* s = sum.data<T>();
  const T* p = x.data<T>();
  for (std::int64_t i = 0; i < sum.numel(); ++i) s[i] += p[i];
}
template <class T>
void divide_into(Tensor& out, const Tensor& sum, int k) {
  T* o = out.data<T>();
  const T* s = sum.data<T>();
  for (std::int64_t i = 0; i < out.numel(); ++i) o[i] = s[i] / static_cast<T>(k);
}

}  // namespace

Json ParameterServerStats::to_json() const {
  Json j = Json::object();
  j.set("version", version);
  j.set("pulls", pulls);
  j.set("pushes_applied", pushes_applied);
  j.set("pushes_rescaled", pushes_rescaled);
  j.set("pushes_dropped_stale", pushes_dropped_stale);
  j.set("pushes_dropped_late", pushes_dropped_late);
  j.set("pushes_duplicate", pushes_duplicate);
  j.set("updates", updates);
  j.set("errors", errors);
  j.set("bytes_in", bytes_in);
  j.set("bytes_out", bytes_out);
  j.set("frames_rejected", frames_rejected);
  return j;
}

ParameterShardServer::ParameterShardServer(ShardLayout layout, int server_index,
                                           const std::vector<Tensor>& initial_values, const Optimizer& optimizer,
                                           const std::string& endpoint, ParameterServerOptions options)
    : layout_(std::move(layout)), server_(server_index), options_(std::move(options)) {
  // The key is checked first: nothing is bound with a key that cannot work.
  std::optional<FrameKey> key;
  if (options_.auth_key) key.emplace(*options_.auth_key);
  options_.auth_key.reset();  // kept only by the socket
  layout_.validate();
  MDTRAIN_CHECK(server_ >= 0 && server_ < layout_.num_servers, std::invalid_argument, "[ps] server index ", server_,
                " is outside the layout's ", layout_.num_servers, " servers");
  MDTRAIN_CHECK(!layout_.variables.empty(), std::invalid_argument, "[ps] the layout has no variables");
  MDTRAIN_CHECK(!optimizer.options().clipnorm && !optimizer.options().global_clipnorm, std::invalid_argument,
                "[ps] clipnorm and global_clipnorm need the whole gradient, which no parameter server sees: clip on "
                "the workers or use clipvalue");
  MDTRAIN_CHECK(options_.replicas_to_aggregate >= 1, std::invalid_argument,
                "[ps] replicas_to_aggregate must be >= 1, got ", options_.replicas_to_aggregate);
  MDTRAIN_CHECK(!options_.max_staleness || *options_.max_staleness >= 0, std::invalid_argument,
                "[ps] max_staleness must be >= 0");
  dtype_ = ps_dtype_of(layout_.variables[0].dtype);
  for (const auto& v : layout_.variables)
    MDTRAIN_CHECK(ps_dtype_of(v.dtype) == dtype_, std::invalid_argument,
                  "[ps] all variables of a parameter server job must share one dtype ('", v.name, "' differs)");
  MDTRAIN_CHECK(initial_values.empty() || initial_values.size() == layout_.variables.size(), std::invalid_argument,
                "[ps] ", initial_values.size(), " initial values for ", layout_.variables.size(), " variables");
  params_.reserve(layout_.variables.size());
  for (std::size_t v = 0; v < layout_.variables.size(); ++v) {
    const auto& spec = layout_.variables[v];
    const RowRange rows = layout_.rows[v][server_];
    Tensor value = Tensor::zeros(shard_shape(spec.shape, rows), spec.dtype);
    if (!initial_values.empty()) {
      const Tensor& init = initial_values[v];
      MDTRAIN_CHECK(init.shape() == spec.shape && init.dtype() == spec.dtype, std::invalid_argument,
                    "[ps] the initial value of '", spec.name, "' does not match its shape or dtype");
      if (!rows.empty()) value.copy_from(init.rows(rows.begin, rows.end));
    }
    params_.emplace_back(spec.name, value);
    aggregate_.push_back(Tensor::zeros(value.shape(), spec.dtype));
  }
  for (std::size_t v = 0; v < params_.size(); ++v)
    if (!layout_.rows[v][server_].empty()) trained_.push_back(&params_[v]);
  optimizer_ = optimizer.clone();
  if (!trained_.empty()) optimizer_->build(trained_);

  // The largest request is a push or assign of every row this server holds; checkpoint paths are
  // short. Anything longer is foreign: ZeroMQ drops its sender before allocating it.
  std::int64_t largest = 0;
  for (const auto& p : params_) largest += static_cast<std::int64_t>(p.value.nbytes());
  socket_ = bind_zmq_server_socket(endpoint, static_cast<std::int64_t>(kFrameOverheadBytes + kPsHeaderSize) +
                                                 std::max<std::int64_t>(largest, 1 << 16));
  // Authenticated: only verified bodies come out of receive(), so nothing unverified is parsed.
  if (key) socket_ = authenticate(std::move(socket_), std::move(*key), rejections_);
  endpoint_ = socket_->endpoint();
  thread_ = std::thread([this] { serve(); });
}

ParameterShardServer::~ParameterShardServer() { stop(); }

void ParameterShardServer::stop() {
  std::lock_guard<std::mutex> lock(join_mutex_);
  stop_requested_.store(true);
  if (thread_.joinable()) thread_.join();
  socket_.reset();  // unbinds the endpoint: a replacement server may bind it at once
  stopped_.store(true);
}

void ParameterShardServer::serve() {
  // Kept across requests: their capacity is reused, so a pull's or push's megabytes are not
  // allocated afresh (and their pages faulted in) per request.
  std::string client;
  MessageBuffer request, reply;
  while (!stop_requested_.load()) {
    try {
      if (!socket_->receive(client, request, kPollMs)) continue;
      handle(request.message(), reply);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stats_.bytes_out += reply.size();
      }
      socket_->reply(client, reply);
    } catch (const std::exception&) {
      // A transport failure on one message must not end the server: it is counted and the loop
      // goes on (the client times out naming this server).
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.errors;
    }
  }
  stopped_.store(true);
}

std::vector<std::size_t> ParameterShardServer::selected(std::uint32_t variable) const {
  std::vector<std::size_t> out;
  if (variable == kAllVariables) {
    for (std::size_t v = 0; v < params_.size(); ++v) out.push_back(v);
  } else {
    MDTRAIN_CHECK(variable < params_.size(), std::invalid_argument, "[ps] variable index ", variable,
                  " is outside the layout's ", params_.size(), " variables");
    out.push_back(variable);
  }
  return out;
}

std::uint64_t ParameterShardServer::payload_elements(std::uint32_t variable) const {
  std::uint64_t n = 0;
  for (auto v : selected(variable)) n += static_cast<std::uint64_t>(params_[v].value.numel());
  return n;
}

void ParameterShardServer::handle(std::string_view request, MessageBuffer& out) {
  PsHeader reply;
  reply.server = static_cast<std::uint32_t>(server_);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.bytes_in += request.size();
  try {
    const PsMessage m = parse_ps_message(request);
    reply.request_id = m.header.request_id;
    reply.worker = m.header.worker;
    reply.variable = m.header.variable;
    MDTRAIN_CHECK(m.header.server == static_cast<std::uint32_t>(server_), std::invalid_argument,
                  "[ps] a request for ps ", m.header.server, " reached ps ", server_);
    switch (m.header.kind) {
      case PsKind::Pull: {
        const auto vars = selected(m.header.variable);
        std::vector<std::pair<const void*, std::size_t>> payload;
        for (auto v : vars) payload.emplace_back(params_[v].value.raw(), params_[v].value.nbytes());
        ++stats_.pulls;
        reply.kind = PsKind::PullReply;
        reply.dtype = dtype_;
        reply.weights_version = stats_.version;
        return encode_ps_message(out, reply, payload);
      }
      case PsKind::Push: return handle_push(m, reply, out);
      case PsKind::Assign: {
        MDTRAIN_CHECK(m.header.dtype == dtype_ && m.header.count == payload_elements(m.header.variable),
                      std::invalid_argument, "[ps] assign carries ", m.header.count, " elements, ps ", server_,
                      " holds ", payload_elements(m.header.variable), " of the variables' dtype");
        std::size_t at = 0;
        for (auto v : selected(m.header.variable)) {
          Tensor& value = params_[v].value;
          std::memcpy(value.raw(), m.payload.data() + at, value.nbytes());
          at += value.nbytes();
        }
        reply.kind = PsKind::Done;
        reply.weights_version = stats_.version;
        return encode_ps_message(out, reply, nullptr, 0);
      }
      case PsKind::Stats:
        stats_.frames_rejected = rejections_->load();
        reply.kind = PsKind::StatsReply;
        reply.weights_version = stats_.version;
        return encode_ps_text(out, reply, stats_.to_json().dump());
      case PsKind::Save:
      case PsKind::Load: {
        MDTRAIN_CHECK(m.header.dtype == PsDType::Bytes && !m.payload.empty(), std::invalid_argument, "[ps] ",
                      name_of(m.header.kind), " needs a directory");
        const std::string dir(m.payload);
        mutex_.unlock();  // save()/load() take the lock themselves
        try {
          if (m.header.kind == PsKind::Save) save(dir);
          else load(dir);
        } catch (...) {
          mutex_.lock();
          throw;
        }
        mutex_.lock();
        reply.kind = PsKind::Done;
        reply.weights_version = stats_.version;
        return encode_ps_message(out, reply, nullptr, 0);
      }
      case PsKind::Shutdown:
        stop_requested_.store(true);
        reply.kind = PsKind::Done;
        return encode_ps_message(out, reply, nullptr, 0);
      default: fail<std::invalid_argument>("[ps] a server does not accept '", name_of(m.header.kind), "' messages");
    }
  } catch (const std::exception& e) {
    ++stats_.errors;
    reply.kind = PsKind::Error;
    return encode_ps_text(out, reply, e.what());
  }
}

void ParameterShardServer::handle_push(const PsMessage& m, PsHeader& reply, MessageBuffer& out) {
  MDTRAIN_CHECK(m.header.variable == kAllVariables, std::invalid_argument,
                "[ps] a push carries the gradients of every shard the server holds (variable = all)");
  MDTRAIN_CHECK(m.header.dtype == dtype_ && m.header.count == payload_elements(kAllVariables), std::invalid_argument,
                "[ps] push carries ", m.header.count, " elements of dtype ", int(m.header.dtype), ", ps ", server_,
                " holds ", payload_elements(kAllVariables), " of dtype ", int(dtype_));
  const std::uint64_t version = stats_.version;
  MDTRAIN_CHECK(m.header.weights_version <= version, std::invalid_argument, "[ps] push computed on version ",
                m.header.weights_version, " but ps ", server_, " is at version ", version,
                " (restarted from an older checkpoint?): pull again");
  const std::uint64_t staleness = version - m.header.weights_version;
  reply.kind = PsKind::PushAck;
  if (m.header.step != 0) {
    if (seen_steps_.count(m.header.step)) {
      ++stats_.pushes_duplicate;
      reply.status = PsStatus::Duplicate;
      reply.weights_version = version;
      return encode_ps_message(out, reply, nullptr, 0);
    }
    seen_steps_.insert(m.header.step);
    if (seen_steps_.size() > kMaxSeenSteps) seen_steps_.erase(seen_steps_.begin());
  }

  auto read_gradients = [&](std::vector<Tensor>& into) {
    std::size_t at = 0;
    for (std::size_t v = 0; v < params_.size(); ++v) {
      Tensor& g = into[v];
      std::memcpy(g.raw(), m.payload.data() + at, g.nbytes());
      at += g.nbytes();
    }
  };
  std::vector<Tensor> grads;
  for (auto& p : params_) grads.push_back(p.grad);

  if (options_.synchronous) {
    if (staleness > 0) {
      ++stats_.pushes_dropped_late;
      reply.status = PsStatus::DroppedLate;
    } else {
      std::vector<Tensor> incoming;
      for (auto& p : params_) incoming.push_back(Tensor(p.value.shape(), p.value.dtype()));
      read_gradients(incoming);
      for (std::size_t v = 0; v < params_.size(); ++v) {
        if (dtype_ == PsDType::Float32) add_in_place<float>(aggregate_[v], incoming[v]);
        else add_in_place<double>(aggregate_[v], incoming[v]);
      }
      ++stats_.pushes_applied;
      reply.status = PsStatus::Aggregated;
      if (++aggregated_ == options_.replicas_to_aggregate) {
        for (std::size_t v = 0; v < params_.size(); ++v) {
          if (dtype_ == PsDType::Float32) divide_into<float>(grads[v], aggregate_[v], aggregated_);
          else divide_into<double>(grads[v], aggregate_[v], aggregated_);
          aggregate_[v].fill(0.0);
        }
        aggregated_ = 0;
        apply_gradients();
        reply.status = PsStatus::Applied;
      }
    }
  } else if (options_.max_staleness && staleness > static_cast<std::uint64_t>(*options_.max_staleness)) {
    if (options_.staleness_policy == StalenessPolicy::Drop) {
      ++stats_.pushes_dropped_stale;
      reply.status = PsStatus::DroppedStale;
    } else {
      read_gradients(grads);
      for (auto& g : grads) scale(g, 1.0 / (1.0 + static_cast<double>(staleness)));
      apply_gradients();
      ++stats_.pushes_applied;
      ++stats_.pushes_rescaled;
      reply.status = PsStatus::Rescaled;
    }
  } else {
    read_gradients(grads);
    apply_gradients();
    ++stats_.pushes_applied;
    reply.status = PsStatus::Applied;
  }
  reply.weights_version = stats_.version;
  return encode_ps_message(out, reply, nullptr, 0);
}

void ParameterShardServer::apply_gradients() {
  if (!trained_.empty()) optimizer_->apply(trained_);
  ++stats_.version;
  ++stats_.updates;
}

ParameterServerStats ParameterShardServer::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ParameterServerStats s = stats_;
  s.frames_rejected = rejections_->load();
  return s;
}

std::uint64_t ParameterShardServer::version() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.version;
}

std::vector<Tensor> ParameterShardServer::shard_values() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Tensor> out;
  for (const auto& p : params_) out.push_back(p.value.clone());
  return out;
}

Optimizer::State ParameterShardServer::optimizer_state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return optimizer_->state();
}

void ParameterShardServer::save(const std::string& directory) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  MDTRAIN_CHECK(!ec, IoError, "[io] cannot create '", directory, "': ", ec.message());
  PsPieceFile file;
  file.server = server_;
  file.num_servers = layout_.num_servers;
  file.version = stats_.version;
  file.iterations = optimizer_->iterations();
  file.optimizer = optimizer_->class_name();
  const Optimizer::State state = trained_.empty() ? Optimizer::State{} : optimizer_->state();
  for (std::size_t v = 0; v < params_.size(); ++v) {
    const RowRange rows = layout_.rows[v][server_];
    if (rows.empty()) continue;
    PsPiece piece{layout_.variables[v].name, layout_.variables[v].shape, rows, params_[v].value, {}};
    const std::string prefix = params_[v].name + "/";
    for (const auto& [name, tensor] : state)
      if (name.compare(0, prefix.size(), prefix) == 0) piece.slots.emplace_back(name.substr(prefix.size()), tensor);
    file.pieces.push_back(std::move(piece));
  }
  write_ps_piece_file(directory + "/" + ps_piece_file_name(server_, layout_.num_servers), file);
}

void ParameterShardServer::load(const std::string& directory) {
  const PsCheckpoint ck = read_ps_checkpoint(directory);
  std::lock_guard<std::mutex> lock(mutex_);
  MDTRAIN_CHECK(ck.optimizer == optimizer_->class_name(), std::invalid_argument, "[ps] the checkpoint in '", directory,
                "' holds ", ck.optimizer, " state, this server runs ", optimizer_->class_name());
  // Everything is cut and checked before anything changes.
  std::vector<Tensor> values;
  Optimizer::State state = trained_.empty() ? Optimizer::State{} : optimizer_->state();
  for (std::size_t v = 0; v < params_.size(); ++v) {
    const auto& spec = layout_.variables[v];
    const PsLogicalVariable& lv = ck.at(spec.name);
    MDTRAIN_CHECK(lv.value.shape() == spec.shape && lv.value.dtype() == spec.dtype, std::invalid_argument, "[ps] '",
                  spec.name, "' in the checkpoint does not match the layout's shape or dtype");
    const RowRange rows = layout_.rows[v][server_];
    values.push_back(rows.empty() ? params_[v].value.clone() : lv.value.rows(rows.begin, rows.end).clone());
    const std::string prefix = spec.name + "/";
    for (auto& [name, tensor] : state) {
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string slot = name.substr(prefix.size());
      const Tensor* found = nullptr;
      for (const auto& s : lv.slots)
        if (s.first == slot) found = &s.second;
      MDTRAIN_CHECK(found, std::invalid_argument, "[ps] the checkpoint has no slot '", slot, "' for '", spec.name, "'");
      tensor = found->rows(rows.begin, rows.end).clone();
    }
  }
  for (auto& [name, tensor] : state)
    if (name == "iterations") {
      tensor = Tensor(tensor.shape(), tensor.dtype());
      tensor.data<std::int64_t>()[0] = ck.iterations;
    }
  if (!trained_.empty()) optimizer_->set_state(state);
  for (std::size_t v = 0; v < params_.size(); ++v) params_[v].value.copy_from(values[v]);
  for (auto& a : aggregate_) a.fill(0.0);
  aggregated_ = 0;
  seen_steps_.clear();
  stats_.version = ck.version;
}

}  // namespace mdtrain
