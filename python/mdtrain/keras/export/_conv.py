"""Converters of the window layers (channels_last, as mdtrain's are): Conv2D, MaxPooling2D,
AveragePooling2D, GlobalAveragePooling2D, their 1-D forms Conv1D, MaxPooling1D,
AveragePooling1D, GlobalAveragePooling1D, and GlobalMaxPooling1D/2D (ReduceMax). ONNX's Conv and pools read NCHW (NCW), so each runs
between two Transposes; padding="same" is TF's (the extra row/column of an odd total at the end),
written as explicit pads from the static image size, causal padding (Conv1D) as dilation *
(kernel_size - 1) before the first step, and same-padded average pools do not count the padding
(count_include_pad=0), as TF.

Conv2DTranspose / Conv1DTranspose are ONNX's ConvTranspose (pads and output_padding from Keras's
output size, see _transpose_pads); DepthwiseConv2D a Conv with group=in_channels; SeparableConv2D
that grouped Conv then a 1x1 Conv, both in NCHW between the two Transposes."""
import math

from mdtrain.keras.export._core_layers import activation

TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]
TO_NCW = TO_NWC = [0, 2, 1]


def _pads(view, size, kernel, strides, dilation):
    """ONNX pads [top, left, bottom, right] for the layer's padding on a (h, w) image ([before,
    after] on a sequence)."""
    padding = str(view.config.get("padding", "valid")).lower()
    if padding == "valid":
        return [0] * (2 * len(size))
    if padding == "causal" and len(size) == 1:
        return [(kernel[0] - 1) * dilation[0], 0]
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


def _conv(g, view, x, spatial):
    """Conv2D (spatial 2) or Conv1D (spatial 1): Keras's kernel (*window, in, filters) is ONNX's
    (filters, in, *window)."""
    _check_channels_last(view)
    kernel = view.weight("kernel")
    window = list(kernel.shape[:spatial])
    to_first, to_last = (TO_NCHW, TO_NHWC) if spatial == 2 else (TO_NCW, TO_NWC)
    strides, dilation = list(view.config["strides"]), list(view.config["dilation_rate"])
    x = g.op("Transpose", [x], f"{view.name}/nchw", perm=to_first)
    onnx_kernel = kernel.transpose(3, 2, 0, 1) if spatial == 2 else kernel.transpose(2, 1, 0)
    conv_inputs = [x, g.const(onnx_kernel, f"{view.name}/kernel")]
    bias = view.weight("bias")
    if bias is not None:
        conv_inputs.append(g.const(bias, f"{view.name}/bias"))
    y = g.op("Conv", conv_inputs, f"{view.name}/conv", kernel_shape=window, strides=strides, dilations=dilation,
             pads=_pads(view, view.input_shape[:spatial], window, strides, dilation))
    y = g.op("Transpose", [y], f"{view.name}/nhwc", perm=to_last)
    try:
        return activation(g, y, view.config.get("activation"), view.name)
    except ValueError as e:
        view.refuse(str(e))


def conv2d(g, view, inputs, masks):
    return _conv(g, view, inputs[0], 2)


def conv1d(g, view, inputs, masks):
    return _conv(g, view, inputs[0], 1)


def _pool(op_type, view, g, x, **extra):
    _check_channels_last(view)
    pool = list(view.config["pool_size"])
    spatial = len(pool)
    to_first, to_last = (TO_NCHW, TO_NHWC) if spatial == 2 else (TO_NCW, TO_NWC)
    strides = list(view.config.get("strides") or pool)
    x = g.op("Transpose", [x], f"{view.name}/nchw", perm=to_first)
    y = g.op(op_type, [x], f"{view.name}/pool", kernel_shape=pool, strides=strides,
             pads=_pads(view, view.input_shape[:spatial], pool, strides, [1] * spatial), **extra)
    return g.op("Transpose", [y], view.name, perm=to_last)


def max_pooling2d(g, view, inputs, masks):
    return _pool("MaxPool", view, g, inputs[0])


def average_pooling2d(g, view, inputs, masks):
    return _pool("AveragePool", view, g, inputs[0], count_include_pad=0)


def global_average_pooling2d(g, view, inputs, masks):
    _check_channels_last(view)
    return g.reduce("ReduceMean", inputs[0], [1, 2], view.name, keepdims=bool(view.config.get("keepdims", False)))


def global_average_pooling1d(g, view, inputs, masks):
    """The mean over the steps; with a mask (Embedding(mask_zero=True) before it) the mean of the
    unmasked steps, as Keras: masked steps are selected away (Where), then divided by their count
    (a sequence with every step masked gives NaN, as in Keras)."""
    _check_channels_last(view)
    keepdims = bool(view.config.get("keepdims", False))
    if masks[0] is None:
        return g.reduce("ReduceMean", inputs[0], [1], view.name, keepdims=keepdims)
    mask = g.op("Unsqueeze", [masks[0], g.ints([2])], f"{view.name}/mask_steps")  # bool (batch, steps, 1)
    kept = g.op("Where", [mask, inputs[0], g.const(0.0, f"{view.name}/zero")], f"{view.name}/kept")
    total = g.reduce("ReduceSum", kept, [1], f"{view.name}/sum", keepdims=keepdims)
    count = g.reduce("ReduceSum", g.op("Cast", [mask], f"{view.name}/mask_float", to=1), [1], f"{view.name}/count",
                     keepdims=keepdims)
    return g.op("Div", [total, count], view.name)


def global_max_pooling(g, view, inputs, masks):
    """ReduceMax over the spatial axes (1 of a sequence, 1 and 2 of an image)."""
    _check_channels_last(view)
    axes = [1] if view.class_name == "GlobalMaxPooling1D" else [1, 2]
    return g.reduce("ReduceMax", inputs[0], axes, view.name, keepdims=bool(view.config.get("keepdims", False)))


def _transpose_pads(view, spatial):
    """ConvTranspose's pads [begins..., ends...] and output_padding for Keras's output size: ONNX's
    full output (in - 1) * s + e starts at the transposed convolution's tap 0 of input 0, which lands
    at -pad_before (TF's "same" padding of the convolution it transposes); what is left past the
    full output (valid's output_padding, strides larger than the kernel) is ONNX's output_padding."""
    c = view.config
    same = c["padding"] == "same"
    begins, ends, extra = [], [], []
    sizes = view.input_shape[:spatial]
    for n, k, s, d, out in zip(sizes, c["kernel_size"], c["strides"], c["dilation_rate"], view.output_shape[:spatial]):
        e = (k - 1) * d + 1
        full = (n - 1) * s + e
        before = max((n - 1) * s + e - out, 0) // 2 if same else 0
        after = full - out - before
        begins.append(before)
        ends.append(max(after, 0))
        extra.append(max(-after, 0))
    return begins + ends, extra


def _conv_transpose(g, view, x, spatial):
    """Keras's kernel (*window, filters, in) is ConvTranspose's (in, filters, *window)."""
    _check_channels_last(view)
    kernel = view.weight("kernel")
    to_first, to_last = (TO_NCHW, TO_NHWC) if spatial == 2 else (TO_NCW, TO_NWC)
    x = g.op("Transpose", [x], f"{view.name}/nchw", perm=to_first)
    onnx_kernel = kernel.transpose(3, 2, 0, 1) if spatial == 2 else kernel.transpose(2, 1, 0)
    inputs = [x, g.const(onnx_kernel, f"{view.name}/kernel")]
    bias = view.weight("bias")
    if bias is not None:
        inputs.append(g.const(bias, f"{view.name}/bias"))
    pads, output_padding = _transpose_pads(view, spatial)
    y = g.op("ConvTranspose", inputs, f"{view.name}/conv_transpose", kernel_shape=list(kernel.shape[:spatial]),
             strides=list(view.config["strides"]), dilations=list(view.config["dilation_rate"]), pads=pads,
             output_padding=output_padding)
    y = g.op("Transpose", [y], f"{view.name}/nhwc", perm=to_last)
    try:
        return activation(g, y, view.config.get("activation"), view.name)
    except ValueError as e:
        view.refuse(str(e))


def conv2d_transpose(g, view, inputs, masks):
    return _conv_transpose(g, view, inputs[0], 2)


def conv1d_transpose(g, view, inputs, masks):
    return _conv_transpose(g, view, inputs[0], 1)


def _depthwise(g, view, x, kernel, bias, name):
    """The depthwise step on NCHW x: Conv with group = in_channels; output channel c * dm + m is
    kernel[..., c, m], ONNX's weight (in * dm, 1, kh, kw)."""
    kh, kw, cin, dm = kernel.shape
    weight = kernel.reshape(kh, kw, cin * dm).transpose(2, 0, 1)[:, None]
    inputs = [x, g.const(weight, f"{name}/depthwise_kernel")]
    if bias is not None:
        inputs.append(g.const(bias, f"{name}/depthwise_bias"))
    strides, dilation = list(view.config["strides"]), list(view.config["dilation_rate"])
    return g.op("Conv", inputs, f"{name}/depthwise", kernel_shape=[kh, kw], strides=strides, dilations=dilation,
                group=cin, pads=_pads(view, view.input_shape[:2], [kh, kw], strides, dilation))


def _activated_nhwc(g, view, y):
    y = g.op("Transpose", [y], f"{view.name}/nhwc", perm=TO_NHWC)
    try:
        return activation(g, y, view.config.get("activation"), view.name)
    except ValueError as e:
        view.refuse(str(e))


def depthwise_conv2d(g, view, inputs, masks):
    _check_channels_last(view)
    x = g.op("Transpose", [inputs[0]], f"{view.name}/nchw", perm=TO_NCHW)
    return _activated_nhwc(g, view, _depthwise(g, view, x, view.weight("kernel"), view.weight("bias"), view.name))


def separable_conv2d(g, view, inputs, masks):
    """The depthwise Conv (no bias), then the pointwise 1x1 Conv with the bias."""
    _check_channels_last(view)
    x = g.op("Transpose", [inputs[0]], f"{view.name}/nchw", perm=TO_NCHW)
    mid = _depthwise(g, view, x, view.weight("depthwise_kernel"), None, view.name)
    pointwise = view.weight("pointwise_kernel")  # (1, 1, in * dm, filters)
    conv_inputs = [mid, g.const(pointwise.transpose(3, 2, 0, 1), f"{view.name}/pointwise_kernel")]
    bias = view.weight("bias")
    if bias is not None:
        conv_inputs.append(g.const(bias, f"{view.name}/bias"))
    y = g.op("Conv", conv_inputs, f"{view.name}/pointwise", kernel_shape=[1, 1])
    return _activated_nhwc(g, view, y)


CONVERTERS = {"Conv2DTranspose": conv2d_transpose, "Conv1DTranspose": conv1d_transpose,
              "DepthwiseConv2D": depthwise_conv2d, "SeparableConv2D": separable_conv2d, "Conv2D": conv2d, "MaxPooling2D": max_pooling2d, "AveragePooling2D": average_pooling2d,
              "GlobalAveragePooling2D": global_average_pooling2d, "Conv1D": conv1d, "MaxPooling1D": max_pooling2d,
              "AveragePooling1D": average_pooling2d, "GlobalAveragePooling1D": global_average_pooling1d,
              "GlobalMaxPooling1D": global_max_pooling, "GlobalMaxPooling2D": global_max_pooling}
