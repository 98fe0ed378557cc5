#include <chrono>
#include <memory>
#include <optional>

#include "bindings.h"
#include "mdtrain/model/model.h"

namespace mdtrain::bindings {

namespace {
py::dict logs_to_dict(const Logs& logs) {
  py::dict d;
  for (const auto& [k, v] : logs) d[py::str(k)] = v;
  return d;
}

// Wraps a Python callable(batch, logs) -> stop as the C++ loop's callback; it runs on the calling
// thread between steps, taking the GIL only for the call.
Model::BatchCallback wrap_callback(const py::object& fn) {
  if (fn.is_none()) return nullptr;
  return [fn](std::int64_t batch, const Logs& logs) {
    py::gil_scoped_acquire gil;
    return fn(batch, logs_to_dict(logs)).cast<bool>();
  };
}

// While a loop runs with the GIL released, it comes back every ~100 ms to let Python handle
// signals, so Ctrl-C stops a long epoch at a step boundary (replicas consistent) instead of at
// its end. Installed for the duration of one call.
class SignalCheck {
 public:
  explicit SignalCheck(Model& m) : model_(m) {
    using Clock = std::chrono::steady_clock;
    auto last = std::make_shared<Clock::time_point>(Clock::now());
    model_.set_step_hook([last] {
      if (Clock::now() - *last < std::chrono::milliseconds(100)) return;
      *last = Clock::now();
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    });
  }
  ~SignalCheck() { model_.set_step_hook(nullptr); }
  SignalCheck(const SignalCheck&) = delete;
  SignalCheck& operator=(const SignalCheck&) = delete;

 private:
  Model& model_;
};

py::dict epoch_result(const Model::EpochResult& r) {
  py::dict out;
  out["logs"] = logs_to_dict(r.logs);
  out["steps"] = r.steps;
  out["first_nonfinite_step"] = r.first_nonfinite_step;
  out["stopped"] = r.stopped;
  return out;
}

py::list weights_list(std::vector<Tensor> weights) {
  py::list out;
  for (auto& w : weights) out.append(numpy_from_tensor(w));
  return out;
}
// Keras's sample_weight argument: None, or an array (C++ checks dtype and shape against x).
std::optional<Tensor> optional_weights(const py::object& sample_weight) {
  if (sample_weight.is_none()) return std::nullopt;
  return tensor_from_numpy(sample_weight.cast<py::array>());
}

const Tensor* pointer_to(const std::optional<Tensor>& t) { return t ? &*t : nullptr; }
}  // namespace

void init_model(py::module_& m) {
  py::class_<Model, std::shared_ptr<Model>>(m, "Model")
      .def(py::init<std::string, std::uint64_t>(), py::arg("name"), py::arg("seed"))
      .def_property_readonly("name", &Model::name)
      .def_property_readonly("seed", &Model::seed)
      .def(
          "abort_collectives",
          [](Model& m, const std::string& reason) {
            py::gil_scoped_release release;
            m.abort_collectives(reason);
          },
          py::arg("reason"), "Fails this model's collectives on every worker (a loop left on an error).")
      .def("add", &Model::add)
      .def("pop", &Model::pop)
      .def(
          "build", [](Model& m, const py::object& input_shape) { m.build(shape_from_py(input_shape)); },
          py::arg("input_shape"))
      .def_property_readonly("built", &Model::built)
      .def_static(
          "functional",
          [](const std::string& name, std::uint64_t seed, const py::object& input_shapes,
             const std::vector<std::string>& input_names,
             const std::vector<std::pair<std::shared_ptr<Layer>, std::vector<int>>>& nodes,
             const std::vector<int>& outputs) {
            auto graph = std::make_unique<LayerGraph>(shapes_from_py(input_shapes));
            for (const auto& [layer, inputs] : nodes) graph->add_node(layer, inputs);
            graph->set_outputs(outputs);
            return std::make_shared<Model>(name, seed, std::move(graph), input_names);
          },
          py::arg("name"), py::arg("seed"), py::arg("input_shapes"), py::arg("input_names"), py::arg("nodes"),
          py::arg("outputs"),
          "A functional model: nodes are (layer, [value numbers]); values 0..inputs-1 are the inputs.")
      .def_property_readonly("is_functional", &Model::is_functional)
      .def("graph_structure",
           [](Model& m) {
             LayerGraph& g = m.graph();
             py::dict out;
             out["input_shapes"] = shapes_to_py(g.input_shapes());
             out["input_names"] = m.input_names();
             py::list nodes;
             for (std::size_t i = 0; i < g.nodes().size(); ++i)
               nodes.append(py::make_tuple(g.node_layer(i), g.nodes()[i].inputs));
             out["nodes"] = nodes;
             out["outputs"] = g.outputs();
             out["output_shapes"] = shapes_to_py(g.output_shapes());
             return out;
           })
      .def_property_readonly("layers", [](Model& m) { return m.network().layers(); })
      .def_property_readonly("input_shape", [](Model& m) { return shape_to_py(m.network().input_shape()); })
      .def_property_readonly("output_shape", [](Model& m) { return shape_to_py(m.network().output_shape()); })
      .def("compile", &Model::compile, py::arg("loss"), py::arg("optimizer"), py::arg("metrics"), py::arg("strategy"),
           py::arg("metric_outputs") = std::vector<int>{})
      .def_property_readonly("metric_outputs", &Model::metric_outputs)
      .def_property_readonly("compiled", &Model::compiled)
      .def_property_readonly("strategy", &Model::strategy)
      .def("set_learning_rate", &Model::set_learning_rate, py::arg("learning_rate"))
      .def("optimizer_state",
           [](Model& m) {
             py::list out;
             for (const auto& [name, t] : m.optimizer_state()) out.append(py::make_tuple(name, numpy_from_tensor(t)));
             return out;
           })
      .def(
          "set_optimizer_state",
          [](Model& m, const std::vector<std::pair<std::string, py::array>>& state) {
            Optimizer::State st;
            for (const auto& [name, array] : state) st.emplace_back(name, tensor_from_numpy(array).clone());
            m.set_optimizer_state(st);
          },
          py::arg("state"))
      .def("loss_config_json", [](const Model& m) { return m.loss().config().dump(); })
      .def_property_readonly("metric_names", &Model::metric_names)
      .def(
          "optimizer", [](Model& m) -> Optimizer& { return m.optimizer(); },
          py::return_value_policy::reference_internal)
      .def(
          "train_epoch",
          [](Model& m, const py::array& x, const py::array& y,
             const py::array_t<std::int64_t, py::array::c_style>& order, std::int64_t batch_size, std::int64_t steps,
             const py::object& callback, const py::object& sample_weight) {
            Tensor tx = tensor_from_numpy(x), ty = tensor_from_numpy(y);
            const auto w = optional_weights(sample_weight);
            auto cb = wrap_callback(callback);
            Model::EpochResult r;
            SignalCheck signals(m);
            {
              py::gil_scoped_release release;
              r = m.train_epoch(tx, ty, order.data(), order.size(), batch_size, steps, cb, pointer_to(w));
            }
            return epoch_result(r);
          },
          py::arg("x"), py::arg("y"), py::arg("order"), py::arg("batch_size"), py::arg("steps"), py::arg("callback"),
          py::arg("sample_weight") = py::none())
      .def(
          "train_batches",
          [](Model& m, const py::array& x, const py::array& y,
             const py::array_t<std::int64_t, py::array::c_style>& order, const std::vector<std::int64_t>& offsets,
             const py::object& callback, bool reset_metrics, std::int64_t first_batch,
             const py::object& sample_weight) {
            Tensor tx = tensor_from_numpy(x), ty = tensor_from_numpy(y);
            const auto w = optional_weights(sample_weight);
            if (!offsets.empty() && offsets.back() > order.size())
              throw std::invalid_argument("[fit] batch offsets run past the row order");
            auto cb = wrap_callback(callback);
            Model::EpochResult r;
            SignalCheck signals(m);
            {
              py::gil_scoped_release release;
              r = m.train_batches(tx, ty, order.data(), offsets, cb, reset_metrics, first_batch, pointer_to(w));
            }
            return epoch_result(r);
          },
          py::arg("x"), py::arg("y"), py::arg("order"), py::arg("offsets"), py::arg("callback"),
          py::arg("reset_metrics") = true, py::arg("first_batch") = 0, py::arg("sample_weight") = py::none())
      .def("replica_losses", &Model::replica_losses)
      .def(
          "profile",
          [](Model& m) {
            py::list out;
            for (const auto& p : m.engine().profile()) {
              py::dict d;
              d["steps"] = p.steps;
              d["wall"] = p.wall;
              d["compute"] = p.compute;
              d["allreduce"] = p.allreduce;
              d["update"] = p.update;
              d["collectives"] = collective_counts_dict(p.collectives);
              out.append(d);
            }
            return out;
          },
          "Per replica: seconds in compute, all-reduce and update since reset_profile(), and the calls and "
          "bytes of its data-parallel group's collectives ('collectives', where the executor counts them).")
      .def("reset_profile", [](Model& m) { m.engine().reset_profile(); })
      .def(
          "optimizer_state_bytes", [](Model& m) { return m.engine().optimizer_state_bytes(); },
          "Per replica: bytes of optimizer state its optimizer holds.")
      .def(
          "evaluate",
          [](Model& m, const py::array& x, const py::array& y, std::int64_t batch_size, const py::object& callback,
             const py::object& sample_weight, bool reset_metrics) {
            Tensor tx = tensor_from_numpy(x), ty = tensor_from_numpy(y);
            const auto w = optional_weights(sample_weight);
            auto cb = wrap_callback(callback);
            Logs logs;
            SignalCheck signals(m);
            {
              py::gil_scoped_release release;
              logs = m.evaluate(tx, ty, batch_size, cb, pointer_to(w), reset_metrics);
            }
            return logs_to_dict(logs);
          },
          py::arg("x"), py::arg("y"), py::arg("batch_size"), py::arg("callback"), py::arg("sample_weight") = py::none(),
          py::arg("reset_metrics") = true)
      .def("predict",
           [](Model& m, const py::array& x, std::int64_t batch_size) {
             Tensor tx = tensor_from_numpy(x);
             Tensor out;
             {
               py::gil_scoped_release release;
               out = m.predict(tx, batch_size);
             }
             return numpy_from_tensor(out);
           })
      .def(
          "train_on_batch",
          [](Model& m, const py::array& x, const py::array& y, const py::object& sample_weight) {
            Tensor tx = tensor_from_numpy(x), ty = tensor_from_numpy(y);
            const auto w = optional_weights(sample_weight);
            Logs logs;
            {
              py::gil_scoped_release release;
              logs = m.train_on_batch(tx, ty, pointer_to(w));
            }
            return logs_to_dict(logs);
          },
          py::arg("x"), py::arg("y"), py::arg("sample_weight") = py::none())
      .def(
          "test_on_batch",
          [](Model& m, const py::array& x, const py::array& y, const py::object& sample_weight) {
            Tensor tx = tensor_from_numpy(x), ty = tensor_from_numpy(y);
            const auto w = optional_weights(sample_weight);
            Logs logs;
            {
              py::gil_scoped_release release;
              logs = m.test_on_batch(tx, ty, pointer_to(w));
            }
            return logs_to_dict(logs);
          },
          py::arg("x"), py::arg("y"), py::arg("sample_weight") = py::none())
      .def("get_weights", [](Model& m) { return weights_list(m.get_weights()); })
      .def("refresh_weights", &Model::refresh_weights, py::call_guard<py::gil_scoped_release>())
      .def("set_weights",
           [](Model& m, const std::vector<py::array>& arrays) {
             std::vector<Tensor> ts;
             for (const auto& a : arrays) ts.push_back(tensor_from_numpy(a));
             m.set_weights(ts);
           })
      .def_property_readonly("num_replicas", [](Model& m) { return m.engine().num_replicas(); })
      .def(
          "replica_weights",
          [](Model& m, int replica) {
            std::vector<Tensor> out;
            for (auto* p : m.engine().replica_network(replica).parameters()) {
              Tensor host(p->value.shape(), p->value.dtype());  // GPU replicas: copied to the host
              host.copy_from(p->value);
              out.push_back(host);
            }
            return weights_list(out);
          },
          "The weights as held by one replica (for checking that replicas agree).")
      .def("config_json", [](const Model& m) { return m.config().dump(); })
      .def(
          "save",
          [](Model& m, const std::string& path, const std::string& metadata) {
            py::gil_scoped_release release;
            m.save(path, Json::parse(metadata));
          },
          py::arg("path"), py::arg("metadata_json") = "{}");
  m.def(
      "load_model",
      [](const std::string& path, std::shared_ptr<Strategy> strategy) {
        Json metadata;
        std::shared_ptr<Model> model = Model::load(path, std::move(strategy), &metadata);
        return py::make_tuple(model, metadata.dump());
      },
      py::arg("path"), py::arg("strategy") = nullptr);
}

}  // namespace mdtrain::bindings
