"""Converters of the merge layers: the element-wise merges fold their inputs in order (as the C++
layer does: Add, Sub, Mul, Max, Min; Average divides the sum by the count), after Unsqueeze gives
inputs of lower rank axes of size 1 after the batch axis (Keras's broadcasting; ONNX's then does
the rest); Concatenate joins them on its axis; Dot is Transpose + Reshape + MatMul (after Keras's
L2 normalization when normalize). Masks are merged as the functional graph runner merges them
(nn/layer_graph.cpp merged_mask): none unless every input of Add, Subtract or Average carries one
(or any input of Concatenate), ORed for those and for a concatenation on the last axis, joined
along time for one on axis 1; an unmasked input counts as all ones. Dot ends masks. Multiply,
Maximum and Minimum receiving masks are refused when the model is built, so they never reach here
with any."""
from functools import reduce

import numpy as np


def _expanded(g, view, inputs):
    """Inputs of lower rank with axes of size 1 after the batch axis, up to the output's rank."""
    rank = len(view.output_shape)
    out = []
    for k, (x, shape) in enumerate(zip(inputs, view.input_shapes)):
        extra = rank - len(shape)
        out.append(g.unsqueeze(x, list(range(1, extra + 1)), f"{view.name}/input{k}_expanded") if extra else x)
    return out


def _folded(op_type, g, view, inputs):
    return reduce(lambda a, b: g.op(op_type, [a, b], f"{view.name}/{op_type.lower()}"), _expanded(g, view, inputs))


def _fold(op_type, g, view, inputs):
    return g.op("Identity", [_folded(op_type, g, view, inputs)], view.name)


def _or_masks(g, view, masks):
    return reduce(lambda a, b: g.op("Or", [a, b], f"{view.name}/mask_or"), masks)


def add(g, view, inputs, masks):
    return add_like("Add", g, view, inputs, masks)


def subtract(g, view, inputs, masks):
    return add_like("Sub", g, view, inputs, masks)


def average(g, view, inputs, masks):
    total = _folded("Add", g, view, inputs)
    y = g.op("Div", [total, g.const(float(len(inputs)), f"{view.name}/count")], view.name)
    if masks and all(m is not None for m in masks):
        return y, _or_masks(g, view, masks)
    return y, None


def add_like(op_type, g, view, inputs, masks):
    y = _fold(op_type, g, view, inputs)
    if masks and all(m is not None for m in masks):
        return y, _or_masks(g, view, masks)
    return y, None


def _unmasked(op_type, name):
    def convert(g, view, inputs, masks):
        if any(m is not None for m in masks):
            view.refuse(f"{name} receives masks (refused by mdtrain's models as well)")
        return _fold(op_type, g, view, inputs), None
    return convert


multiply = _unmasked("Mul", "Multiply")


def _l2_normalized(g, view, x, axis, k):
    """keras.ops.normalize: x * min(1 / sqrt(sum x^2), 1e7) along `axis` (batch counted)."""
    squares = g.reduce("ReduceSum", g.op("Mul", [x, x], f"{view.name}/input{k}_squares"), [axis],
                       f"{view.name}/input{k}_sum_squares", keepdims=True)
    inverse = g.op("Reciprocal", [g.op("Sqrt", [squares], f"{view.name}/input{k}_norm")],
                   f"{view.name}/input{k}_inverse_norm")
    capped = g.op("Min", [inverse, g.const(1e7, f"{view.name}/inverse_norm_cap")], f"{view.name}/input{k}_capped")
    return g.op("Mul", [x, capped], f"{view.name}/input{k}_normalized")


def dot(g, view, inputs, masks):
    axes = view.config["axes"]
    axes = [axes, axes] if isinstance(axes, int) else list(axes)
    shapes = view.input_shapes
    axes = [a % (len(s) + 1) if a < 0 else a for a, s in zip(axes, shapes)]  # batch axis counted
    x, y = inputs
    if view.config.get("normalize"):
        x, y = _l2_normalized(g, view, x, axes[0], 0), _l2_normalized(g, view, y, axes[1], 1)
    a, b = axes
    rank_x, rank_y = len(shapes[0]) + 1, len(shapes[1]) + 1
    k = shapes[0][a - 1]
    x_rest = [d for i, d in enumerate(shapes[0], start=1) if i != a]
    y_rest = [d for i, d in enumerate(shapes[1], start=1) if i != b]
    # (batch, rest of x, k) @ (batch, k, rest of y), as Keras's batch_dot and the C++ layer.
    xt = g.op("Transpose", [x], f"{view.name}/x_t", perm=[0] + [i for i in range(1, rank_x) if i != a] + [a])
    yt = g.op("Transpose", [y], f"{view.name}/y_t", perm=[0, b] + [i for i in range(1, rank_y) if i != b])
    x3 = g.op("Reshape", [xt, g.ints([0, int(np.prod(x_rest, dtype=np.int64)), k], f"{view.name}/x_shape")],
              f"{view.name}/x3")
    y3 = g.op("Reshape", [yt, g.ints([0, k, int(np.prod(y_rest, dtype=np.int64))], f"{view.name}/y_shape")],
              f"{view.name}/y3")
    product = g.op("MatMul", [x3, y3], f"{view.name}/matmul")
    target = [0] + [int(d) for d in view.output_shape]
    return g.op("Reshape", [product, g.ints(target, f"{view.name}/shape")], view.name), None


def concatenate(g, view, inputs, masks):
    rank = len(view.output_shape)
    axis = int(view.config.get("axis", -1))
    y = g.op("Concat", inputs, view.name, axis=axis)
    if all(m is None for m in masks):
        return y, None
    axis = axis + rank + 1 if axis < 0 else axis
    full = [m if m is not None else g.all_steps(x, f"{view.name}/input{k}_mask")
            for k, (x, m) in enumerate(zip(inputs, masks))]
    if rank >= 2 and axis == rank:
        return y, _or_masks(g, view, full)
    if rank >= 2 and axis == 1:
        return y, g.op("Concat", full, f"{view.name}/mask", axis=1)
    view.refuse(f"it concatenates inputs that carry masks along axis {axis} (masks join along the time or the "
                "last axis only, as in mdtrain's models)")


CONVERTERS = {"Add": add, "Multiply": multiply, "Concatenate": concatenate, "Subtract": subtract, "Average": average,
              "Maximum": _unmasked("Max", "Maximum"), "Minimum": _unmasked("Min", "Minimum"), "Dot": dot}
