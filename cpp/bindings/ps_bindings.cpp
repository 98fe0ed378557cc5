// The parameter server's C++ engine for Python (strategy/parameter_server/): the shard layout and
// TF's partitioners, the shard server (serving on its own C++ thread, no GIL) and a worker's
// client. The Python ParameterServerStrategy / ClusterCoordinator are built on these.
// Every blocking call releases the GIL.
#include "bindings.h"
#include "mdtrain/distribute/frame_auth.h"
#include "mdtrain/distribute/message_socket.h"
#include "mdtrain/strategy/parameter_server/parameter_server_client.h"
#include "mdtrain/strategy/parameter_server/parameter_server_worker_strategy.h"
#include "mdtrain/strategy/parameter_server/parameter_shard_server.h"
#include "mdtrain/strategy/parameter_server/ps_checkpoint.h"

namespace mdtrain::bindings {

namespace {

DType parse_float_dtype(const std::string& name) {
  if (name == "float32") return DType::Float32;
  if (name == "float64") return DType::Float64;
  throw std::invalid_argument("[ps] parameter server variables must be 'float32' or 'float64', got '" + name + "'");
}

std::vector<Tensor> tensors_of(const std::vector<py::array>& arrays) {
  std::vector<Tensor> out;
  for (const auto& a : arrays) out.push_back(tensor_from_numpy(a));
  return out;
}

py::list arrays_of(const std::vector<Tensor>& tensors) {
  py::list out;
  for (const auto& t : tensors) out.append(numpy_from_tensor(t));
  return out;
}

py::object json_to_python(const Json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

StalenessPolicy parse_policy(const std::string& name) {
  if (name == "drop") return StalenessPolicy::Drop;
  if (name == "rescale") return StalenessPolicy::Rescale;
  throw std::invalid_argument("[ps] staleness_policy must be 'drop' or 'rescale', got '" + name + "'");
}

// bytes / bytearray -> their bytes; None -> nullopt (unauthenticated). The length is checked by
// FrameKey (std::invalid_argument -> ValueError).
std::optional<std::string> auth_key_of(const py::object& key) {
  if (key.is_none()) return std::nullopt;
  if (py::isinstance<py::bytes>(key)) return std::string(key.cast<py::bytes>());
  if (py::isinstance<py::bytearray>(key)) return std::string(key.cast<py::bytearray>());
  throw py::type_error("[ps] auth_key must be bytes (32 raw bytes) or None, got " +
                       std::string(py::str(py::type::handle_of(key).attr("__name__"))));
}

std::string bytes_arg(const py::object& value, const char* name) {
  if (py::isinstance<py::bytes>(value)) return std::string(value.cast<py::bytes>());
  if (py::isinstance<py::bytearray>(value)) return std::string(value.cast<py::bytearray>());
  throw py::type_error(std::string("[ps] frame_sign: ") + name + " must be bytes, got " +
                       std::string(py::str(py::type::handle_of(value).attr("__name__"))));
}

}  // namespace

void init_ps(py::module_& m) {
  m.def("zmq_available", &zmq_available, "Whether mdtrain was built with ZeroMQ (the parameter server's transport).");
  m.def("ps_fixed_shards", &fixed_shards, py::arg("num_shards"), py::arg("shape"),
        "FixedShardsPartitioner: axis-0 shards of a variable of this shape.");
  m.def(
      "ps_min_size_shards",
      [](const Shape& shape, const std::string& dtype, std::int64_t min_shard_bytes, int max_shards) {
        return min_size_shards(shape, parse_float_dtype(dtype), min_shard_bytes, max_shards);
      },
      py::arg("shape"), py::arg("dtype"), py::arg("min_shard_bytes") = 256 << 10, py::arg("max_shards") = 1,
      "MinSizePartitioner: axis-0 shards of a variable of this shape and dtype.");
  m.def(
      "ps_max_size_shards",
      [](const Shape& shape, const std::string& dtype, std::int64_t max_shard_bytes, std::optional<int> max_shards) {
        return max_size_shards(shape, parse_float_dtype(dtype), max_shard_bytes, max_shards);
      },
      py::arg("shape"), py::arg("dtype"), py::arg("max_shard_bytes"), py::arg("max_shards") = py::none(),
      "MaxSizePartitioner: axis-0 shards of a variable of this shape and dtype.");

  py::class_<ShardLayout>(m, "PsShardLayout",
                          "Rows of each variable per parameter server (axis-0 shards placed round-robin).")
      .def_static(
          "make",
          [](int num_servers, const std::vector<std::tuple<std::string, Shape, std::string>>& variables,
             const std::vector<int>& shards) {
            std::vector<PsVariableSpec> specs;
            for (const auto& [name, shape, dtype] : variables) specs.push_back({name, shape, parse_float_dtype(dtype)});
            return ShardLayout::make(num_servers, std::move(specs), shards);
          },
          py::arg("num_servers"), py::arg("variables"), py::arg("shards"),
          "variables: [(name, shape, 'float32'|'float64')]; shards: the partitioner's count per variable "
          "(at most num_servers).")
      .def_readonly("num_servers", &ShardLayout::num_servers)
      .def_property_readonly("variables",
                             [](const ShardLayout& l) {
                               py::list out;
                               for (const auto& v : l.variables)
                                 out.append(py::make_tuple(v.name, py::tuple(py::cast(v.shape)), name_of(v.dtype)));
                               return out;
                             })
      .def_property_readonly("rows", [](const ShardLayout& l) {
        py::list out;
        for (const auto& per_server : l.rows) {
          py::list ranges;
          for (const auto& r : per_server) ranges.append(py::make_tuple(r.begin, r.end));
          out.append(ranges);
        }
        return out;
      });

  py::class_<ParameterShardServer, std::shared_ptr<ParameterShardServer>>(
      m, "ParameterShardServer", "One parameter server: its shards, their optimizer state, a serving thread.")
      .def(py::init([](const ShardLayout& layout, int server_index, const std::vector<py::array>& initial_values,
                       const Optimizer& optimizer, const std::string& endpoint, bool synchronous,
                       int replicas_to_aggregate, std::optional<std::int64_t> max_staleness,
                       const std::string& staleness_policy, const py::object& auth_key) {
             ParameterServerOptions options;
             options.auth_key = auth_key_of(auth_key);
             options.synchronous = synchronous;
             options.replicas_to_aggregate = replicas_to_aggregate;
             options.max_staleness = max_staleness;
             options.staleness_policy = parse_policy(staleness_policy);
             const auto initial = tensors_of(initial_values);
             return std::make_shared<ParameterShardServer>(layout, server_index, initial, optimizer, endpoint, options);
           }),
           py::arg("layout"), py::arg("server_index"), py::arg("initial_values"), py::arg("optimizer"),
           py::arg("endpoint") = "tcp://127.0.0.1:*", py::arg("synchronous") = false,
           py::arg("replicas_to_aggregate") = 1, py::arg("max_staleness") = py::none(),
           py::arg("staleness_policy") = "drop", py::kw_only(), py::arg("auth_key") = py::none(),
           "auth_key: the job's frame key (32 raw bytes): every request must be tagged with it, others are "
           "dropped unread and counted in stats()['frames_rejected']; None: unauthenticated (insecure).")
      .def_property_readonly("endpoint", &ParameterShardServer::endpoint)
      .def_property_readonly("server_index", &ParameterShardServer::server_index)
      .def_property_readonly("serving", &ParameterShardServer::serving)
      .def_property_readonly("version", &ParameterShardServer::version)
      .def("stop", &ParameterShardServer::stop, py::call_guard<py::gil_scoped_release>())
      .def("stats", [](const ParameterShardServer& s) { return json_to_python(s.stats().to_json()); })
      .def("shard_values", [](const ParameterShardServer& s) { return arrays_of(s.shard_values()); })
      .def("save", &ParameterShardServer::save, py::arg("directory"), py::call_guard<py::gil_scoped_release>())
      .def("load", &ParameterShardServer::load, py::arg("directory"), py::call_guard<py::gil_scoped_release>());

  py::class_<ParameterServerClient>(m, "ParameterServerClient", "A worker's connection to every parameter server.")
      .def(py::init([](ShardLayout layout, std::vector<std::string> endpoints, int worker, double timeout,
                       const py::object& auth_key) {
             return std::make_unique<ParameterServerClient>(std::move(layout), std::move(endpoints), worker, timeout,
                                                            auth_key_of(auth_key));
           }),
           py::arg("layout"), py::arg("endpoints"), py::arg("worker"), py::arg("timeout") = 30.0, py::kw_only(),
           py::arg("auth_key") = py::none(),
           "auth_key: the job's frame key (32 raw bytes); replies that do not verify are dropped (a server "
           "without the key times out). None: unauthenticated (insecure).")
      .def_property("timeout", &ParameterServerClient::timeout_seconds, &ParameterServerClient::set_timeout_seconds)
      .def_property_readonly("authenticated", &ParameterServerClient::authenticated)
      .def_property_readonly("frames_rejected", &ParameterServerClient::frames_rejected,
                             "Replies dropped because they did not verify.")
      .def(
          "pull",
          [](ParameterServerClient& c) {
            std::vector<Tensor> values;
            std::vector<std::uint64_t> versions;
            {
              py::gil_scoped_release release;
              versions = c.pull(values);
            }
            return py::make_tuple(arrays_of(values), versions);
          },
          "Returns ([whole variable arrays], [version per server]).")
      .def(
          "push",
          [](ParameterServerClient& c, const std::vector<py::array>& gradients,
             const std::vector<std::uint64_t>& versions, std::uint64_t step) {
            const auto grads = tensors_of(gradients);
            PushResult r;
            {
              py::gil_scoped_release release;
              r = c.push(grads, versions, step);
            }
            std::vector<std::string> status;
            for (auto s : r.status) status.push_back(name_of(s));
            return py::make_tuple(status, r.versions);
          },
          py::arg("gradients"), py::arg("versions"), py::arg("step") = 0,
          "Returns ([status per server: 'applied', 'rescaled', 'dropped (stale)', 'aggregated', "
          "'dropped (late)', 'duplicate'], [version per server after the push]). step: the job-wide token of "
          "the training step (0: none); a token a server handled already is not applied again.")
      .def("versions", &ParameterServerClient::versions, py::call_guard<py::gil_scoped_release>(),
           "Each server's weights version.")
      .def(
          "assign",
          [](ParameterServerClient& c, const std::vector<py::array>& values) {
            const auto tensors = tensors_of(values);
            py::gil_scoped_release release;
            c.assign(tensors);
          },
          py::arg("values"))
      .def("save", &ParameterServerClient::save, py::arg("directory"), py::call_guard<py::gil_scoped_release>())
      .def("load", &ParameterServerClient::load, py::arg("directory"), py::call_guard<py::gil_scoped_release>())
      .def(
          "stats",
          [](ParameterServerClient& c, int server) {
            Json j;
            {
              py::gil_scoped_release release;
              j = c.stats(server);
            }
            return json_to_python(j);
          },
          py::arg("server"))
      .def("shutdown", &ParameterServerClient::shutdown, py::call_guard<py::gil_scoped_release>());

  py::class_<ParameterServerWorkerStrategy, Strategy, std::shared_ptr<ParameterServerWorkerStrategy>>(
      m, "ParameterServerWorkerStrategy",
      "A parameter-server worker: a model compiled under it pulls, computes and pushes each training step.")
      .def(py::init([](ShardLayout layout, std::vector<std::string> endpoints, int worker, double timeout,
                       const py::object& auth_key) {
             return std::make_shared<ParameterServerWorkerStrategy>(std::move(layout), std::move(endpoints), worker,
                                                                    timeout, auth_key_of(auth_key));
           }),
           py::arg("layout"), py::arg("endpoints"), py::arg("worker"), py::arg("timeout") = 30.0, py::kw_only(),
           py::arg("auth_key") = py::none(),
           "auth_key: the job's frame key (32 raw bytes), used by every client this worker makes (also after "
           "set_endpoints). None: unauthenticated (insecure).")
      .def("set_endpoints", &ParameterServerWorkerStrategy::set_endpoints, py::arg("endpoints"))
      .def_property_readonly("endpoints", &ParameterServerWorkerStrategy::endpoints)
      .def("plan_steps", &ParameterServerWorkerStrategy::plan_steps, py::arg("first_token"),
           py::arg("first_start_version") = py::none(),
           "Step k of the next training steps pushes with token first_token + k; when first_start_version is "
           "given it first waits until every server reached version first_start_version + k, then pulls.")
      .def("stats", [](ParameterServerWorkerStrategy& s) {
        const PsWorkerStats& st = s.stats();
        py::dict d;
        d["steps"] = st.steps;
        d["applied"] = st.applied;
        d["rescaled"] = st.rescaled;
        d["dropped"] = st.dropped;
        d["aggregated"] = st.aggregated;
        d["duplicate"] = st.duplicate;
        d["bytes_pulled"] = st.bytes_pulled;
        d["bytes_pushed"] = st.bytes_pushed;
        d["pull_seconds"] = st.pull_seconds;
        d["push_seconds"] = st.push_seconds;
        d["compute_seconds"] = st.compute_seconds;
        return d;
      });

  m.def(
      "frame_sign",
      [](const py::object& key, const py::object& direction, const py::object& session, std::uint64_t counter,
         const py::object& body) {
        const std::string dir = bytes_arg(direction, "direction");
        if (dir != "Q" && dir != "R")
          throw std::invalid_argument("[ps] frame_sign: direction must be b'Q' (request) or b'R' (reply)");
        const FrameKey k(bytes_arg(key, "key"));
        const std::string s = bytes_arg(session, "session"), b = bytes_arg(body, "body");
        std::string frame;
        {
          py::gil_scoped_release release;
          frame = frame_sign(k, static_cast<FrameDirection>(dir[0]), s, counter, b);
        }
        return py::bytes(frame);
      },
      py::arg("key"), py::arg("direction"), py::arg("session"), py::arg("counter"), py::arg("body"),
      "The authenticated frame tag[32] | session[16] | counter[8, LE] | body, tag = HMAC-SHA256(key, "
      "b'mdtrain-frame-v1' | direction | session | counter | body); the C++ parameter server's wire format.");

  m.def(
      "read_ps_checkpoint",
      [](const std::string& directory) {
        PsCheckpoint ck;
        {
          py::gil_scoped_release release;
          ck = read_ps_checkpoint(directory);
        }
        py::dict variables;
        for (const auto& v : ck.variables) {
          py::dict slots;
          for (const auto& [name, t] : v.slots) slots[py::str(name)] = numpy_from_tensor(t);
          variables[py::str(v.name)] = py::make_tuple(numpy_from_tensor(v.value), slots);
        }
        py::dict out;
        out["version"] = ck.version;
        out["iterations"] = ck.iterations;
        out["optimizer"] = ck.optimizer;
        out["variables"] = variables;
        return out;
      },
      py::arg("directory"),
      "Whole variables and optimizer slots from a parameter-server checkpoint written with any number of servers: "
      "{'version', 'iterations', 'optimizer', 'variables': {name: (value, {slot: array})}}.");
}

}  // namespace mdtrain::bindings
