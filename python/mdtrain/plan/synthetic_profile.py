"""A ModelProfile from FLOPs instead of timings: for models we cannot run here (ResNet-101 and
VGG-16 on ImageNet, published_record.py), each layer's time is its FLOPs at a given rate (a
device's peak, or the rate a published single-device throughput implies). The result feeds the
same step replays (the price_*.py pricers) as a measured profile, with scale 1.0: its times are already the
device's."""
import dataclasses

from mdtrain.plan.profile import LayerCost, ModelProfile


@dataclasses.dataclass(frozen=True)
class LayerSpec:
    """One layer as an architecture defines it: per row (one example), forward FLOPs (2 per
    multiply-add), trainable values, output values (stashed for backward). backward_ratio:
    backward FLOPs ÷ forward FLOPs (2 for a layer with a kernel: input and weight gradients)."""
    name: str
    kind: str
    params: int
    activation_values: int
    forward_flops: float
    backward_ratio: float = 2.0


def profile_from_flops(name, layers, input_values, flops_per_second, optimizer="sgd", optimizer_slots=0):
    """A ModelProfile whose layer times are FLOPs / flops_per_second per row, with no fixed cost
    per call: every layer is assumed to run at the same rate (the planner's own assumption on
    presets). The rate may exceed a device's peak when its kernels do fewer multiplies than the
    direct convolution the FLOPs count (cuDNN's Winograd for 3x3 convolutions). No measured update
    (the replay then costs the update at the cluster's memory bandwidth) and no per-step overhead."""
    if not flops_per_second > 0:
        raise ValueError(f"profile_from_flops: flops_per_second must be > 0, got {flops_per_second!r}")
    costs = []
    for spec in layers:
        backward = spec.forward_flops * spec.backward_ratio
        total = spec.forward_flops + backward
        costs.append(LayerCost(name=spec.name, kind=spec.kind, params=spec.params,
                               activation_values=spec.activation_values, forward_flops=spec.forward_flops,
                               backward_flops=backward, fixed_s=0.0, per_row_s=total / flops_per_second,
                               backward_share=backward / total if total else 0.5))
    return ModelProfile(name=name, layers=tuple(costs), input_values=input_values, optimizer=optimizer,
                        optimizer_slots=optimizer_slots, rows_measured=(), threads=0)
