// Communicators for Python: the collectives on NumPy arrays, and where this process sits in an
// MPI job. The strategies use communicators internally; this is for tests, benchmarks and code
// that syncs its own arrays between workers (mpirun -np 2 python script.py).
#include "bindings.h"
#include "mdtrain/distribute/communicator.h"
#include "mdtrain/distribute/optional_backends.h"
#include "mdtrain/distribute/registry.h"

namespace mdtrain::bindings {

namespace {

ReduceOp parse_op(const std::string& op) {
  if (op == "sum") return ReduceOp::Sum;
  if (op == "mean") return ReduceOp::Mean;
  if (op == "max") return ReduceOp::Max;
  if (op == "min") return ReduceOp::Min;
  throw std::invalid_argument("[distribute] op must be 'sum', 'mean', 'max' or 'min' (got '" + op + "')");
}

// A tensor viewing `array`, which the collective `op` writes into when `written`.
Tensor view(const py::array& array, const char* op, bool written) {
  if (written && !array.writeable()) {
    throw std::invalid_argument(std::string("[distribute] ") + op + ": the array is read-only");
  }
  return tensor_from_numpy(array);
}

std::vector<py::ssize_t> shape_of(const py::array& a) {
  return std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim());
}

}  // namespace

void init_distribute(py::module_& m) {
  py::class_<Communicator, std::shared_ptr<Communicator>>(
      m, "Communicator", "One rank of a group running collectives (mdtrain/distribute).")
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def_property_readonly("backend", &Communicator::backend)
      .def_property_readonly("timeout", &Communicator::timeout)
      .def("set_timeout", &Communicator::set_timeout, py::arg("seconds"))
      .def("abort", &Communicator::abort, py::arg("reason"),
           "Makes every pending and later collective of the group raise.")
      .def(
          "split",
          [](Communicator& c, int color, int key) {
            std::unique_ptr<Communicator> child;
            {
              py::gil_scoped_release release;  // collective: waits for every rank
              child = c.split(color, key);
            }
            return std::shared_ptr<Communicator>(std::move(child));
          },
          py::arg("color"), py::arg("key") = 0,
          "Collective, like MPI_Comm_split: ranks with the same color >= 0 form a new group, "
          "ordered by (key, rank); a negative color joins none (None).")
      .def("barrier",
           [](Communicator& c) {
             py::gil_scoped_release release;
             c.barrier();
           })
      .def(
          "all_reduce",
          [](Communicator& c, py::array array, const std::string& op) {
            Tensor t = view(array, "all_reduce", true);
            const ReduceOp r = parse_op(op);
            {
              py::gil_scoped_release release;
              c.all_reduce(t, r);
            }
            return array;
          },
          py::arg("array"), py::arg("op") = "sum", "In place; returns the array.")
      .def(
          "reduce",
          [](Communicator& c, py::array array, int root, const std::string& op) {
            Tensor t = view(array, "reduce", true);
            const ReduceOp r = parse_op(op);
            {
              py::gil_scoped_release release;
              c.reduce(t.raw(), static_cast<std::size_t>(t.numel()), t.dtype(), r, root);
            }
            return array;
          },
          py::arg("array"), py::arg("root"), py::arg("op") = "sum",
          "In place on the root (other ranks keep their data); returns the array.")
      .def(
          "broadcast",
          [](Communicator& c, py::array array, int root) {
            Tensor t = view(array, "broadcast", true);
            {
              py::gil_scoped_release release;
              c.broadcast(t, root);
            }
            return array;
          },
          py::arg("array"), py::arg("root"), "In place; returns the array.")
      .def(
          "all_gather",
          [](Communicator& c, py::array array) {
            Tensor send = view(array, "all_gather", false);
            std::vector<py::ssize_t> shape = shape_of(array);
            if (shape.empty()) shape.push_back(1);
            shape[0] *= c.size();
            py::array out(array.dtype(), shape);
            Tensor recv = view(out, "all_gather", true);
            {
              py::gil_scoped_release release;
              c.all_gather(send, recv);
            }
            return out;
          },
          py::arg("array"), "Every rank's array, concatenated along the first axis in rank order.")
      .def(
          "reduce_scatter",
          [](Communicator& c, py::array array, const std::string& op) {
            Tensor send = view(array, "reduce_scatter", false);
            std::vector<py::ssize_t> shape = shape_of(array);
            if (shape.empty() || shape[0] % c.size() != 0) {
              throw std::invalid_argument("[distribute] reduce_scatter: the first dimension (" +
                                          std::string(shape.empty() ? "none" : std::to_string(shape[0])) +
                                          ") must be a multiple of size() (" + std::to_string(c.size()) + ")");
            }
            shape[0] /= c.size();
            py::array out(array.dtype(), shape);
            Tensor recv = view(out, "reduce_scatter", true);
            const ReduceOp r = parse_op(op);
            {
              py::gil_scoped_release release;
              c.reduce_scatter(send, recv, r);
            }
            return out;
          },
          py::arg("array"), py::arg("op") = "sum", "Block rank() (along the first axis) of the reduction over ranks.");

  m.def(
      "make_communicators",
      [](const std::string& backend, int local_size) {
        std::vector<std::unique_ptr<Communicator>> made;
        {
          py::gil_scoped_release release;  // an MPI communicator waits for every process
          made = create_communicators(backend, local_size);
        }
        std::vector<std::shared_ptr<Communicator>> out;
        for (auto& c : made) out.emplace_back(std::move(c));
        return out;
      },
      py::arg("backend"), py::arg("local_size") = 1,
      "The communicators this process drives (registry.h): 'mpi' gives this process's rank.");
  m.def(
      "mpi_world_info",
      [] {
        MpiWorldInfo w;
        {
          py::gil_scoped_release release;
          w = mpi_world_info();
        }
        py::dict d;
        d["rank"] = w.rank;
        d["size"] = w.size;
        d["local_rank"] = w.local_rank;
        d["local_size"] = w.local_size;
        return d;
      },
      "{rank, size, local_rank, local_size} of this process in the MPI job (initializes MPI).");
  m.def("mpi_finalize", &mpi_finalize, "Finalizes MPI if mdtrain initialized it (also done at exit).");
}

}  // namespace mdtrain::bindings
