"""Converters of the reshaping layers (C++: the ops::strided_view layers and Identity): Permute as
Transpose, RepeatVector as Unsqueeze + Tile, padding as Pad, cropping as Slice, nearest
upsampling as Reshape + Expand + Reshape (each value repeated exactly, as the C++ reads it),
bilinear as Resize, and Identity as Identity. Shapes are static except the batch, kept as 0 in Reshape's target."""


def permute(g, view, inputs, masks):
    return g.op("Transpose", [inputs[0]], view.name, perm=[0] + [int(d) for d in view.config["dims"]])


def repeat_vector(g, view, inputs, masks):
    n = int(view.config["n"])
    rows = g.unsqueeze(inputs[0], [1], f"{view.name}/rows")
    return g.op("Tile", [rows, g.ints([1, n, 1], f"{view.name}/repeats")], view.name)


def identity(g, view, inputs, masks):
    return g.op("Identity", [inputs[0]], view.name)


def _pairs(value):
    """[[before, after], ...] per spatial dimension from a config's padding or cropping."""
    return [list(value)] if not isinstance(value[0], (list, tuple)) else [list(p) for p in value]


def zero_padding(g, view, inputs, masks):
    pairs = _pairs(view.config["padding"])
    begins = [0] + [p[0] for p in pairs] + [0]
    ends = [0] + [p[1] for p in pairs] + [0]
    return g.op("Pad", [inputs[0], g.ints(begins + ends, f"{view.name}/pads")], view.name, mode="constant")


def cropping(g, view, inputs, masks):
    pairs = _pairs(view.config["cropping"])
    shape = view.input_shape
    axes = list(range(1, len(pairs) + 1))
    starts = [p[0] for p in pairs]
    ends = [shape[d] - p[1] for d, p in enumerate(pairs)]
    return g.op("Slice", [inputs[0], g.ints(starts, f"{view.name}/starts"), g.ints(ends, f"{view.name}/ends"),
                          g.ints(axes, f"{view.name}/axes")], view.name)


def up_sampling(g, view, inputs, masks):
    if view.config.get("interpolation", "nearest") == "bilinear":
        # TF's half-pixel bilinear resize is ONNX's linear Resize with half_pixel coordinates.
        scales = [1.0, *(float(s) for s in view.config["size"]), 1.0]
        return g.op("Resize", [inputs[0], "", g.const(scales, f"{view.name}/scales")], view.name, mode="linear",
                    coordinate_transformation_mode="half_pixel")
    size = view.config["size"]
    size = [int(size)] if not isinstance(size, (list, tuple)) else [int(s) for s in size]
    *spatial, channels = view.input_shape
    gaps, repeated = [0], [1]  # (batch, s0, 1, s1, 1, ..., c) expanded to (batch, s0, size0, ...)
    for s, k in zip(spatial, size):
        gaps += [s, 1]
        repeated += [s, k]
    gaps.append(channels)
    repeated.append(channels)
    spread = g.op("Reshape", [inputs[0], g.ints(gaps, f"{view.name}/spread_shape")], f"{view.name}/spread")
    tiled = g.op("Expand", [spread, g.ints(repeated, f"{view.name}/repeated_shape")], f"{view.name}/repeated")
    return g.op("Reshape", [tiled, g.ints([0, *view.output_shape], f"{view.name}/shape")], view.name)


CONVERTERS = {"Permute": permute, "RepeatVector": repeat_vector, "Identity": identity,
              "ZeroPadding1D": zero_padding, "ZeroPadding2D": zero_padding, "Cropping1D": cropping,
              "Cropping2D": cropping, "UpSampling1D": up_sampling, "UpSampling2D": up_sampling}
