"""Converters of the recurrent layers: SimpleRNN, LSTM and GRU as ONNX's RNN, LSTM and GRU ops
(one forward direction, time-major between two Transposes), and Bidirectional as two of them.

Keras's weights are kernel (features, G*u), recurrent_kernel (u, G*u) and bias; ONNX's W (1, G*u,
features), R (1, G*u, u) and B (1, 2*G*u: input biases, then recurrent biases). The gates are
reordered: Keras's LSTM is (i, f, c, o), ONNX's (i, o, f, c); GRU's (z, r, h) is the same in both,
reset_after=True being ONNX's linear_before_reset=1 with Keras's bias (2, 3u) as the input and
recurrent biases. Activations: ONNX's f, g, h are Keras's recurrent_activation, activation,
activation (linear is Affine with alpha 1, beta 0).

Masks, as nn/recurrent_layer.h runs them: a masked step carries the state over and outputs the
carried h (zeros before the first kept step). The kept steps of each sequence are moved to its
front in order (TopK on a key that is unique per step), the op runs with sequence_lens = their
count, and with return_sequences each step's output is gathered back from the kept step at or
before it. go_backwards reverses the sequence (and its mask) first and, as Keras, returns the
steps in that reversed order."""
import numpy as np

_GATES = {"SimpleRNN": ("RNN", 1), "LSTM": ("LSTM", 4), "GRU": ("GRU", 3)}
_LSTM_ORDER = (0, 3, 1, 2)  # ONNX's (i, o, f, c) from Keras's (i, f, c, o)
_ACTIVATIONS = {"linear": "Affine", "relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh"}


def _gates(matrix, units, order):
    return np.concatenate([matrix[..., k * units:(k + 1) * units] for k in order], axis=-1)


def _onnx_weights(class_name, config, weights):
    """W, R, B (B None without bias) of one direction, from Keras's weights."""
    units = int(config["units"])
    kernel, recurrent = weights[0], weights[1]
    bias = weights[2] if len(weights) > 2 else None
    gates = _GATES[class_name][1]
    order = _LSTM_ORDER if class_name == "LSTM" else tuple(range(gates))
    W = _gates(kernel, units, order).T[None]
    R = _gates(recurrent, units, order).T[None]
    B = None
    if bias is not None:
        if bias.ndim == 2:  # GRU reset_after: (input bias, recurrent bias)
            B = np.concatenate([bias[0], bias[1]])[None]
        else:
            B = np.concatenate([_gates(bias, units, order), np.zeros(gates * units, np.float32)])[None]
    return W, R, B


def _activations(view, class_name, config):
    names = [config.get("activation", "tanh")]
    if class_name != "SimpleRNN":
        names = [config.get("recurrent_activation", "sigmoid")] + names + ([names[0]] if class_name == "LSTM" else [])
    out = []
    for n in names:
        if str(n).lower() not in _ACTIVATIONS:
            view.refuse(f"activation {n!r} in a recurrent cell (linear, relu, sigmoid or tanh)")
        out.append(_ACTIVATIONS[str(n).lower()])
    affine = sum(a == "Affine" for a in out)  # ONNX reads alpha/beta only for the activations that take them
    extra = {"activation_alpha": [1.0] * affine, "activation_beta": [0.0] * affine} if affine else {}
    return out, extra


def weight_count(config):
    return 3 if config.get("use_bias", True) else 2


def run_direction(g, view, class_name, config, weights, x, mask, steps, hint):
    """One recurrent layer (config, weights: Keras's) on x (batch, steps, features) with an optional
    bool mask (batch, steps): its output (batch, u) or, with return_sequences, (batch, steps, u)."""
    if config.get("stateful"):
        view.refuse("stateful=True")
    op_type = _GATES[class_name][0]
    units = int(config["units"])
    if config.get("go_backwards"):
        x = g.reverse_time(x, steps, f"{hint}/reversed")
        if mask is not None:
            mask = g.reverse_time(mask, steps, f"{hint}/reversed_mask")
    lens = ""
    if mask is not None:
        keep = g.op("Cast", [mask], f"{hint}/keep", to=1)  # FLOAT
        # key: kept steps first, each group in time order (unique values, so TopK's order is exact)
        key = g.op("Add", [g.op("Mul", [g.op("Sub", [g.const(1.0, "one"), keep], f"{hint}/dropped"),
                                       g.const(float(steps), f"{hint}/steps")], f"{hint}/dropped_last"),
                           g.const(np.arange(steps), f"{hint}/time")], f"{hint}/key")
        _, order = g.op("TopK", [key, g.ints([steps], f"{hint}/k")], f"{hint}/order", outputs=2, axis=1, largest=0,
                        sorted=1)
        gather = g.op("Expand", [g.unsqueeze(order, [2], f"{hint}/order3"), g.op("Shape", [x], f"{hint}/x_shape")],
                      f"{hint}/gather_index")
        x = g.op("GatherElements", [x, gather], f"{hint}/kept_first", axis=1)
        lens = g.op("Cast", [g.reduce("ReduceSum", keep, [1], f"{hint}/kept")], f"{hint}/lens", to=6)  # INT32
    W, R, B = _onnx_weights(class_name, config, weights)
    acts, extra = _activations(view, class_name, config)
    if class_name == "GRU":
        extra["linear_before_reset"] = int(bool(config.get("reset_after", True)))
    args = [g.op("Transpose", [x], f"{hint}/time_major", perm=[1, 0, 2]), g.const(W, f"{hint}/W"),
            g.const(R, f"{hint}/R"), g.const(B, f"{hint}/B") if B is not None else "", lens]
    while args[-1] == "":
        args.pop()
    Y, Y_h = g.op(op_type, args, f"{hint}/{op_type.lower()}", outputs=2, hidden_size=units, activations=acts,
                  **extra)
    if not config.get("return_sequences"):
        return g.squeeze(Y_h, [0], hint)
    y = g.op("Transpose", [g.squeeze(Y, [1], f"{hint}/steps_out")], f"{hint}/batch_major", perm=[1, 0, 2])
    if mask is None:
        return y
    # step t outputs the kept step number cumsum(keep)[t] - 1 (zeros where none is kept yet)
    seen = g.op("CumSum", [keep, g.const(np.asarray(1, np.int64), f"{hint}/axis1", np.int64)], f"{hint}/seen")
    at = g.op("Cast", [g.op("Max", [g.op("Sub", [seen, g.const(1.0, "one")], f"{hint}/last_kept"),
                                     g.const(0.0, "zero")], f"{hint}/last_kept0")], f"{hint}/at", to=7)  # INT64
    gather = g.op("Expand", [g.unsqueeze(at, [2], f"{hint}/at3"), g.op("Shape", [y], f"{hint}/y_shape")],
                  f"{hint}/scatter_index")
    y = g.op("GatherElements", [y, gather], f"{hint}/carried", axis=1)
    started = g.op("Cast", [g.op("Greater", [seen, g.const(0.0, "zero")], f"{hint}/started")], f"{hint}/started_f",
                   to=1)
    return g.op("Mul", [y, g.unsqueeze(started, [2], f"{hint}/started3")], hint)


def recurrent(g, view, inputs, masks):
    mask = masks[0]
    y = run_direction(g, view, view.class_name, view.config, view.weights, inputs[0], mask, view.input_shape[0],
                      view.name)
    return y, (mask if view.config.get("return_sequences") else None)


def bidirectional(g, view, inputs, masks):
    """nn/bidirectional.cpp: forward and backward layers on the same input (and mask); the backward
    output flipped back in time with return_sequences, the two merged, masked steps zeroed."""
    forward = view.config["layer"]
    backward = view.config.get("backward_layer")
    if backward is None:
        backward = {"class_name": forward["class_name"],
                    "config": dict(forward["config"], go_backwards=not forward["config"].get("go_backwards", False))}
    n = weight_count(forward["config"])
    steps, mask = view.input_shape[0], masks[0]
    yf = run_direction(g, view, forward["class_name"], forward["config"], view.weights[:n], inputs[0], mask, steps,
                       f"{view.name}/forward")
    yb = run_direction(g, view, backward["class_name"], backward["config"], view.weights[n:], inputs[0], mask, steps,
                       f"{view.name}/backward")
    seq = bool(forward["config"].get("return_sequences"))
    if seq:
        yb = g.reverse_time(yb, steps, f"{view.name}/backward_aligned")
    mode = view.config.get("merge_mode", "concat")
    if mode == "concat":
        y = g.op("Concat", [yf, yb], f"{view.name}/merged", axis=-1)
    elif mode == "sum":
        y = g.op("Add", [yf, yb], f"{view.name}/merged")
    elif mode == "mul":
        y = g.op("Mul", [yf, yb], f"{view.name}/merged")
    elif mode == "ave":
        y = g.op("Div", [g.op("Add", [yf, yb], f"{view.name}/sum"), g.const(2.0, "two")], f"{view.name}/merged")
    else:
        view.refuse(f"merge_mode={mode!r}")
    if seq and mask is not None:
        keep = g.unsqueeze(g.op("Cast", [mask], f"{view.name}/keep", to=1), [2], f"{view.name}/keep3")
        y = g.op("Mul", [y, keep], view.name)
    else:
        y = g.op("Identity", [y], view.name)
    return y, (mask if seq else None)


CONVERTERS = {"SimpleRNN": recurrent, "LSTM": recurrent, "GRU": recurrent, "Bidirectional": bidirectional}
