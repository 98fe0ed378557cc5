"""Converters of the merge layers: Add and Multiply fold their inputs in order (as the C++ layer
does), Concatenate joins them on its axis. Masks are merged as the functional graph runner merges
them (nn/layer_graph.cpp merged_mask): none unless every input of Add carries one (or any input of
Concatenate), ORed for Add and for a concatenation on the last axis, joined along time for one on
axis 1; an unmasked input counts as all ones. Multiply receiving masks is refused when the model
is built, so it never reaches here with any."""
from functools import reduce


def _fold(op_type, g, view, inputs):
    out = reduce(lambda a, b: g.op(op_type, [a, b], f"{view.name}/{op_type.lower()}"), inputs)
    return g.op("Identity", [out], view.name)


def _or_masks(g, view, masks):
    return reduce(lambda a, b: g.op("Or", [a, b], f"{view.name}/mask_or"), masks)


def add(g, view, inputs, masks):
    y = _fold("Add", g, view, inputs)
    if masks and all(m is not None for m in masks):
        return y, _or_masks(g, view, masks)
    return y, None


def multiply(g, view, inputs, masks):
    if any(m is not None for m in masks):
        view.refuse("Multiply receives masks (refused by mdtrain's models as well)")
    return _fold("Mul", g, view, inputs), None


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


CONVERTERS = {"Add": add, "Multiply": multiply, "Concatenate": concatenate}
