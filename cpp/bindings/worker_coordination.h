#pragma once
// broadcast_from_chief / barrier / sum_across_workers on a strategy's Python class: the host-side
// coordination between workers that the front end's multi-worker checks use (seeds, weights, loss
// sums). They are no-ops in a job of one process.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "bindings.h"
#include "mdtrain/strategy/multi_worker_mirrored_strategy.h"

namespace mdtrain::bindings {

// `workers_of(s)` is the MultiWorkerMirroredStrategy joining s's processes, or nullptr when s runs
// in one process.
template <class S, class... Options, class WorkersOf>
void def_worker_coordination(py::class_<S, Options...>& cls, WorkersOf workers_of) {
  cls.def(
         "broadcast_from_chief",
         [workers_of](S& s, py::array_t<std::uint8_t, py::array::c_style> data) {
           MultiWorkerMirroredStrategy* workers = workers_of(s);
           if (!workers) return;
           auto buf = data.mutable_unchecked<1>();
           void* ptr = buf.shape(0) ? buf.mutable_data(0) : nullptr;
           const auto n = static_cast<std::size_t>(buf.shape(0));
           py::gil_scoped_release release;
           workers->broadcast_from_chief(ptr, n);
         },
         py::arg("data"))
      .def("barrier",
           [workers_of](S& s) {
             MultiWorkerMirroredStrategy* workers = workers_of(s);
             if (!workers) return;
             py::gil_scoped_release release;
             workers->barrier();
           })
      .def(
          "sum_across_workers",
          [](S& s, py::array_t<double, py::array::c_style> data) {
            // In place: every worker gets the element-wise sum (rank order) over all workers.
            auto buf = data.mutable_unchecked<1>();
            if (buf.shape(0) == 0) return;
            std::vector<double> values(buf.data(0), buf.data(0) + buf.shape(0));
            {
              py::gil_scoped_release release;
              s.sum_across_workers(values);
            }
            std::copy(values.begin(), values.end(), buf.mutable_data(0));
          },
          py::arg("data"));
}

// For strategies that hold the processes' MultiWorkerMirroredStrategy as workers() (null or another
// strategy in one process).
template <class S>
MultiWorkerMirroredStrategy* workers_strategy(S& s) {
  return dynamic_cast<MultiWorkerMirroredStrategy*>(s.workers().get());
}

}  // namespace mdtrain::bindings
