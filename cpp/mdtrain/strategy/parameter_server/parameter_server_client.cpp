#include "mdtrain/strategy/parameter_server/parameter_server_client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "mdtrain/core/errors.h"

namespace mdtrain {

namespace {
std::string seconds_text(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}
}  // namespace

ParameterServerClient::ParameterServerClient(ShardLayout layout, std::vector<std::string> endpoints, int worker,
                                             double timeout_seconds, std::optional<std::string> auth_key)
    : layout_(std::move(layout)), endpoints_(std::move(endpoints)), worker_(worker) {
  if (auth_key) key_.emplace(std::move(*auth_key));
  layout_.validate();
  MDTRAIN_CHECK(endpoints_.size() == static_cast<std::size_t>(layout_.num_servers), std::invalid_argument, "[ps] ",
                endpoints_.size(), " endpoints for a layout of ", layout_.num_servers, " servers");
  MDTRAIN_CHECK(worker_ >= 0, std::invalid_argument, "[ps] worker id must be >= 0, got ", worker_);
  set_timeout_seconds(timeout_seconds);
  for (const auto& v : layout_.variables) (void)ps_dtype_of(v.dtype);
  for (int s = 0; s < layout_.num_servers; ++s) sockets_.push_back(connect(s));
  requests_.resize(endpoints_.size());
  replies_.resize(endpoints_.size());
}

std::unique_ptr<MessageClientSocket> ParameterServerClient::connect(int server) const {
  auto socket = connect_zmq_client_socket(endpoints_[server]);
  if (!key_) return socket;
  return authenticate(std::move(socket), *key_, rejections_);
}

void ParameterServerClient::set_timeout_seconds(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  MDTRAIN_CHECK(std::isfinite(seconds) && seconds > 0, std::invalid_argument, "[ps] timeout must be > 0 s, got ",
                seconds);
  timeout_seconds_ = seconds;
}

std::string ParameterServerClient::describe(int server) const { return cat("ps ", server, " at ", endpoints_[server]); }

PsHeader ParameterServerClient::header(PsKind kind, int server) {
  PsHeader h;
  h.kind = kind;
  h.request_id = next_request_++;
  h.worker = static_cast<std::uint32_t>(worker_);
  h.server = static_cast<std::uint32_t>(server);
  return h;
}

void ParameterServerClient::exchange(PsKind kind, std::vector<PsHeader>& headers) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_seconds_);
  auto remaining_ms = [&] {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return static_cast<int>(std::max<long long>(0, left));
  };
  auto timed_out = [&](int s) {
    // A fresh connection drops what is still queued for this server, so a request reported as
    // timed out is not delivered later (a push applied by a server that comes back after its
    // worker gave up on it).
    sockets_[s] = connect(s);
    fail<TimeoutError>("[ps] ", describe(s), " did not answer a ", name_of(kind), " within ",
                       seconds_text(timeout_seconds_), " s");
  };
  const int resend_ms = std::max(1, static_cast<int>(timeout_seconds_ * 1000 / 4));
  const int n = static_cast<int>(requests_.size());
  for (int s = 0; s < n; ++s)
    if (requests_[s].size() != 0 && !sockets_[s]->send(requests_[s], remaining_ms())) timed_out(s);
  for (int s = 0; s < n; ++s) {
    if (requests_[s].size() == 0) continue;
    MessageBuffer& reply = replies_[s];
    for (;;) {
      const bool resendable = kind == PsKind::Pull || kind == PsKind::Stats;
      const int wait = resendable ? std::min(remaining_ms(), resend_ms) : remaining_ms();
      if (!sockets_[s]->receive(reply, wait)) {
        if (!resendable || remaining_ms() == 0) timed_out(s);
        // ZeroMQ can lose a message with a connection that drops (a server restarting on its
        // endpoint): requests that change nothing are asked again, on a fresh connection, until
        // the deadline. Pushes and the other requests are never repeated: one could apply twice.
        sockets_[s] = connect(s);
        if (!sockets_[s]->send(requests_[s], remaining_ms())) timed_out(s);
        continue;
      }
      PsMessage m;
      try {
        m = parse_ps_message(reply.message());
      } catch (const std::invalid_argument& e) {
        fail<std::runtime_error>("[ps] ", describe(s), " sent a malformed reply to a ", name_of(kind), ": ", e.what());
      }
      // A reply to an earlier request that timed out: not ours any more.
      if (m.header.request_id != headers[s].request_id) continue;
      if (m.header.kind == PsKind::Error)
        fail<std::runtime_error>("[ps] ", describe(s), " refused a ", name_of(kind), ": ", std::string(m.payload));
      headers[s] = m.header;
      break;
    }
  }
}

void ParameterServerClient::ask_every_server(PsKind kind, std::vector<PsHeader>& headers) {
  headers.clear();
  for (int s = 0; s < layout_.num_servers; ++s) {
    headers.push_back(header(kind, s));
    encode_ps_message(requests_[s], headers.back(), nullptr, 0);
  }
  exchange(kind, headers);
}

std::vector<std::uint64_t> ParameterServerClient::pull(std::vector<Tensor>& values) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::size_t nv = layout_.variables.size();
  if (values.size() != nv) values.resize(nv);
  for (std::size_t v = 0; v < nv; ++v) {
    const auto& spec = layout_.variables[v];
    if (!values[v].defined() || values[v].shape() != spec.shape || values[v].dtype() != spec.dtype)
      values[v] = Tensor(spec.shape, spec.dtype);
  }
  std::vector<PsHeader> headers;
  ask_every_server(PsKind::Pull, headers);
  std::vector<std::uint64_t> versions(layout_.num_servers);
  for (int s = 0; s < layout_.num_servers; ++s) {
    const PsMessage m = parse_ps_message(replies_[s].message());
    std::uint64_t expected = 0;
    for (std::size_t v = 0; v < nv; ++v) expected += layout_.rows[v][s].size() * layout_.row_elements(v);
    MDTRAIN_CHECK(m.header.kind == PsKind::PullReply && m.header.count == expected &&
                      m.header.dtype == ps_dtype_of(layout_.variables[0].dtype),
                  std::runtime_error, "[ps] ", describe(s), " answered a pull with ", m.header.count,
                  " elements, expected ", expected, " (is it serving another layout?)");
    std::size_t at = 0;
    for (std::size_t v = 0; v < nv; ++v) {
      const RowRange r = layout_.rows[v][s];
      if (r.empty()) continue;
      Tensor dst = values[v].rows(r.begin, r.end);
      std::memcpy(dst.raw(), m.payload.data() + at, dst.nbytes());
      at += dst.nbytes();
    }
    versions[s] = m.header.weights_version;
  }
  return versions;
}

PushResult ParameterServerClient::push(const std::vector<Tensor>& gradients, const std::vector<std::uint64_t>& versions,
                                       std::uint64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::size_t nv = layout_.variables.size();
  MDTRAIN_CHECK(gradients.size() == nv, std::invalid_argument, "[ps] ", gradients.size(), " gradients for ", nv,
                " variables");
  MDTRAIN_CHECK(versions.size() == static_cast<std::size_t>(layout_.num_servers), std::invalid_argument, "[ps] ",
                versions.size(), " versions for ", layout_.num_servers, " servers");
  for (std::size_t v = 0; v < nv; ++v)
    MDTRAIN_CHECK(gradients[v].shape() == layout_.variables[v].shape &&
                      gradients[v].dtype() == layout_.variables[v].dtype,
                  std::invalid_argument, "[ps] the gradient of '", layout_.variables[v].name,
                  "' does not match the variable's shape or dtype");
  std::vector<PsHeader> headers;
  for (int s = 0; s < layout_.num_servers; ++s) {
    std::vector<std::pair<const void*, std::size_t>> payload;
    for (std::size_t v = 0; v < nv; ++v) {
      const RowRange r = layout_.rows[v][s];
      if (r.empty()) continue;
      const Tensor rows = gradients[v].rows(r.begin, r.end);  // a view: gradients[v] keeps it alive
      payload.emplace_back(rows.raw(), rows.nbytes());
    }
    PsHeader h = header(PsKind::Push, s);
    h.dtype = ps_dtype_of(layout_.variables[0].dtype);
    h.weights_version = versions[s];
    h.step = step;
    headers.push_back(h);
    encode_ps_message(requests_[s], h, payload);
  }
  exchange(PsKind::Push, headers);
  PushResult result;
  for (const auto& h : headers) {
    result.status.push_back(h.status);
    result.versions.push_back(h.weights_version);
  }
  return result;
}

void ParameterServerClient::assign(const std::vector<Tensor>& values) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::size_t nv = layout_.variables.size();
  MDTRAIN_CHECK(values.size() == nv, std::invalid_argument, "[ps] ", values.size(), " values for ", nv, " variables");
  std::vector<PsHeader> headers;
  for (int s = 0; s < layout_.num_servers; ++s) {
    std::vector<std::pair<const void*, std::size_t>> payload;
    for (std::size_t v = 0; v < nv; ++v) {
      MDTRAIN_CHECK(values[v].shape() == layout_.variables[v].shape && values[v].dtype() == layout_.variables[v].dtype,
                    std::invalid_argument, "[ps] the value of '", layout_.variables[v].name,
                    "' does not match the variable's shape or dtype");
      const RowRange r = layout_.rows[v][s];
      if (r.empty()) continue;
      const Tensor rows = values[v].rows(r.begin, r.end);
      payload.emplace_back(rows.raw(), rows.nbytes());
    }
    PsHeader h = header(PsKind::Assign, s);
    h.dtype = ps_dtype_of(layout_.variables[0].dtype);
    headers.push_back(h);
    encode_ps_message(requests_[s], h, payload);
  }
  exchange(PsKind::Assign, headers);
}

void ParameterServerClient::save(const std::string& directory) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<PsHeader> headers;
  for (int s = 0; s < layout_.num_servers; ++s) {
    headers.push_back(header(PsKind::Save, s));
    encode_ps_text(requests_[s], headers.back(), directory);
  }
  exchange(PsKind::Save, headers);
}

void ParameterServerClient::load(const std::string& directory) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<PsHeader> headers;
  for (int s = 0; s < layout_.num_servers; ++s) {
    headers.push_back(header(PsKind::Load, s));
    encode_ps_text(requests_[s], headers.back(), directory);
  }
  exchange(PsKind::Load, headers);
}

Json ParameterServerClient::stats(int server) {
  std::lock_guard<std::mutex> lock(mutex_);
  MDTRAIN_CHECK(server >= 0 && server < layout_.num_servers, std::out_of_range, "[ps] server ", server,
                " is outside the job's ", layout_.num_servers, " servers");
  std::vector<PsHeader> headers(layout_.num_servers);
  for (auto& request : requests_) request.clear();  // only `server` is asked
  headers[server] = header(PsKind::Stats, server);
  encode_ps_message(requests_[server], headers[server], nullptr, 0);
  exchange(PsKind::Stats, headers);
  return Json::parse(std::string(parse_ps_message(replies_[server].message()).payload));
}

std::vector<std::uint64_t> ParameterServerClient::versions() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<PsHeader> headers;
  ask_every_server(PsKind::Stats, headers);
  std::vector<std::uint64_t> out;
  for (const auto& h : headers) out.push_back(h.weights_version);
  return out;
}

void ParameterServerClient::shutdown() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<PsHeader> headers;
  ask_every_server(PsKind::Shutdown, headers);
}

}  // namespace mdtrain
