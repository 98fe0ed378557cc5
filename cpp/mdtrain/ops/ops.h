#pragma once
// The public op API: each function validates its arguments (shapes, dtypes, devices) and then
// dispatches to the kernels of the tensors' device. Tensors must be contiguous (all mdtrain
// tensors are) and of one floating dtype per call.
#include <cstdint>

#include "mdtrain/core/tensor.h"
#include "mdtrain/ops/activation.h"

namespace mdtrain::ops {

// c = alpha * op(a) @ op(b) + beta * c, all 2-D; op(t) = t or t^T.
void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, double alpha = 1.0,
          double beta = 0.0);

// y = act(z + bias) row by row (bias may be undefined). z is (rows, cols); y may alias z.
// For softmax the activation is taken along each row.
void bias_activation(const Tensor& z, const Tensor& bias, Activation act, Tensor& y);

// dz = dy * act'(...) given the forward input z (needed by GELU only) and output y.
// dz may alias dy.
void activation_backward(Activation act, const Tensor& z, const Tensor& y, const Tensor& dy, Tensor& dz);

// out[j] = beta * out[j] + sum_i x[i, j]  (the bias gradient).
void sum_rows(const Tensor& x, Tensor& out, double beta = 0.0);

// Inverted dropout: y = x * keep / (1 - rate) where keep = uniform(seed, stream, first_element + i) >= rate.
// The mask is a function of the element's global position, so splitting a batch across replicas
// drops exactly the elements one device would. Writes the mask (0 or 1/(1-rate)) for backward.
void dropout(const Tensor& x, double rate, std::uint64_t seed, std::uint64_t stream, std::uint64_t first_element,
             Tensor& mask, Tensor& y);

// y = a * b element-wise (used by dropout's backward).
void multiply(const Tensor& a, const Tensor& b, Tensor& y);

// Copies rows x[indices[i]] into out[i] (the batch gather). indices are int64 row numbers.
void gather_rows(const Tensor& x, const std::int64_t* indices, std::int64_t count, Tensor& out);

// True if every element is finite.
bool all_finite(const Tensor& x);
// The sum of x's squared elements in float64, in a fixed order (gradient norms for clipping):
// the same bits on every run and machine for the same x and device kind.
double sum_of_squares(const Tensor& x);

// Threads one CPU op may split its work over (GEMMs in blocks, Conv2D by images; the BLAS itself
// runs single-threaded), process-wide: every core by default. While several replicas run, each
// on its own thread, this is 1 (see cpu::ThreadTeam); one replica alone may use every core.
void set_cpu_threads(int threads);
int cpu_thread_count();

}  // namespace mdtrain::ops
