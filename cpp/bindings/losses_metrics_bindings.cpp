#include "bindings.h"
#include "mdtrain/model/metric.h"
#include "mdtrain/nn/loss.h"

namespace mdtrain::bindings {

void init_losses_and_metrics(py::module_& m) {
  py::class_<Loss, std::shared_ptr<Loss>>(m, "Loss")
      .def_property_readonly("name", &Loss::name)
      .def_property_readonly("class_name", &Loss::class_name)
      .def("config_json", [](const Loss& l) { return l.config().dump(); })
      .def(
          "__call__",
          [](const Loss& l, const py::array& y_true, const py::array& y_pred) {
            Tensor t = tensor_from_numpy(y_true), p = tensor_from_numpy(y_pred);
            const double sum = l.forward_backward(t, p, 1.0, nullptr);
            const auto n = l.sample_count(t, p);
            return n > 0 ? sum / static_cast<double>(n) : 0.0;
          },
          py::arg("y_true"), py::arg("y_pred"), "Keras's sum_over_batch_size value.")
      .def(
          "per_sample",
          [](const Loss& l, const py::array& y_true, const py::array& y_pred) {
            // Keras's reduction=None: one loss per position of y_pred but its last axis (0 where
            // the label is ignore_class), each the loss of that position alone, with the very
            // arithmetic the batch sum uses.
            Tensor t = tensor_from_numpy(y_true), p = tensor_from_numpy(y_pred);
            l.validate(t, p);
            Shape out_shape = p.shape();
            if (!out_shape.empty()) out_shape.pop_back();
            const std::int64_t positions = numel(out_shape);
            Tensor out(out_shape, DType::Float64);
            if (positions == 0) return numpy_from_tensor(out);
            const Tensor rows_p = p.reshape({positions, p.numel() / positions});
            const Tensor rows_t = t.reshape({positions, t.numel() / positions});
            for (std::int64_t i = 0; i < positions; ++i)
              out.data<double>()[i] = l.forward_backward(rows_t.rows(i, i + 1), rows_p.rows(i, i + 1), 1.0, nullptr);
            return numpy_from_tensor(out);
          },
          py::arg("y_true"), py::arg("y_pred"), "Keras's reduction=None: the loss of every position.")
      .def(
          "sum",
          [](const Loss& l, const py::array& y_true, const py::array& y_pred) {
            return l.forward_backward(tensor_from_numpy(y_true), tensor_from_numpy(y_pred), 1.0, nullptr);
          },
          py::arg("y_true"), py::arg("y_pred"), "Keras's reduction='sum'.")
      .def(
          "gradient",
          [](const Loss& l, const py::array& y_true, const py::array& y_pred, double scale) {
            Tensor t = tensor_from_numpy(y_true), p = tensor_from_numpy(y_pred);
            Tensor d(p.shape(), p.dtype());
            const double sum = l.forward_backward(t, p, scale, &d);
            return py::make_tuple(sum, numpy_from_tensor(d));
          },
          "(sum of per-sample losses, d(scale * sum)/d(y_pred)).");
  m.def("make_loss", [](const std::string& name) { return std::shared_ptr<Loss>(make_loss(name)); });
  m.def("loss_from_config",
        [](const std::string& config) { return std::shared_ptr<Loss>(loss_from_config(Json::parse(config))); });

  py::class_<Metric, std::shared_ptr<Metric>>(m, "Metric")
      .def_property_readonly("name", &Metric::name)
      .def_property_readonly("class_name", &Metric::class_name)
      .def("update", [](Metric& me, const py::array& y_true,
                        const py::array& y_pred) { me.update(tensor_from_numpy(y_true), tensor_from_numpy(y_pred)); })
      .def("result", &Metric::result)
      .def("reset", &Metric::reset)
      .def("totals", &Metric::totals)
      .def("config_json", [](const Metric& me) { return me.config().dump(); });
  py::class_<Mean, Metric, std::shared_ptr<Mean>>(m, "Mean")
      .def(py::init<std::string>(), py::arg("name") = "mean")
      .def("update_value", &Mean::update_value, py::arg("value"), py::arg("weight") = 1.0);
  m.def("make_metric", [](const std::string& name, const Shape& y_true_shape, const Shape& y_pred_shape) {
    return std::shared_ptr<Metric>(make_metric(name, nullptr, y_true_shape, y_pred_shape));
  });
}

}  // namespace mdtrain::bindings
