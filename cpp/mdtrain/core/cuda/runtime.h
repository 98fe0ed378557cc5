#pragma once
// What the rest of mdtrain may ask of the CUDA backend about devices. Built from
// core/cuda/runtime.cpp when MDTRAIN_CUDA is on, from no_cuda.cpp otherwise (which reports no
// devices and refuses work). Memory: core/cuda/device_memory.h; streams: core/cuda/stream.h; kernels:
// ops/cuda/kernels.h and friends.
#include <string>

namespace mdtrain::cuda {

// Number of usable GPUs; 0 (not an error) when there is no driver or no device: every error of
// cudaGetDeviceCount maps to 0, and unavailable_reason() says which.
int device_count();
// Why CUDA work cannot run here, for error messages and skipped tests; empty when it can.
std::string unavailable_reason();
// True when this build has the CUDA backend (whether or not a GPU is present).
bool built_with_cuda();
// "NVIDIA A100-SXM4-80GB" (cudaGetDeviceProperties); throws like require_device.
std::string device_name(int device);
// Throws std::invalid_argument("[cuda] ...") unless 0 <= device < device_count(); the message
// carries unavailable_reason() when there is no GPU at all.
void require_device(int device);
// Waits until all work enqueued on the device's streams has finished.
void synchronize(int device);

// The one way a failed CUDA, cuBLAS or NCCL call becomes an exception:
// std::runtime_error("[<area>] <call> failed: <message> (at <file>:<line>)"), with <call> the
// function name taken from the call's text. The check macros of ops/cuda/check.h use it.
[[noreturn]] void throw_call_error(const char* area, const char* call_text, const std::string& message,
                                   const char* file, int line);
// cudaGetErrorString(code) in the CUDA build; "CUDA error <code>" in the stub.
std::string error_string(int code);

}  // namespace mdtrain::cuda
