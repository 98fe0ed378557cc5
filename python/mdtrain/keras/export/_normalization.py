"""Converters of the normalization layers, in their inference form: BatchNormalization with its
moving statistics folded into one scale and shift per channel (computed in float64, stored as
float32), LayerNormalization as ONNX's LayerNormalization (opset 17) over the last axis."""
import numpy as np


def _last_axis(view):
    axis = int(view.config.get("axis", -1))
    if axis not in (-1, len(view.input_shape)):
        view.refuse(f"axis={axis} (only the last axis)")


def batch_normalization(g, view, inputs, masks):
    _last_axis(view)
    mean = view.weight("moving_mean").astype(np.float64)
    variance = view.weight("moving_variance").astype(np.float64)
    gamma, beta = view.weight("gamma"), view.weight("beta")
    scale = 1.0 / np.sqrt(variance + float(view.config["epsilon"]))
    if gamma is not None:
        scale = scale * gamma.astype(np.float64)
    shift = -mean * scale
    if beta is not None:
        shift = shift + beta.astype(np.float64)
    y = g.op("Mul", [inputs[0], g.const(scale, f"{view.name}/scale")], f"{view.name}/scaled")
    return g.op("Add", [y, g.const(shift, f"{view.name}/shift")], view.name)


def layer_normalization(g, view, inputs, masks):
    _last_axis(view)
    width = view.input_shape[-1]
    gamma, beta = view.weight("gamma"), view.weight("beta")
    args = [inputs[0], g.const(gamma if gamma is not None else np.ones(width), f"{view.name}/gamma")]
    if beta is not None:
        args.append(g.const(beta, f"{view.name}/beta"))
    return g.op("LayerNormalization", args, view.name, axis=-1, epsilon=float(view.config["epsilon"]))


CONVERTERS = {"BatchNormalization": batch_normalization, "LayerNormalization": layer_normalization}
