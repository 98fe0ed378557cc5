#pragma once
// Check macros for the CUDA backend's own sources (they include the CUDA headers; nothing outside
// ops/cuda/ and distribute/nccl/ includes this file). Every CUDA runtime, cuBLAS and NCCL call
// goes through one of them, so a failure is a std::runtime_error naming the call, the error
// string and the place, e.g. "[cuda] cudaMemcpyAsync failed: invalid argument (at runtime.cpp:88)".
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "mdtrain/core/cuda/runtime.h"

#define MDTRAIN_CUDA_CHECK(call)                                                                                 \
  do {                                                                                                           \
    const cudaError_t mdtrain_status_ = (call);                                                                  \
    if (mdtrain_status_ != cudaSuccess)                                                                          \
      ::mdtrain::cuda::throw_call_error("cuda", #call, cudaGetErrorString(mdtrain_status_), __FILE__, __LINE__); \
  } while (0)

#define MDTRAIN_CUBLAS_CHECK(call)                                                                                  \
  do {                                                                                                              \
    const cublasStatus_t mdtrain_status_ = (call);                                                                  \
    if (mdtrain_status_ != CUBLAS_STATUS_SUCCESS)                                                                   \
      ::mdtrain::cuda::throw_call_error("cuda", #call, cublasGetStatusString(mdtrain_status_), __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a bad configuration shows up in cudaGetLastError, named after the kernel.
#define MDTRAIN_CUDA_CHECK_LAUNCH(kernel_name) ::mdtrain::cuda::check_launch((kernel_name), __FILE__, __LINE__)

namespace mdtrain::cuda {
inline void check_launch(const char* kernel_name, const char* file, int line) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw_call_error("cuda", (std::string(kernel_name) + "<<<>>>").c_str(), cudaGetErrorString(status), file, line);
}
}  // namespace mdtrain::cuda
