#include <chrono>

#include "bindings.h"
#include "mdtrain/distribute/registry.h"
#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/core/host_blocks.h"
#include "mdtrain/core/host_memory.h"
#include "mdtrain/core/threading/thread_team.h"
#include "mdtrain/core/memory_stats.h"
#include "mdtrain/ops/ops.h"

namespace mdtrain::bindings {

namespace {
DType dtype_of_array(const py::array& a) {
  // By kind and size, not by identity: a dtype unpickled (or made by another library) is equal
  // to NumPy's canonical one without being the same object.
  const py::dtype dt = a.dtype();
  const char order = dt.attr("byteorder").cast<std::string>()[0];
  if (order != '>') {
    const char kind = dt.kind();
    const auto size = dt.itemsize();
    if (kind == 'f' && size == 4) return DType::Float32;
    if (kind == 'f' && size == 8) return DType::Float64;
    if (kind == 'i' && size == 4) return DType::Int32;
    if (kind == 'i' && size == 8) return DType::Int64;
    if (kind == 'u' && size == 1) return DType::UInt8;
  }
  throw std::invalid_argument("[bindings] unsupported array dtype " + py::str(a.dtype()).cast<std::string>());
}

py::dtype numpy_dtype(DType d) {
  switch (d) {
    case DType::Float32: return py::dtype::of<float>();
    case DType::Float64: return py::dtype::of<double>();
    case DType::Int32: return py::dtype::of<std::int32_t>();
    case DType::Int64: return py::dtype::of<std::int64_t>();
    case DType::UInt8: return py::dtype::of<std::uint8_t>();
  }
  return py::dtype::of<float>();
}
}  // namespace

py::list shape_to_py(const Shape& shape) {
  py::list out;
  for (auto d : shape) out.append(d == kUnknownDim ? py::object(py::none()) : py::object(py::int_(d)));
  return out;
}

Shape shape_from_py(const py::handle& shape) {
  Shape out;
  for (const auto& d : py::reinterpret_borrow<py::sequence>(shape))
    out.push_back(d.is_none() ? kUnknownDim : d.cast<std::int64_t>());
  return out;
}

std::vector<Shape> shapes_from_py(const py::handle& shapes) {
  std::vector<Shape> out;
  for (const auto& s : py::reinterpret_borrow<py::sequence>(shapes)) out.push_back(shape_from_py(s));
  return out;
}

py::list shapes_to_py(const std::vector<Shape>& shapes) {
  py::list out;
  for (const auto& s : shapes) out.append(shape_to_py(s));
  return out;
}

Tensor tensor_from_numpy(const py::array& array) {
  if (!(array.flags() & py::array::c_style)) throw std::invalid_argument("[bindings] expected a C-contiguous array");
  Shape shape(array.shape(), array.shape() + array.ndim());
  // The owner holds a reference to the array; dropping it needs the GIL, which the training
  // loop does not hold, so the deleter takes it.
  auto* ref = new py::object(array);
  std::shared_ptr<void> owner(ref, [](void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(p);
  });
  return Tensor::wrap(const_cast<void*>(array.data()), shape, dtype_of_array(array), owner);
}

py::array numpy_from_tensor(const Tensor& tensor_any) {
  // NumPy reads host memory: a GPU tensor is copied to the host first.
  Tensor tensor = tensor_any;
  if (!tensor_any.device().is_cpu()) {
    tensor = Tensor(tensor_any.shape(), tensor_any.dtype());
    tensor.copy_from(tensor_any);
  }
  auto* keep = new Tensor(tensor);
  py::capsule base(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  std::vector<py::ssize_t> shape(tensor.shape().begin(), tensor.shape().end());
  return py::array(numpy_dtype(tensor.dtype()), shape, const_cast<void*>(tensor.raw()), base);
}

void init_core(py::module_& m) {
  m.def("cuda_device_count", &cuda::device_count, "GPUs usable by this build (0 without CUDA).");
  m.def("cuda_unavailable_reason", &cuda::unavailable_reason);
  m.def("cpu_thread_count", &ops::cpu_thread_count,
        "Threads one CPU op may split its work over (the BLAS runs single-threaded).");
  m.def("set_cpu_threads", &ops::set_cpu_threads, py::arg("threads"));
  m.def("max_cpu_threads", &cpu::max_threads,
        "The most threads a team may have: max(4 x the cores, 256) (core/threading/thread_team.h).");
  m.attr("MAX_CPU_DEVICES") = kMaxCpuDevices;
  m.attr("LARGE_HOST_ALLOCATION_BYTES") = kLargeHostAllocation;
  m.def(
      "host_memory_available",
      []() {
        const HostMemoryAvailable now = read_host_memory();
        py::dict d;
        const auto bytes = now.bytes();
        d["bytes"] = bytes ? py::object(py::int_(*bytes)) : py::object(py::none());
        d["description"] = now.describe();
        return d;
      },
      "The host memory this process can still get (core/host_memory.h): {'bytes': int or None "
      "(nothing known), 'description': where the figure comes from}.");
  m.def(
      "_set_host_memory_sources",
      [](const std::string& meminfo, const std::string& self_cgroup, const std::string& mountinfo,
         const std::string& root) {
        const HostMemorySources previous = set_host_memory_sources({meminfo, self_cgroup, mountinfo, root});
        return py::make_tuple(previous.meminfo, previous.self_cgroup, previous.mountinfo, previous.root);
      },
      py::arg("meminfo"), py::arg("self_cgroup"), py::arg("mountinfo"), py::arg("root") = "",
      "For tests: the files the large-allocation check reads; returns the previous ones.");
  m.def("available_communicators", &available_backends);
  m.def(
      "host_buffer",
      [](std::int64_t count) {
        if (count < 0)
          throw std::invalid_argument("[bindings] host_buffer: count must be >= 0, got " + std::to_string(count));
        return numpy_from_tensor(Tensor::zeros(Shape{count}, DType::Float32));
      },
      py::arg("count"),
      "A float32 array of `count` zeros in host memory allocated as the engine allocates its tensors "
      "(large blocks on huge pages, core/host_blocks.h): timings of collectives and copies then meet "
      "the memory a step's gradients live in.");
  m.attr("HUGE_PAGE_THRESHOLD_BYTES") = kHugePageThreshold;
  m.attr("HUGE_PAGE_BYTES") = kHugePageBytes;
  m.def(
      "memory_info",
      [](const std::string& device) {
        const MemoryInfo info = memory_info(Device::parse(device));
        py::dict d;
        d["current"] = info.current;
        d["peak"] = info.peak;
        return d;
      },
      py::arg("device"), "Bytes a device holds now and at most since the last reset (core/memory_stats.h).");
  m.def(
      "reset_memory_stats", [](const std::string& device) { reset_memory_stats(Device::parse(device)); },
      py::arg("device"));
  m.def("host_memory_info", []() {
    const MemoryInfo info = host_memory_info();
    py::dict d;
    d["current"] = info.current;
    d["peak"] = info.peak;
    return d;
  });
  m.def("parse_device", [](const std::string& s) {
    Device d = Device::parse(s);
    return py::make_tuple(d.kind == DeviceKind::CPU ? "CPU" : "GPU", d.index);
  });
  m.def(
      "time_gemm",
      [](std::int64_t m_, std::int64_t n, std::int64_t k, int repeats) {
        // Seconds per float32 GEMM (m x k @ k x n) through mdtrain's BLAS path, best of `repeats`:
        // the peak the benchmarks compare against, measured in the same process.
        Tensor a({m_, k}), b({k, n}), c({m_, n});
        a.fill(0.5);
        b.fill(0.25);
        py::gil_scoped_release release;
        double best = 1e30;
        for (int r = 0; r < repeats; ++r) {
          auto t0 = std::chrono::steady_clock::now();
          ops::gemm(a, false, b, false, c);
          best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return best;
      },
      py::arg("m"), py::arg("n"), py::arg("k"), py::arg("repeats") = 5);
  m.def(
      "json_roundtrip", [](const std::string& s) { return Json::parse(s).dump(); },
      "Parses and re-serialises JSON with the C++ parser (for tests).");
}

}  // namespace mdtrain::bindings
