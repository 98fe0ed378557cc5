#pragma once
// The ops of one time step of a recurrent layer (nn/lstm.h). Each call handles a batch of rows of
// one step; the layer does the GEMMs (the input projection of every step at once, then h @
// recurrent_kernel per step) with ops::gemm. Tensors are float32 or float64 of one dtype, all on
// the host (CPU loops, split over the intra-op threads for large steps) or all on one GPU (CUDA
// kernels, ops/cuda/recurrent_kernels.h); outputs must not overlap the inputs. Per-element math:
// ops/recurrent_math.h, the same functions on both.
#include "mdtrain/core/tensor.h"
#include "mdtrain/core/threading/thread_team.h"

namespace mdtrain::ops {

// z (rows, 4u) pre-activations of the gates i, f, c, o; c_prev (rows, u). Writes gates (rows, 4u)
// activated, c and h (rows, u).
void lstm_step_forward(const Tensor& z, const Tensor& c_prev, Tensor& gates, Tensor& c, Tensor& h);

// Backward of lstm_step_forward: dh (rows, u) = dL/dh of the step; dc (rows, u) holds dL/dc from
// the next step and is overwritten with dL/dc_prev; dz (rows, 4u) = dL/dz.
void lstm_step_backward(const Tensor& gates, const Tensor& c_prev, const Tensor& c, const Tensor& dh, Tensor& dc,
                        Tensor& dz);

}  // namespace mdtrain::ops

namespace mdtrain::ops {

// Keras's GRU step (reset_after=True): xz, hz (rows, 3u) the input and recurrent projections with
// their biases (gates z, r, h), h_prev (rows, u). Writes gates (rows, 3u: z, r, hh) and h.
void gru_step_forward(const Tensor& xz, const Tensor& hz, const Tensor& h_prev, Tensor& gates, Tensor& h);

// Backward of gru_step_forward given dh: writes dx, dhz (rows, 3u) = dL/d(xz), dL/d(hz), and adds
// the direct part of dL/dh_prev (dh * z) into dh_prev when it is defined.
void gru_step_backward(const Tensor& gates, const Tensor& hz, const Tensor& h_prev, const Tensor& dh, Tensor& dx,
                       Tensor& dhz, Tensor& dh_prev);

// acc += g * mask element-wise, all three the same shape (recurrent_dropout's dL/dh_prev).
void add_masked(const Tensor& g, const Tensor& mask, Tensor& acc);

}  // namespace mdtrain::ops

namespace mdtrain::ops {

// Held by a recurrent layer around its loop over time steps: while it lives, the CPU ops of the
// steps (the h_prev @ recurrent_kernel GEMM, the cell's element-wise op) run on the calling thread
// instead of splitting over the intra-op team. A step's GEMM is small (batch x u x G*u) and there
// is one per step: waking the team and waiting for it at every step cost more than the split
// saved (perf, LSTM(128), batch 128, 2 vCPUs: a third of the time in the team's wait; 2.9x the
// samples/s once the steps ran serially, bench/rnn.py). The large GEMMs over all steps (input
// projection, weight gradients) run outside it and still split. No effect on GPU ops.
// Thread-local: replicas, pipeline stages or other models training on other threads are not affected.
using SerialTimeSteps = cpu::SerialOpsOnThisThread;

}  // namespace mdtrain::ops
