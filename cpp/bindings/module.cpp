#include "bindings.h"
#include "mdtrain/core/errors.h"

namespace mdtrain::bindings {

namespace {
void register_exceptions() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const AllocationError& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const IoError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    } catch (const mdtrain::TimeoutError& e) {
      PyErr_SetString(PyExc_TimeoutError, e.what());
    } catch (const std::logic_error& e) {
      // invalid_argument, domain_error, length_error and out_of_range keep pybind11's mapping
      // (ValueError / IndexError); other logic errors are API misuse: RuntimeError.
      if (dynamic_cast<const std::invalid_argument*>(&e) || dynamic_cast<const std::domain_error*>(&e) ||
          dynamic_cast<const std::length_error*>(&e))
        PyErr_SetString(PyExc_ValueError, e.what());
      else if (dynamic_cast<const std::out_of_range*>(&e)) PyErr_SetString(PyExc_IndexError, e.what());
      else PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
}
}  // namespace

void init_plan(py::module_& m);       // plan_bindings.cpp: layer times and pipeline schedules for the planner
void init_step_plan(py::module_& m);  // step_plan_bindings.cpp: StepPlan, make_step_plan

}  // namespace mdtrain::bindings

PYBIND11_MODULE(_core, m) {
  using namespace mdtrain::bindings;
  m.doc() = "mdtrain's C++ core (private: use the mdtrain package)";
  register_exceptions();
  init_core(m);
  init_nn(m);
  init_conv_layers(m);
  init_normalization_layers(m);
  init_optim(m);
  init_losses_and_metrics(m);
  init_strategy(m);
  init_pipeline(m);
  init_wavefront(m);
  init_mesh(m);
  init_model(m);
  init_data(m);
  init_distribute(m);
  init_ps(m);
  init_tape(m);
  init_plan(m);
  init_step_plan(m);
}
