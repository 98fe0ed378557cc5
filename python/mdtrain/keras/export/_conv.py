"""Converters of the 2-D image layers (channels_last, as mdtrain's are): Conv2D, MaxPooling2D,
AveragePooling2D and GlobalAveragePooling2D. ONNX's Conv and pools read NCHW, so each runs
between two Transposes; padding="same" is TF's (the extra row/column of an odd total at the end),
written as explicit pads from the static image size, and same-padded average pools do not count
the padding (count_include_pad=0), as TF."""
import math

from mdtrain.keras.export._core_layers import activation

TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def _pads(view, size, kernel, strides, dilation):
    """ONNX pads [top, left, bottom, right] for the layer's padding on a (h, w) image."""
    padding = str(view.config.get("padding", "valid")).lower()
    if padding == "valid":
        return [0, 0, 0, 0]
    if padding != "same":
        view.refuse(f"padding={padding!r} (valid or same)")
    before, after = [], []
    for n, k, s, d in zip(size, kernel, strides, dilation):
        span = (k - 1) * d + 1
        total = max((math.ceil(n / s) - 1) * s + span - n, 0)
        before.append(total // 2)
        after.append(total - total // 2)
    return before + after


def _check_channels_last(view):
    if view.config.get("data_format", "channels_last") != "channels_last":
        view.refuse(f"data_format={view.config.get('data_format')!r}")


def conv2d(g, view, inputs, masks):
    _check_channels_last(view)
    kernel = view.weight("kernel")  # (kh, kw, in, filters)
    kh, kw = kernel.shape[:2]
    strides, dilation = list(view.config["strides"]), list(view.config["dilation_rate"])
    x = g.op("Transpose", [inputs[0]], f"{view.name}/nchw", perm=TO_NCHW)
    conv_inputs = [x, g.const(kernel.transpose(3, 2, 0, 1), f"{view.name}/kernel")]
    bias = view.weight("bias")
    if bias is not None:
        conv_inputs.append(g.const(bias, f"{view.name}/bias"))
    y = g.op("Conv", conv_inputs, f"{view.name}/conv", kernel_shape=[kh, kw], strides=strides, dilations=dilation,
             pads=_pads(view, view.input_shape[:2], [kh, kw], strides, dilation))
    y = g.op("Transpose", [y], f"{view.name}/nhwc", perm=TO_NHWC)
    try:
        return activation(g, y, view.config.get("activation"), view.name)
    except ValueError as e:
        view.refuse(str(e))


def _pool(op_type, view, g, x, **extra):
    _check_channels_last(view)
    pool = list(view.config["pool_size"])
    strides = list(view.config.get("strides") or pool)
    x = g.op("Transpose", [x], f"{view.name}/nchw", perm=TO_NCHW)
    y = g.op(op_type, [x], f"{view.name}/pool", kernel_shape=pool, strides=strides,
             pads=_pads(view, view.input_shape[:2], pool, strides, [1, 1]), **extra)
    return g.op("Transpose", [y], view.name, perm=TO_NHWC)


def max_pooling2d(g, view, inputs, masks):
    return _pool("MaxPool", view, g, inputs[0])


def average_pooling2d(g, view, inputs, masks):
    return _pool("AveragePool", view, g, inputs[0], count_include_pad=0)


def global_average_pooling2d(g, view, inputs, masks):
    _check_channels_last(view)
    return g.reduce("ReduceMean", inputs[0], [1, 2], view.name, keepdims=bool(view.config.get("keepdims", False)))


CONVERTERS = {"Conv2D": conv2d, "MaxPooling2D": max_pooling2d, "AveragePooling2D": average_pooling2d,
              "GlobalAveragePooling2D": global_average_pooling2d}
