#pragma once
// Every CUDA kernel of mdtrain (each __global__ function in cpp/mdtrain/**/*.cu), the shared
// MDTRAIN_HD functions it computes with, and the GPU test that compares it with the CPU.
//
// tests/cpp/ops/cuda_kernel_list_test.cpp reads the sources and fails, on any machine, when a
// __global__ kernel is missing here, when a listed functor is not an MDTRAIN_HD function that both
// the kernel's file and some CPU source call, or when the named GPU test does not exist in
// tests/cpp/gpu/. A kernel with no per-element math of its own (data movement, a plain sum) says
// why instead of naming functors. Adding a kernel therefore means: share its math, write its GPU
// test, list it here.

namespace mdtrain::cuda {

struct KernelEntry {
  const char* kernel;      // the __global__ function's name
  const char* source;      // its file, relative to cpp/mdtrain/
  const char* functors;    // space-separated "math::name" of the shared functions it calls
  const char* no_functor;  // why there are none (only when functors is empty)
  const char* gpu_test;    // "Suite.Name" of its test in tests/cpp/gpu/
};

inline constexpr KernelEntry kKernels[] = {
    // ops/ops.h
    {"bias_activation_kernel", "ops/cuda/elementwise_kernels.cu", "math::activate", "",
     "CudaKernels.BiasActivationMatchesCpu"},
    {"softmax_rows_kernel", "ops/cuda/elementwise_kernels.cu", "math::softmax_row", "",
     "CudaKernels.BiasActivationMatchesCpu"},
    {"activation_backward_kernel", "ops/cuda/elementwise_kernels.cu", "math::activation_backward_at", "",
     "CudaKernels.ActivationBackwardMatchesCpu"},
    {"softmax_backward_rows_kernel", "ops/cuda/elementwise_kernels.cu", "math::softmax_backward_row", "",
     "CudaKernels.ActivationBackwardMatchesCpu"},
    {"sum_rows_kernel", "ops/cuda/elementwise_kernels.cu", "", "a column sum in row order, as the CPU loop adds",
     "CudaKernels.SumRowsMatchesCpu"},
    {"dropout_kernel", "ops/cuda/elementwise_kernels.cu", "math::dropout_mask_from_block", "",
     "CudaKernels.DropoutMatchesCpuBitwise"},
    {"multiply_kernel", "ops/cuda/elementwise_kernels.cu", "", "one multiplication per element",
     "CudaKernels.MultiplyMatchesCpu"},
    {"gather_rows_kernel", "ops/cuda/elementwise_kernels.cu", "", "data movement", "CudaKernels.GatherRowsMatchesCpu"},
    {"all_finite_kernel", "ops/cuda/elementwise_kernels.cu", "math::nonfinite_probe", "",
     "CudaKernels.AllFiniteMatchesCpu"},
    {"sum_of_squares_kernel", "ops/cuda/elementwise_kernels.cu", "",
     "a sum of x*x in double (clipnorm), block partials added on the host in block order",
     "CudaKernels.SumOfSquaresMatchesCpu"},
    {"fill_kernel", "ops/cuda/elementwise_kernels.cu", "", "data movement (Tensor::fill)",
     "CudaKernels.TensorFillZerosAndCopiesMatchTheHost"},
    // ops/noise.h
    {"gaussian_noise_kernel", "ops/cuda/noise_kernels.cu", "math::standard_normal_at math::add_gaussian_noise", "",
     "CudaNoiseKernels.GaussianNoiseMatchesCpu"},
    {"gaussian_dropout_kernel", "ops/cuda/noise_kernels.cu", "math::standard_normal_at math::gaussian_multiplier", "",
     "CudaNoiseKernels.GaussianDropoutMatchesCpu"},
    {"dropout_mask_kernel", "ops/cuda/noise_kernels.cu", "math::dropout_mask_from_block", "",
     "CudaNoiseKernels.DropoutMaskAndChannelScaleMatchCpuBitwise"},
    {"scale_channels_kernel", "ops/cuda/noise_kernels.cu", "", "one multiplication per element",
     "CudaNoiseKernels.DropoutMaskAndChannelScaleMatchCpuBitwise"},
    {"activity_penalty_kernel", "ops/cuda/noise_kernels.cu", "math::activity_penalty_of", "",
     "CudaNoiseKernels.ActivityPenaltyMatchesCpu"},
    {"activity_penalty_backward_kernel", "ops/cuda/noise_kernels.cu", "math::add_activity_penalty_grad", "",
     "CudaNoiseKernels.ActivityPenaltyMatchesCpu"},
    // ops/loss_ops.h
    {"sparse_xent_kernel", "ops/cuda/loss_kernels.cu",
     "math::sparse_xent_logits_row math::sparse_xent_probs_row math::row_weight", "",
     "CudaLossKernels.SparseCategoricalCrossentropyMatchesCpu"},
    {"dense_xent_kernel", "ops/cuda/loss_kernels.cu", "math::xent_logits_row math::xent_probs_row math::row_weight", "",
     "CudaLossKernels.CategoricalCrossentropyMatchesCpu"},
    {"binary_xent_kernel", "ops/cuda/loss_kernels.cu",
     "math::smooth_label math::bce_logits math::bce_probs math::row_weight", "",
     "CudaLossKernels.BinaryCrossentropyMatchesCpu"},
    {"regression_loss_kernel", "ops/cuda/loss_kernels.cu", "math::squared_error math::absolute_error math::row_weight",
     "", "CudaLossKernels.RegressionLossesMatchCpu"},
    {"sparse_argmax_matches_kernel", "ops/cuda/loss_kernels.cu", "math::argmax_first", "",
     "CudaLossKernels.MetricCountsMatchCpu"},
    {"argmax_matches_kernel", "ops/cuda/loss_kernels.cu", "math::argmax_first", "",
     "CudaLossKernels.MetricCountsMatchCpu"},
    {"top_k_matches_kernel", "ops/cuda/loss_kernels.cu", "math::class_id_or_none math::in_top_k", "",
     "CudaLossKernels.MetricCountsMatchCpu"},
    {"binary_matches_kernel", "ops/cuda/loss_kernels.cu", "math::binary_match", "",
     "CudaLossKernels.MetricCountsMatchCpu"},
    // optim/ (fused per bucket)
    {"sgd_kernel", "ops/cuda/optimizer_kernels.cu",
     "math::clip_gradient math::decay_weight math::sgd_update math::sgd_momentum_update", "",
     "CudaOptimizerKernels.SgdMatchesCpu"},
    {"adam_kernel", "ops/cuda/optimizer_kernels.cu",
     "math::clip_gradient math::decay_weight math::adam_update math::adam_amsgrad_update", "",
     "CudaOptimizerKernels.AdamMatchesCpu"},
    {"rmsprop_kernel", "ops/cuda/optimizer_kernels.cu",
     "math::rmsprop_increment math::rmsprop_centered_increment math::rmsprop_apply math::rmsprop_momentum_apply", "",
     "CudaOptimizerKernels.RmspropMatchesCpu"},
    {"adagrad_kernel", "ops/cuda/optimizer_kernels.cu", "math::adagrad_update", "",
     "CudaOptimizerKernels.AdagradMatchesCpu"},
    // distribute/nccl/nccl_communicator (Max/Min of floats, NaN-propagating)
    {"fold_ranks_kernel", "distribute/nccl/nccl_kernels.cu", "math::fold_max math::fold_min", "",
     "NcclCommunicator.MaxAndMinOfDeviceBuffersPropagateNaN"},
    // ops/normalization.h
    {"channel_partials_kernel", "ops/cuda/normalization_kernels.cu", "math::deviation math::grad_times_xhat", "",
     "CudaNormalizationKernels.ChannelReductionsMatchCpu"},
    {"channel_combine_kernel", "ops/cuda/normalization_kernels.cu", "",
     "adds channel_partials_kernel's chunk partials per channel in chunk order (and divides means by the row count)",
     "CudaNormalizationKernels.ChannelReductionsMatchCpu"},
    {"channel_normalize_kernel", "ops/cuda/normalization_kernels.cu", "math::normalize math::scale_and_shift", "",
     "CudaNormalizationKernels.ChannelNormalizeMatchesCpu"},
    {"channel_normalize_backward_kernel", "ops/cuda/normalization_kernels.cu", "math::normalize_input_grad", "",
     "CudaNormalizationKernels.ChannelNormalizeBackwardMatchesCpu"},
    {"row_normalize_kernel", "ops/cuda/normalization_kernels.cu",
     "math::deviation math::inverse_std math::normalize math::scale_and_shift", "",
     "CudaNormalizationKernels.RowNormalizeMatchesCpu"},
    {"row_normalize_backward_kernel", "ops/cuda/normalization_kernels.cu",
     "math::scaled_grad math::grad_times_xhat math::normalize_input_grad", "",
     "CudaNormalizationKernels.RowNormalizeBackwardMatchesCpu"},
    // ops/conv_ops.h
    {"im2col_kernel", "ops/cuda/conv_kernels.cu", "math::window_start math::taps_in_bounds", "",
     "CudaConvKernels.Im2colMatchesCpu"},
    {"col2im_kernel", "ops/cuda/conv_kernels.cu", "math::window_output_at", "", "CudaConvKernels.Col2imMatchesCpu"},
    {"max_pool2d_kernel", "ops/cuda/conv_kernels.cu", "math::window_start math::taps_in_bounds math::max_pool_takes",
     "", "CudaConvKernels.MaxPool2dMatchesCpu"},
    {"max_pool2d_backward_kernel", "ops/cuda/conv_kernels.cu", "math::window_output_at", "",
     "CudaConvKernels.MaxPool2dBackwardMatchesCpu"},
    {"avg_pool2d_kernel", "ops/cuda/conv_kernels.cu", "math::window_start math::taps_in_bounds math::window_count", "",
     "CudaConvKernels.AvgPool2dMatchesCpu"},
    {"avg_pool2d_backward_kernel", "ops/cuda/conv_kernels.cu",
     "math::window_output_at math::window_start math::taps_in_bounds math::window_count", "",
     "CudaConvKernels.AvgPool2dBackwardMatchesCpu"},
    {"global_avg_pool2d_kernel", "ops/cuda/conv_kernels.cu", "",
     "a per-channel sum over the image's pixels in pixel order, divided by their number, as the CPU loop does",
     "CudaConvKernels.GlobalAvgPool2dMatchesCpu"},
    {"global_avg_pool2d_backward_kernel", "ops/cuda/conv_kernels.cu", "", "one division per element",
     "CudaConvKernels.GlobalAvgPool2dBackwardMatchesCpu"},
    {"global_max_pool2d_kernel", "ops/cuda/conv_kernels.cu", "math::global_max_index", "",
     "CudaConvKernels.GlobalMaxPool2dMatchesCpu"},
    {"global_max_pool2d_backward_kernel", "ops/cuda/conv_kernels.cu", "math::global_max_grad_at", "",
     "CudaConvKernels.GlobalMaxPool2dBackwardMatchesCpu"},
    // ops/depthwise_conv.h
    {"depthwise_conv2d_kernel", "ops/cuda/depthwise_conv_kernels.cu", "math::depthwise_output_at", "",
     "CudaDepthwiseConvKernels.ForwardMatchesCpu"},
    {"depthwise_conv2d_input_grad_kernel", "ops/cuda/depthwise_conv_kernels.cu", "math::depthwise_input_grad_at", "",
     "CudaDepthwiseConvKernels.InputGradMatchesCpu"},
    {"depthwise_conv2d_kernel_grad_kernel", "ops/cuda/depthwise_conv_kernels.cu", "math::depthwise_kernel_grad_at", "",
     "CudaDepthwiseConvKernels.KernelGradMatchesCpu"},
    // ops/embedding.h
    {"embedding_rows_kernel", "ops/cuda/embedding_kernels.cu", "math::embedding_row", "",
     "CudaEmbeddingKernels.RowsMatchCpuAndFindTheFirstBadIndex"},
    {"embedding_lookup_kernel", "ops/cuda/embedding_kernels.cu", "", "data movement (rows of the table)",
     "CudaEmbeddingKernels.LookupMatchesCpuBitwise"},
    {"embedding_scatter_add_kernel", "ops/cuda/embedding_kernels.cu", "",
     "a per-column sum of dy rows in index order, as the CPU loop adds",
     "CudaEmbeddingKernels.ScatterAddMatchesCpuBitwise"},
    {"embedding_shard_rows_kernel", "ops/cuda/embedding_kernels.cu", "math::shard_row", "",
     "CudaEmbeddingKernels.ShardRowsMatchCpu"},
    // ops/recurrent.h
    {"lstm_step_forward_kernel", "ops/cuda/recurrent_kernels.cu", "math::lstm_unit_forward", "",
     "CudaRecurrentKernels.LstmStepForwardMatchesCpu"},
    {"lstm_step_backward_kernel", "ops/cuda/recurrent_kernels.cu", "math::lstm_unit_backward", "",
     "CudaRecurrentKernels.LstmStepBackwardMatchesCpu"},
    {"gru_step_forward_kernel", "ops/cuda/recurrent_kernels.cu", "math::gru_unit_forward", "",
     "CudaRecurrentKernels.GruStepForwardMatchesCpu"},
    {"gru_step_backward_kernel", "ops/cuda/recurrent_kernels.cu", "math::gru_unit_backward", "",
     "CudaRecurrentKernels.GruStepBackwardMatchesCpu"},
    {"add_masked_kernel", "ops/cuda/recurrent_kernels.cu", "math::add_masked", "",
     "CudaRecurrentKernels.AddMaskedMatchesCpu"},
    // ops/accumulate.h
    {"add_into_kernel", "ops/cuda/accumulate_kernels.cu", "math::accumulate", "",
     "CudaKernels.AddIntoMatchesCpuBitwise"},
    // ops/strided_view.h
    {"strided_view_kernel", "ops/cuda/strided_view_kernels.cu", "math::view_element", "",
     "CudaKernels.StridedViewMatchesCpuBitwise"},
    // ops/resize_bilinear.h
    {"resize_bilinear_kernel", "ops/cuda/resize_bilinear_kernels.cu", "math::resize_bilinear_element", "",
     "CudaKernels.ResizeBilinearMatchesCpu"},
    {"resize_bilinear_backward_kernel", "ops/cuda/resize_bilinear_kernels.cu", "math::resize_bilinear_backward_element",
     "", "CudaKernels.ResizeBilinearMatchesCpu"},
    // ops/parametric_activation.h
    {"parametric_activation_kernel", "ops/cuda/activation_layer_kernels.cu",
     "math::relu_with_args math::elu_with_alpha", "", "CudaKernels.ParametricActivationMatchesCpu"},
    {"parametric_activation_backward_kernel", "ops/cuda/activation_layer_kernels.cu",
     "math::relu_with_args_backward math::elu_with_alpha_backward", "", "CudaKernels.ParametricActivationMatchesCpu"},
    {"prelu_kernel", "ops/cuda/activation_layer_kernels.cu", "math::prelu math::row_of", "",
     "CudaKernels.PreluMatchesCpu"},
    {"prelu_input_grad_kernel", "ops/cuda/activation_layer_kernels.cu", "math::prelu_input_grad math::row_of", "",
     "CudaKernels.PreluMatchesCpu"},
    {"prelu_alpha_grad_kernel", "ops/cuda/activation_layer_kernels.cu", "math::prelu_alpha_grad_row", "",
     "CudaKernels.PreluMatchesCpu"},
    // ops/over_axes.h
    {"softmax_over_axes_kernel", "ops/cuda/activation_layer_kernels.cu", "math::softmax_over_row", "",
     "CudaKernels.SoftmaxOverAxesMatchesCpu"},
    {"softmax_over_axes_backward_kernel", "ops/cuda/activation_layer_kernels.cu", "math::softmax_over_backward_row", "",
     "CudaKernels.SoftmaxOverAxesMatchesCpu"},
    {"unit_normalize_kernel", "ops/cuda/activation_layer_kernels.cu", "math::unit_normalize_row", "",
     "CudaKernels.UnitNormalizeMatchesCpu"},
    {"unit_normalize_backward_kernel", "ops/cuda/activation_layer_kernels.cu", "math::unit_normalize_backward_row", "",
     "CudaKernels.UnitNormalizeMatchesCpu"},
};

}  // namespace mdtrain::cuda
