#pragma once
// What the rest of mdtrain may ask of the CUDA backend. Built from the .cu sources when
// MDTRAIN_CUDA is on, from no_cuda.cpp otherwise (which reports no devices and refuses work).
#include <string>

namespace mdtrain::cuda {

// Number of usable GPUs; 0 (not an error) when there is no driver or no device.
int device_count();
// Why CUDA work cannot run here, for error messages; empty when it can.
std::string unavailable_reason();

}  // namespace mdtrain::cuda
