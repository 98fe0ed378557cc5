"""model.summary() laid out as Keras 3 prints it (keras/src/utils/summary_utils.py, drawn by
rich): the same columns, widths, wrapping, row order and totals, as plain text.

A Sequential model, or a functional one that is a chain, has the columns Layer (type), Output
Shape and Param #; any other functional model adds Connected to and lists its InputLayers.
Widths: line_length (default 88, or 108 with Connected to, at most the terminal's width less 4)
split at `positions`, then fitted to the line as rich fits a table's fixed-width columns; lines
longer than the console are cut at its width, as rich's console cuts them.
"""
import math
import os
import shutil
import sys

import numpy as np


def _ratio_reduce(total, ratios, maximums, values):
    """rich._ratio.ratio_reduce."""
    ratios = [r if m else 0 for r, m in zip(ratios, maximums)]
    total_ratio, remaining, out = sum(ratios), total, []
    if not total_ratio:
        return list(values)
    for ratio, maximum, value in zip(ratios, maximums, values):
        if ratio and total_ratio > 0:
            distributed = min(maximum, round(ratio * remaining / total_ratio))
            out.append(value - distributed)
            remaining -= distributed
            total_ratio -= ratio
        else:
            out.append(value)
    return out


def _ratio_distribute(total, ratios):
    """rich._ratio.ratio_distribute (no minimums)."""
    total_ratio, remaining, out = sum(ratios), total, []
    for ratio in ratios:
        distributed = math.ceil(ratio * remaining / total_ratio) if total_ratio > 0 else remaining
        out.append(distributed)
        total_ratio -= ratio
        remaining -= distributed
    return out


def column_widths(line_length, positions):
    """Each column's width between its borders (one space of padding each side included)."""
    widths, current = [], 0
    for pos in positions:
        width = int(pos * line_length) - current
        if width < 4:
            raise ValueError("Insufficient console width to print summary.")
        widths.append(width)
        current += width
    cells = [w + 2 for w in widths]  # rich: a fixed width is the content's; padding comes on top
    available = line_length - (len(cells) + 1)  # less the borders
    if sum(cells) > available:
        cells = _ratio_reduce(sum(cells) - available, [1] * len(cells), cells, cells)
    elif sum(cells) < available:
        cells = [c + p for c, p in zip(cells, _ratio_distribute(available - sum(cells), cells))]
    return cells


def _wrap(text, width):
    """Lines of at most width characters, broken at spaces, as rich wraps a cell; a word longer
    than the width is cut with an ellipsis (rich's default overflow)."""
    lines, line = [], ""
    for word in text.split(" "):
        candidate = f"{line} {word}" if line else word
        if len(candidate) <= width:
            line = candidate
            continue
        if line:
            lines.append(line)
        line = word
    lines.append(line)
    return [l if len(l) <= width else l[:max(width - 1, 0)] + "…" for l in lines]


def _row(cells, widths, alignment):
    wrapped = [_wrap(c, w - 2) for c, w in zip(cells, widths)]
    height = max(len(w) for w in wrapped)
    out = []
    for i in range(height):
        parts = []
        for lines, width, align in zip(wrapped, widths, alignment):
            text = lines[i] if i < len(lines) else ""
            if align == "right":
                text = text.rjust(width - 2)
            elif align == "center":
                left = (width - 2 - len(text)) // 2
                text = " " * left + text + " " * (width - 2 - len(text) - left)
            else:
                text = text.ljust(width - 2)
            parts.append(" " + text + " ")
        out.append("│" + "│".join(parts) + "│")
    return out


def readable_memory_size(size):
    """keras.src.utils.summary_utils.readable_memory_size."""
    for unit in ["B", "KB", "MB", "GB", "TB", "PB"]:
        if size / 1024 < 1:
            return f"{size:.2f} {unit}"
        size /= 1024
    return f"{size:.2f} PB"


def _graph(model):
    """(rows, chain): the rows in Keras's order, each (name, class, output shape, params, inbound
    layer names or None for an InputLayer), and whether the graph is a chain."""
    from mdtrain.keras import _keras_config

    def params(layer):
        return f"{layer.count_params():,}" if layer.built else "0 (unbuilt)"

    def shape(layer):
        return str(layer.output_shape) if layer.built else "?"

    def trainable(layer):
        if layer is None or not layer.built or not layer.get_weights():
            return "-"
        return "Y" if layer.trainable else "N"

    if model._graph is None:  # Sequential: its layers, no InputLayer row
        return [(l.name, type(l).__name__, shape(l), params(l), None, trainable(l)) for l in model._layers], True
    config = _keras_config.functional_to_keras(model)["config"]
    by_name = {layer.name: layer for layer in model._layers}
    inbound, shapes = {}, {}
    for entry in config["layers"]:
        if entry["class_name"] == "InputLayer":
            inbound[entry["name"]] = []
            shapes[entry["name"]] = str((None, *entry["config"]["batch_shape"][1:]))
            continue
        args = entry["inbound_nodes"][0]["args"][0]
        tensors = args if isinstance(args, list) else [args]
        inbound[entry["name"]] = [t["config"]["keras_history"][0] for t in tensors]
    outputs = [h[0] for h in (config["output_layers"] if isinstance(config["output_layers"][0], list)
                              else [config["output_layers"]])]
    # Keras's order: depth from the outputs (deepest first), ties in post-order from the outputs.
    order, seen = [], set()

    def visit(name):
        if name in seen:
            return
        seen.add(name)
        for source in inbound[name]:
            visit(source)
        order.append(name)

    for name in outputs:
        visit(name)
    depth = {}
    for name in reversed(order):
        consumers = [depth[c] + 1 for c in order if name in inbound[c] and c in depth]
        depth[name] = max(consumers + ([0] if name in outputs else []))
    index = {name: i for i, name in enumerate(order)}
    names = sorted(order, key=lambda n: (-depth[n], index[n]))
    uses = [source for name in names for source in inbound[name]]
    chain = (len(outputs) == 1 and all(len(inbound[n]) <= 1 for n in names)
             and len(uses) == len(set(uses)) and sum(1 for n in names if not inbound[n]) == 1)
    rows = []
    for name in names:
        if not inbound[name]:
            rows.append((name, "InputLayer", shapes[name], "0", None, "-"))
        else:
            layer = by_name[name]
            rows.append((name, type(layer).__name__, shape(layer), params(layer), inbound[name], trainable(layer)))
    return rows, chain


def _optimizer_count_and_bytes(model):
    from mdtrain.keras import _keras_weights

    if model.optimizer is None or model.loss is None or not model.built:
        return None
    state = dict(model._core.optimizer_state())
    if len(state) <= 1 and int(np.asarray(state.get("iterations", 0))) == 0:
        return None  # not built: no step has run (Keras builds the optimizer in the first one)
    values = _keras_weights.optimizer_to_keras(model)
    return sum(v.size for v in values), sum(v.nbytes for v in values)


def console_width():
    """The width rich gives its console: $COLUMNS, 115 in a notebook, else the terminal's (80
    when there is none)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if "ipykernel" in sys.modules:
        return 115
    return shutil.get_terminal_size().columns


def print_summary(model, line_length=None, positions=None, print_fn=None, show_trainable=False):
    rows, chain = _graph(model)
    if chain:
        default, positions = 88, positions or [0.45, 0.80, 1.0]
        header, alignment = ["Layer (type)", "Output Shape", "Param #"], ["left", "left", "right"]
    else:
        default, positions = 108, positions or [0.3, 0.56, 0.74, 1.0]
        header = ["Layer (type)", "Output Shape", "Param #", "Connected to"]
        alignment = ["left", "left", "right", "left"]
    if show_trainable:
        default += 12
        positions = [p * 0.90 for p in positions] + [1.0]
        header.append("Trainable")
        alignment.append("center")
    if positions[-1] <= 1:
        line_length = line_length or min(default, shutil.get_terminal_size().columns - 4)
    else:  # absolute positions, as Keras takes them
        line_length = line_length or int(positions[-1])
        positions = [p / line_length for p in positions]
    widths = column_widths(line_length, positions)
    lines = [f'Model: "{model.name}"',
             "┏" + "┳".join("━" * w for w in widths) + "┓",
             *[line.replace("│", "┃") for line in _row(header, widths, alignment)],
             "┡" + "╇".join("━" * w for w in widths) + "┩"]
    for i, (name, cls, shape, params, inbound, trainable) in enumerate(rows):
        cells = [f"{name} ({cls})", shape, params]
        if not chain:
            cells.append(", ".join(f"{s}[0][0]" for s in inbound) if inbound else "-")
        if show_trainable:
            cells.append(trainable)
        lines += _row(cells, widths, alignment)
        if i < len(rows) - 1:
            lines.append("├" + "┼".join("─" * w for w in widths) + "┤")
    lines.append("└" + "┴".join("─" * w for w in widths) + "┘")
    built = model.built
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights) if built else 0
    fixed = sum(int(np.prod(w.shape)) for w in model.non_trainable_weights) if built else 0
    opt = _optimizer_count_and_bytes(model)
    total, total_bytes = trainable + fixed + (opt[0] if opt else 0), 4 * (trainable + fixed) + (opt[1] if opt else 0)
    lines += [f" Total params: {total:,} ({readable_memory_size(total_bytes)})",
              f" Trainable params: {trainable:,} ({readable_memory_size(4 * trainable)})",
              f" Non-trainable params: {fixed:,} ({readable_memory_size(4 * fixed)})"]
    if opt:
        lines.append(f" Optimizer params: {opt[0]:,} ({readable_memory_size(opt[1])})")
    print_fn = print_fn or print
    width = console_width()
    for line in lines:
        print_fn(line[:width])
