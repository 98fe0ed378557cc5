#pragma once
// Streams and events of the CUDA backend, without the CUDA headers (the handles are the CUDA
// runtime's own pointer types, forward-declared). Defined by core/cuda/runtime.cpp, or by the stub
// ops/cuda/no_cuda.cpp, whose constructors throw.
//
// Each GPU has two streams, created on first use and kept for the life of the process: the
// compute stream, where every kernel and copy of mdtrain runs, and the communication stream,
// where NCCL collectives run. They are ordered with events only where data crosses between them
// (gradients ready -> all-reduce; all-reduce done -> optimizer update), so communication
// overlaps the compute that does not depend on it.
struct CUstream_st;  // cudaStream_t is CUstream_st*
struct CUevent_st;   // cudaEvent_t is CUevent_st*

namespace mdtrain::cuda {

class Stream;

// A CUDA event without timing (the cheap kind). Move-only.
class Event {
 public:
  explicit Event(int device);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the point reached by the work enqueued on `stream` so far.
  void record(const Stream& stream);
  // True when the work before the last record() has finished (true if never recorded).
  bool query() const;
  // Blocks the calling thread until then.
  void synchronize() const;
  int device() const { return device_; }
  CUevent_st* handle() const { return event_; }

 private:
  int device_ = 0;
  CUevent_st* event_ = nullptr;
};

class Stream {
 public:
  int device() const { return device_; }
  CUstream_st* handle() const { return stream_; }
  // Later work on this stream waits for `event` (the host does not block).
  void wait(const Event& event) const;
  // Blocks the calling thread until the work enqueued so far has finished.
  void synchronize() const;

 private:
  friend Stream& compute_stream(int device);
  friend Stream& communication_stream(int device);
  Stream(int device, CUstream_st* stream) : device_(device), stream_(stream) {}
  int device_;
  CUstream_st* stream_;
};

Stream& compute_stream(int device);
Stream& communication_stream(int device);

// Makes `device` current for the calling thread and restores the previous one on destruction.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace mdtrain::cuda
