"""tf.nn: activations, crossentropies and the loss scaling helpers of custom training loops."""
from mdtrain._eager.ops import (bias_add, compute_average_loss, l2_loss, leaky_relu, log_softmax,  # noqa: F401
                                relu, scale_regularization_loss, sigmoid, sigmoid_cross_entropy_with_logits,
                                softmax, softmax_cross_entropy_with_logits, softplus,
                                sparse_softmax_cross_entropy_with_logits, tanh)
