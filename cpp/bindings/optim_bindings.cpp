#include "bindings.h"
#include "mdtrain/optim/learning_rate_schedule.h"
#include "mdtrain/optim/optimizer.h"
#include "mdtrain/optim/registry.h"

namespace mdtrain::bindings {

void init_optim(py::module_& m) {
  py::class_<Optimizer, std::shared_ptr<Optimizer>>(m, "Optimizer")
      .def_property_readonly("class_name", &Optimizer::class_name)
      .def_property_readonly("iterations", &Optimizer::iterations)
      .def_property("learning_rate", &Optimizer::current_learning_rate, &Optimizer::set_learning_rate)
      .def("config_json", [](const Optimizer& o) { return serialize_optimizer(o).dump(); })
      .def("state",
           [](const Optimizer& o) {
             py::list out;
             for (const auto& [name, t] : o.state()) out.append(py::make_tuple(name, numpy_from_tensor(t)));
             return out;
           })
      .def("set_state", [](Optimizer& o, const std::vector<std::pair<std::string, py::array>>& state) {
        Optimizer::State s;
        for (const auto& [name, a] : state) s.emplace_back(name, tensor_from_numpy(a).clone());
        o.set_state(s);
      });
  m.def("make_optimizer",
        [](const std::string& config) { return std::shared_ptr<Optimizer>(make_optimizer(Json::parse(config))); });
  m.def("known_optimizers", &known_optimizers);
  m.def(
      "schedule_value",
      [](const std::string& config, std::int64_t step) { return (*schedule_from_config(Json::parse(config)))(step); },
      "The learning rate a schedule (given as its Keras config) yields at `step`.");
}

}  // namespace mdtrain::bindings
