#include <optional>
#include <vector>

#include "bindings.h"
#include "mdtrain/data/prefetcher.h"

namespace mdtrain::bindings {

namespace {
using IndexArray = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;

std::vector<std::int64_t> index_vector(const IndexArray& a, const char* name) {
  MDTRAIN_CHECK(a.ndim() == 1, std::invalid_argument, "[data] ", name, " must be a 1-D int64 array, got ", a.ndim(),
                " dimensions");
  return std::vector<std::int64_t>(a.data(), a.data() + a.size());
}
}  // namespace

void init_data(py::module_& m) {
  py::class_<data::Prefetcher>(m, "Prefetcher",
                               "Gathers batches of rows of `sources` (C-contiguous arrays sharing the first "
                               "dimension) on a background thread, keeping up to `depth` batches ready.")
      .def(py::init([](const std::vector<py::array>& sources, int depth) {
             std::vector<Tensor> tensors;
             tensors.reserve(sources.size());
             for (const auto& a : sources) tensors.push_back(tensor_from_numpy(a));
             return std::make_unique<data::Prefetcher>(std::move(tensors), depth);
           }),
           py::arg("sources"), py::arg("depth"))
      .def(
          "add",
          [](data::Prefetcher& p, const IndexArray& indices, const IndexArray& offsets) {
            p.add(index_vector(indices, "indices"), index_vector(offsets, "offsets"));
          },
          py::arg("indices"), py::arg("offsets"),
          "Appends batches: batch b is rows indices[offsets[b]:offsets[b+1]]; len(offsets) = batches + 1.")
      .def("close", &data::Prefetcher::close, "No more add(): next() returns None after the last batch.")
      .def(
          "next",
          [](data::Prefetcher& p) -> py::object {
            std::optional<std::vector<Tensor>> batch;
            {
              py::gil_scoped_release release;
              batch = p.next();
            }
            if (!batch) return py::none();
            py::tuple out(batch->size());
            for (std::size_t k = 0; k < batch->size(); ++k) out[k] = numpy_from_tensor((*batch)[k]);
            return std::move(out);
          },
          "The next batch as a tuple of arrays (one per source), or None at the end. Raises the "
          "producer's error (IndexError for a row out of range) in order.")
      .def(
          "cancel",
          [](data::Prefetcher& p) {
            py::gil_scoped_release release;
            p.cancel();
          },
          "Stops and joins the background thread; next() returns None afterwards.")
      .def_property_readonly("depth", &data::Prefetcher::depth)
      .def_property_readonly("unconsumed", &data::Prefetcher::unconsumed,
                             "Batches added but not yet returned by next().")
      .def_property_readonly("ready", &data::Prefetcher::ready, "Batches gathered and waiting.");
}

}  // namespace mdtrain::bindings
