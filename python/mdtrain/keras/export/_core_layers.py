"""Converters of the core layers: Dense, Activation (and PipelineSplit, a linear Activation),
Dropout (the identity at inference), Flatten and Reshape; the activation layers with arguments
(ReLU, LeakyReLU, ELU, PReLU, Softmax over any axes) and UnitNormalization; and the activation
functions Dense and Conv2D apply (ops/activation.h: Keras 3's formulas, softmax on the last axis, gelu in its exact
erf form), each as ONNX's own op where the default opset has one, else composed of them."""
import math


def activation(g, x, name, hint):
    name = (name or "linear").lower()
    if name in ("linear", "none", ""):
        return x
    if name == "relu":
        return g.op("Relu", [x], hint)
    if name == "sigmoid":
        return g.op("Sigmoid", [x], hint)
    if name == "tanh":
        return g.op("Tanh", [x], hint)
    if name == "softmax":
        return g.op("Softmax", [x], hint, axis=-1)
    if name == "gelu":  # 0.5 x (1 + erf(x / sqrt 2)); ONNX's Gelu op needs opset 20
        scaled = g.op("Mul", [x, g.const(1.0 / math.sqrt(2.0), "inv_sqrt2")], f"{hint}/scaled")
        one_plus = g.op("Add", [g.op("Erf", [scaled], f"{hint}/erf"), g.const(1.0, "one")], f"{hint}/one_plus")
        return g.op("Mul", [g.op("Mul", [x, g.const(0.5, "half")], f"{hint}/half_x"), one_plus], hint)
    if name in _ONE_OP:
        op, attributes = _ONE_OP[name]
        return g.op(op, [x], hint, **attributes)
    if name == "relu6":
        return g.op("Clip", [x, g.const(0.0, "zero"), g.const(6.0, "six")], hint)
    if name == "silu":
        return g.op("Mul", [x, g.op("Sigmoid", [x], f"{hint}/sigmoid")], hint)
    if name == "mish":  # x tanh(softplus(x)); ONNX's Mish op needs opset 18
        softplus = g.op("Softplus", [x], f"{hint}/softplus")
        return g.op("Mul", [x, g.op("Tanh", [softplus], f"{hint}/tanh")], hint)
    if name == "log_sigmoid":  # -softplus(-x)
        softplus = g.op("Softplus", [g.op("Neg", [x], f"{hint}/neg")], f"{hint}/softplus")
        return g.op("Neg", [softplus], hint)
    raise ValueError(f"activation {name!r} has no ONNX form")


# The activations that are one ONNX op of the default opset: (op, attributes), Keras 3's constants.
_ONE_OP = {
    "elu": ("Elu", {"alpha": 1.0}),
    "selu": ("Selu", {"alpha": 1.6732632423543772, "gamma": 1.0507009873554805}),
    "softplus": ("Softplus", {}),
    "softsign": ("Softsign", {}),
    "hard_sigmoid": ("HardSigmoid", {"alpha": 1.0 / 6.0, "beta": 0.5}),
    "hard_silu": ("HardSwish", {}),  # x * max(0, min(1, x / 6 + 1 / 2)), opset 14
    "exponential": ("Exp", {}),
    "leaky_relu": ("LeakyRelu", {"alpha": 0.2}),
}


def _activation_of(g, view, y):
    try:
        return activation(g, y, view.config.get("activation"), view.name)
    except ValueError as e:
        view.refuse(str(e))


def dense(g, view, inputs, masks):
    y = g.op("MatMul", [inputs[0], g.const(view.weight("kernel"), f"{view.name}/kernel")], f"{view.name}/matmul")
    bias = view.weight("bias")
    if bias is not None:
        y = g.op("Add", [y, g.const(bias, f"{view.name}/bias")], f"{view.name}/bias_add")
    return _activation_of(g, view, y)


def activation_layer(g, view, inputs, masks):
    y = _activation_of(g, view, inputs[0])
    return y if y != inputs[0] else g.op("Identity", [y], view.name)


def dropout(g, view, inputs, masks):
    return g.op("Identity", [inputs[0]], view.name)


def flatten(g, view, inputs, masks):
    return g.op("Flatten", [inputs[0]], view.name, axis=1)


def reshape(g, view, inputs, masks):
    # 0 keeps the (dynamic) batch axis; target_shape may hold one -1, as Keras's.
    target = [0] + [int(d) for d in view.config["target_shape"]]
    return g.op("Reshape", [inputs[0], g.ints(target, f"{view.name}/shape")], view.name)


def relu_layer(g, view, inputs, masks):
    """Keras's relu with arguments: ONNX's Relu, LeakyRelu or Clip where one fits, else
    Where(x > threshold, min(x, max_value), negative_slope * (x - threshold))."""
    x, name, c = inputs[0], view.name, view.config
    slope, threshold, max_value = float(c["negative_slope"]), float(c["threshold"]), c["max_value"]
    if threshold == 0.0 and max_value is None:
        return g.op("LeakyRelu", [x], name, alpha=slope) if slope else g.op("Relu", [x], name)
    if threshold == 0.0 and slope == 0.0:
        return g.op("Clip", [x, g.const(0.0, "zero"), g.const(float(max_value), f"{name}/max_value")], name)
    t = g.const(threshold, f"{name}/threshold")
    above = x if max_value is None else g.op("Min", [x, g.const(float(max_value), f"{name}/max_value")],
                                             f"{name}/clipped")
    below = g.op("Mul", [g.op("Sub", [x, t], f"{name}/shifted"), g.const(slope, f"{name}/negative_slope")],
                 f"{name}/below")
    return g.op("Where", [g.op("Greater", [x, t], f"{name}/above_threshold"), above, below], name)


def leaky_relu_layer(g, view, inputs, masks):
    return g.op("LeakyRelu", [inputs[0]], view.name, alpha=float(view.config["negative_slope"]))


def elu_layer(g, view, inputs, masks):
    return g.op("Elu", [inputs[0]], view.name, alpha=float(view.config.get("alpha", 1.0)))


def prelu_layer(g, view, inputs, masks):
    # alpha (d1..dk, 1 on the shared axes) broadcasts over (batch, d1..dk) as ONNX's PRelu reads it.
    return g.op("PRelu", [inputs[0], g.const(view.weight("alpha"), f"{view.name}/alpha")], view.name)


def _axes(view):
    """The layer's axes, counted with the batch axis and non-negative."""
    axis = view.config["axis"]
    rank = len(view.input_shape) + 1
    return sorted(int(a) % rank for a in (axis if isinstance(axis, list) else [axis]))


def softmax_layer(g, view, inputs, masks):
    x, name, axes = inputs[0], view.name, _axes(view)
    if len(axes) == 1:
        return g.op("Softmax", [x], name, axis=axes[0])
    # Over several axes: exp(x - max) / sum, the reductions keeping their axes.
    shifted = g.op("Sub", [x, g.reduce("ReduceMax", x, axes, f"{name}/max", keepdims=True)], f"{name}/shifted")
    e = g.op("Exp", [shifted], f"{name}/exp")
    return g.op("Div", [e, g.reduce("ReduceSum", e, axes, f"{name}/sum", keepdims=True)], name)


def unit_normalization(g, view, inputs, masks):
    """x * min(1 / sqrt(sum x^2), 1e12), Keras 3's form."""
    x, name = inputs[0], view.name
    square_sum = g.reduce("ReduceSumSquare", x, _axes(view), f"{name}/square_sum", keepdims=True)
    inv = g.op("Reciprocal", [g.op("Sqrt", [square_sum], f"{name}/norm")], f"{name}/inv_norm")
    scale = g.op("Min", [inv, g.const(1e12, "inv_unit_norm_epsilon")], f"{name}/scale")
    return g.op("Mul", [x, scale], name)


CONVERTERS = {"Dense": dense, "Activation": activation_layer, "Dropout": dropout, "Flatten": flatten,
              "Reshape": reshape, "ReLU": relu_layer, "LeakyReLU": leaky_relu_layer, "ELU": elu_layer,
              "PReLU": prelu_layer, "Softmax": softmax_layer, "UnitNormalization": unit_normalization,
              # The noise and regularization layers: the identity at inference, as Dropout.
              "GaussianNoise": dropout, "GaussianDropout": dropout, "SpatialDropout1D": dropout,
              "SpatialDropout2D": dropout, "ActivityRegularization": dropout}
