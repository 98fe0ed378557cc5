// The CUDA backend's host side: devices, error reporting, streams and events, the caching device
// allocator and copies. Compiled only when MDTRAIN_CUDA is on (no_cuda.cpp stands in otherwise).
#include <cuda_runtime_api.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mdtrain/core/caching_allocator.h"
#include "mdtrain/core/cuda/stream.h"
#include "mdtrain/core/cuda/device_memory.h"
#include "mdtrain/core/errors.h"
#include "mdtrain/core/cuda/check.h"
#include "mdtrain/core/cuda/runtime.h"
#include "mdtrain/core/cuda/staging.h"

namespace mdtrain::cuda {

// ---- errors ---------------------------------------------------------------------------------

namespace {

// "cudaMemcpyAsync(dst, ...)" -> "cudaMemcpyAsync"; "bias_kernel<<<>>>" -> "launch of bias_kernel".
std::string call_name(const char* text) {
  std::string s(text);
  std::size_t end = 0;
  while (end < s.size() && (std::isalnum(static_cast<unsigned char>(s[end])) || s[end] == '_' || s[end] == ':')) ++end;
  std::string name = s.substr(0, end);
  if (s.compare(end, 6, "<<<>>>") == 0) return "launch of " + name;
  return name.empty() ? s : name;
}

const char* base_name(const char* file) {
  const char* slash = std::strrchr(file, '/');
  return slash ? slash + 1 : file;
}

}  // namespace

void throw_call_error(const char* area, const char* call_text, const std::string& message, const char* file, int line) {
  fail<std::runtime_error>("[", area, "] ", call_name(call_text), " failed: ", message, " (at ", base_name(file), ":",
                           line, ")");
}

std::string error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

// ---- devices --------------------------------------------------------------------------------

namespace {

struct DeviceCount {
  int count = 0;
  std::string reason;
};

// Asked once: the answer cannot change while the process runs (CUDA_VISIBLE_DEVICES is read at
// the runtime's initialisation).
const DeviceCount& probe() {
  static const DeviceCount result = [] {
    DeviceCount r;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error so later calls are not blamed for it
      r.reason = cat("cudaGetDeviceCount says '", cudaGetErrorString(e), "'");
      return r;
    }
    if (n == 0) {
      r.reason = "cudaGetDeviceCount found 0 devices";
      return r;
    }
    r.count = n;
    return r;
  }();
  return result;
}

}  // namespace

int device_count() { return probe().count; }

std::string unavailable_reason() { return probe().reason; }

bool built_with_cuda() { return true; }

void require_device(int device) {
  const int n = device_count();
  if (n == 0) fail<std::invalid_argument>("[cuda] /device:GPU:", device, " is not available: ", unavailable_reason());
  MDTRAIN_CHECK(device >= 0 && device < n, std::invalid_argument, "[cuda] /device:GPU:", device,
                " does not exist: this process sees ", n, " GPU(s)");
}

std::string device_name(int device) {
  require_device(device);
  cudaDeviceProp prop{};
  MDTRAIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

void synchronize(int device) {
  DeviceGuard guard(device);
  MDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
}

DeviceGuard::DeviceGuard(int device) {
  require_device(device);
  MDTRAIN_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) MDTRAIN_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);  // cannot throw from a destructor; restoring rarely fails
}

// ---- streams and events ---------------------------------------------------------------------

namespace {

struct DeviceStreams {
  std::once_flag once;
  Stream* compute = nullptr;
  Stream* communication = nullptr;
};

DeviceStreams& streams_of(int device) {
  require_device(device);
  // Never freed: streams live as long as the CUDA context, and destroying them at exit races
  // with the runtime's own teardown.
  static std::vector<DeviceStreams>* all = new std::vector<DeviceStreams>(static_cast<std::size_t>(device_count()));
  return (*all)[static_cast<std::size_t>(device)];
}

CUstream_st* make_stream(int device) {
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  // Non-blocking: no implicit synchronisation with the legacy default stream.
  MDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

}  // namespace

Stream& compute_stream(int device) {
  DeviceStreams& d = streams_of(device);
  std::call_once(d.once, [&] {
    d.compute = new Stream(device, make_stream(device));
    d.communication = new Stream(device, make_stream(device));
  });
  return *d.compute;
}

Stream& communication_stream(int device) {
  compute_stream(device);
  return *streams_of(device).communication;
}

void Stream::wait(const Event& event) const { MDTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream_, event.handle(), 0)); }

void Stream::synchronize() const { MDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

Event::Event(int device) : device_(device) {
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  MDTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  event_ = e;
}

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept : device_(other.device_), event_(other.event_) { other.event_ = nullptr; }

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_) cudaEventDestroy(event_);
    device_ = other.device_;
    event_ = other.event_;
    other.event_ = nullptr;
  }
  return *this;
}

void Event::record(const Stream& stream) { MDTRAIN_CUDA_CHECK(cudaEventRecord(event_, stream.handle())); }

bool Event::query() const {
  const cudaError_t e = cudaEventQuery(event_);
  if (e == cudaErrorNotReady) return false;
  MDTRAIN_CUDA_CHECK(e);
  return true;
}

void Event::synchronize() const { MDTRAIN_CUDA_CHECK(cudaEventSynchronize(event_)); }

// ---- memory ---------------------------------------------------------------------------------

namespace {

CachingAllocator::RawAllocator device_raw(int device) {
  return {[device](std::size_t bytes) -> void* {
            DeviceGuard guard(device);
            void* p = nullptr;
            const cudaError_t e = cudaMalloc(&p, bytes);
            if (e == cudaErrorMemoryAllocation) {
              cudaGetLastError();  // not sticky, but clear it so the retry is not blamed
              return nullptr;
            }
            MDTRAIN_CUDA_CHECK(e);
            return p;
          },
          [device](void* p) {
            // At exit the runtime may already be unloading (cudaErrorCudartUnloading): nothing to do.
            int previous = -1;
            if (cudaGetDevice(&previous) != cudaSuccess) return;
            cudaSetDevice(device);
            cudaFree(p);
            cudaSetDevice(previous);
          }};
}

CachingAllocator::RawAllocator pinned_raw() {
  return {[](std::size_t bytes) -> void* {
            void* p = nullptr;
            const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
            if (e == cudaErrorMemoryAllocation) {
              cudaGetLastError();
              return nullptr;
            }
            MDTRAIN_CUDA_CHECK(e);
            return p;
          },
          [](void* p) { cudaFreeHost(p); }};
}

struct Allocators {
  std::mutex mutex;
  std::vector<std::unique_ptr<CachingAllocator>> devices;
  std::unique_ptr<CachingAllocator> pinned;

  Allocators() {
    std::atexit([] { release_cached_memory(); });
  }

  CachingAllocator& device(int index) {
    require_device(index);
    std::lock_guard<std::mutex> lock(mutex);
    if (devices.empty()) devices.resize(static_cast<std::size_t>(device_count()));
    auto& a = devices[static_cast<std::size_t>(index)];
    if (!a) a = std::make_unique<CachingAllocator>(cat("/device:GPU:", index), device_raw(index));
    return *a;
  }

  CachingAllocator& host() {
    std::lock_guard<std::mutex> lock(mutex);
    if (!pinned) pinned = std::make_unique<CachingAllocator>("pinned host memory", pinned_raw());
    return *pinned;
  }
};

// Leaked on purpose: blocks may be returned by static objects destroyed after any static here.
Allocators& allocators() {
  static Allocators* a = new Allocators();
  return *a;
}

int gpu_index(const Device& device, const char* what) {
  MDTRAIN_CHECK(!device.is_cpu(), std::invalid_argument, "[cuda] ", what, ": ", device.to_string(), " is not a GPU");
  require_device(device.index);
  return device.index;
}

}  // namespace

std::shared_ptr<void> allocate(const Device& device, std::size_t bytes) {
  return allocators().device(gpu_index(device, "allocate")).allocate(bytes);
}

std::shared_ptr<void> allocate_pinned(std::size_t bytes) { return allocators().host().allocate(bytes); }

MemoryStats memory_stats(int device) {
  const CachingAllocator::Stats s = allocators().device(device).stats();
  MemoryStats m;
  m.in_use_bytes = s.in_use_bytes;
  m.cached_bytes = s.cached_bytes;
  m.device_allocations = s.raw_allocations;
  m.cache_hits = s.cache_hits;
  return m;
}

void release_cached_memory() {
  Allocators& a = allocators();
  std::lock_guard<std::mutex> lock(a.mutex);
  for (auto& d : a.devices)
    if (d) d->release_cached();
  if (a.pinned) a.pinned->release_cached();
}

void copy(void* dst, const Device& dst_device, const void* src, const Device& src_device, std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  // The stream of the GPU involved (the destination's when both are GPUs) orders the copy after
  // the kernels that produced the source on that device.
  const int device = dst_device.is_cpu() ? gpu_index(src_device, "copy") : gpu_index(dst_device, "copy");
  DeviceGuard guard(device);
  const Stream& stream = compute_stream(device);
  if (!dst_device.is_cpu() && !src_device.is_cpu() && dst_device.index != src_device.index) {
    // Another GPU's data: its compute stream must have finished producing it.
    compute_stream(src_device.index).synchronize();
    MDTRAIN_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, stream.handle()));
    return;
  }
  MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream.handle()));
  // Host destinations are read by the caller next; pageable host sources are consumed by the
  // time cudaMemcpyAsync returns, pinned ones are not, so wait for those too.
  if (dst_device.is_cpu()) {
    stream.synchronize();
  } else if (src_device.is_cpu()) {
    cudaPointerAttributes attr{};
    MDTRAIN_CUDA_CHECK(cudaPointerGetAttributes(&attr, src));
    if (attr.type == cudaMemoryTypeHost) stream.synchronize();
  }
}

void copy_strided(void* dst, const Device& dst_device, std::size_t dst_pitch, const void* src, const Device& src_device,
                  std::size_t src_pitch, std::size_t width, std::size_t rows) {
  if (width == 0 || rows == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    for (std::size_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, width);
    return;
  }
  // As copy(): the destination GPU's stream (the source's for a host destination) orders it.
  const int device = dst_device.is_cpu() ? gpu_index(src_device, "copy") : gpu_index(dst_device, "copy");
  DeviceGuard guard(device);
  const Stream& stream = compute_stream(device);
  if (!dst_device.is_cpu() && !src_device.is_cpu() && dst_device.index != src_device.index)
    compute_stream(src_device.index).synchronize();
  MDTRAIN_CUDA_CHECK(
      cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDefault, stream.handle()));
  // Host memory on either side is read or reused by the caller next.
  if (dst_device.is_cpu() || src_device.is_cpu()) stream.synchronize();
}

void zero(void* dst, const Device& device, std::size_t bytes) {
  if (bytes == 0) return;
  const int index = gpu_index(device, "zero");
  DeviceGuard guard(index);
  MDTRAIN_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, compute_stream(index).handle()));
}

// ---- staging --------------------------------------------------------------------------------

namespace detail {

namespace {

struct StagingSlot {
  std::shared_ptr<void> buffer;
  std::size_t capacity = 0;
  std::unique_ptr<Event> copied;  // recorded after the copy out of `buffer`
};

struct DeviceStaging {
  std::mutex mutex;
  StagingSlot slots[2];
  int next = 0;
};

DeviceStaging& staging_of(int device) {
  require_device(device);
  static std::vector<DeviceStaging>* all = new std::vector<DeviceStaging>(static_cast<std::size_t>(device_count()));
  return (*all)[static_cast<std::size_t>(device)];
}

}  // namespace

void stage_to_device(int device, void* dst, std::size_t bytes, const std::function<void(void*)>& fill) {
  if (bytes == 0) return;
  DeviceStaging& d = staging_of(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  StagingSlot& slot = d.slots[d.next];
  d.next ^= 1;
  if (slot.copied) slot.copied->synchronize();  // the copy two batches ago has left this buffer
  else slot.copied = std::make_unique<Event>(device);
  if (slot.capacity < bytes) {
    slot.buffer = allocate_pinned(bytes);
    slot.capacity = bytes;
  }
  fill(slot.buffer.get());
  DeviceGuard guard(device);
  const Stream& stream = compute_stream(device);
  MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, slot.buffer.get(), bytes, cudaMemcpyHostToDevice, stream.handle()));
  slot.copied->record(stream);
}

void copy_to_host(void* host, const void* device_ptr, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  MDTRAIN_CUDA_CHECK(cudaMemcpyAsync(host, device_ptr, bytes, cudaMemcpyDeviceToHost, stream));
  MDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace detail

}  // namespace mdtrain::cuda
