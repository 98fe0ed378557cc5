// Compiled instead of the CUDA runtime when MDTRAIN_CUDA=OFF (or CUDA is not found): reports no
// devices, and everything that would touch a GPU throws std::runtime_error saying how to rebuild.
// Defines every function of core/cuda/{runtime,device_memory,stream}.h; the kernels' stub is
// ops/cuda/no_cuda.cpp.
#include <string>

#include "mdtrain/core/cuda/stream.h"
#include "mdtrain/core/cuda/device_memory.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/core/cuda/runtime.h"

namespace mdtrain::cuda {

namespace {
[[noreturn]] void unavailable(const char* what) {
  fail<std::runtime_error>("[cuda] ", what, ": ", unavailable_reason());
}
}  // namespace

int device_count() { return 0; }

std::string unavailable_reason() {
  return "mdtrain was built without CUDA (rebuild with -DMDTRAIN_CUDA=ON on a machine with the CUDA toolkit)";
}

bool built_with_cuda() { return false; }

std::string device_name(int device) {
  require_device(device);
  return {};
}

void require_device(int device) {
  fail<std::invalid_argument>("[cuda] /device:GPU:", device, " is not available: ", unavailable_reason());
}

void synchronize(int device) { require_device(device); }

void throw_call_error(const char* area, const char* call_text, const std::string& message, const char* file, int line) {
  fail<std::runtime_error>("[", area, "] ", call_text, " failed: ", message, " (at ", file, ":", line, ")");
}

std::string error_string(int code) { return cat("CUDA error ", code); }

// core/cuda/device_memory.h
std::shared_ptr<void> allocate(const Device& device, std::size_t) {
  unavailable(cat("cannot allocate on ", device.to_string()).c_str());
}
std::shared_ptr<void> allocate_pinned(std::size_t) { unavailable("pinned host memory"); }
void copy(void*, const Device&, const void*, const Device&, std::size_t) { unavailable("copy"); }
void copy_strided(void*, const Device&, std::size_t, const void*, const Device&, std::size_t, std::size_t,
                  std::size_t) {
  unavailable("copy");
}
void zero(void*, const Device&, std::size_t) { unavailable("zero"); }
void fill(void*, const Device&, DType, std::int64_t, double) { unavailable("fill"); }
MemoryStats memory_stats(int device) {
  require_device(device);
  return {};
}
void release_cached_memory() {}

// core/cuda/stream.h
Event::Event(int device) : device_(device) { require_device(device); }
Event::~Event() = default;
Event::Event(Event&& other) noexcept : device_(other.device_), event_(other.event_) {}
Event& Event::operator=(Event&& other) noexcept {
  device_ = other.device_;
  return *this;
}
void Event::record(const Stream&) { unavailable("Event::record"); }
bool Event::query() const { return true; }
void Event::synchronize() const {}
void Stream::wait(const Event&) const { unavailable("Stream::wait"); }
void Stream::synchronize() const { unavailable("Stream::synchronize"); }
Stream& compute_stream(int device) {
  require_device(device);
  unavailable("compute_stream");
}
Stream& communication_stream(int device) {
  require_device(device);
  unavailable("communication_stream");
}
DeviceGuard::DeviceGuard(int device) { require_device(device); }
DeviceGuard::~DeviceGuard() = default;

}  // namespace mdtrain::cuda
