"""Converters of the layers that make masks: Embedding (a Gather of the table's rows; with
mask_zero its output carries indices != 0) and Masking (steps whose values all equal mask_value
are zeroed, and its output carries the steps kept). A mask is a bool (batch, timesteps) value
(nn/sequence_mask.h); the recurrent converters read it."""
import numpy as np


def embedding(g, view, inputs, masks):
    indices = inputs[0]
    y = g.op("Gather", [g.const(view.weight("embeddings"), f"{view.name}/embeddings"), indices], view.name, axis=0)
    mask = None
    if view.config.get("mask_zero"):
        zero = g.const(np.zeros((), np.int32), "zero_index", np.int32)
        as_int = g.op("Cast", [indices], f"{view.name}/indices_int32", to=6)  # INT32
        mask = g.op("Not", [g.op("Equal", [as_int, zero], f"{view.name}/is_padding")], f"{view.name}/mask")
    return y, mask


def masking(g, view, inputs, masks):
    x = inputs[0]
    value = g.const(float(view.config["mask_value"]), f"{view.name}/mask_value")
    differs = g.op("Cast", [g.op("Not", [g.op("Equal", [x, value], f"{view.name}/equal")], f"{view.name}/differs")],
                   f"{view.name}/differs_float", to=1)  # FLOAT
    feature_axes = list(range(2, len(view.input_shape) + 1))
    count = g.reduce("ReduceSum", differs, feature_axes, f"{view.name}/count") if feature_axes else differs
    mask = g.op("Greater", [count, g.const(0.0, "zero")], f"{view.name}/mask")
    keep = g.op("Cast", [mask], f"{view.name}/keep", to=1)
    for _ in feature_axes:
        keep = g.unsqueeze(keep, [-1], f"{view.name}/keep")
    return g.op("Mul", [x, keep], view.name), mask


CONVERTERS = {"Embedding": embedding, "Masking": masking}
