#pragma once
// MDTRAIN_HD marks functions whose math is shared by the CPU kernels and the CUDA kernels, so the
// CPU tests exercise exactly the arithmetic the GPU runs. This is the one place a build flag is tested.
#if defined(__CUDACC__)
#define MDTRAIN_HD __host__ __device__ inline
#else
#define MDTRAIN_HD inline
#endif
