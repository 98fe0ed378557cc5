"""keras.utils.model_to_dot / plot_model: a model's graph of layers drawn with pydot and
Graphviz, as Keras 3 draws it (one node per layer, an HTML-like table as its label, an edge per
tensor). Both packages are optional: without them plot_model raises Keras's ImportError naming
what to install."""
import os

try:
    import pydot
except ImportError:  # the forks Keras also accepts
    try:
        import pydot_ng as pydot
    except ImportError:
        try:
            import pydotplus as pydot
        except ImportError:
            pydot = None

from mdtrain.keras import _keras_config


def check_pydot():
    return pydot is not None


def check_graphviz():
    """Whether pydot and Graphviz's dot program are both there (drawing an empty graph)."""
    if not check_pydot():
        return False
    try:
        pydot.Dot.create(pydot.Dot())
        return True
    except (OSError, getattr(pydot, "PydotException", OSError)):
        return False


def _nodes(model):
    """(name, class name, layer or None, input shape, output shape, inbound names) per node: the
    InputLayers of a functional model, then its layers (a Sequential model: its layers in a chain)."""
    if model._graph is None:
        out, previous = [], []
        for layer in model._layers:
            built = layer.built
            out.append((layer.name, type(layer).__name__, layer, layer.input_shape if built else None,
                        layer.output_shape if built else None, previous))
            previous = [layer.name]
        return out
    config = _keras_config.functional_to_keras(model)["config"]
    by_name = {layer.name: layer for layer in model._layers}
    shapes, out = {}, []
    for entry in config["layers"]:
        name = entry["name"]
        if entry["class_name"] == "InputLayer":
            shapes[name] = (None, *entry["config"]["batch_shape"][1:])
            out.append((name, "InputLayer", None, None, shapes[name], []))
            continue
        args = entry["inbound_nodes"][0]["args"][0]
        inbound = [t["config"]["keras_history"][0] for t in (args if isinstance(args, list) else [args])]
        layer = by_name[name]
        input_shape = [shapes[n] for n in inbound] if isinstance(args, list) else shapes[inbound[0]]
        shapes[name] = layer.output_shape
        out.append((name, type(layer).__name__, layer, input_shape, layer.output_shape, inbound))
    return out


def _label(name, class_name, layer, input_shape, output_shape, show_shapes, show_dtype, show_layer_names,
           show_layer_activations, show_trainable):
    colspan = max(1, int(show_dtype) + int(show_trainable) + (2 if show_shapes else 0))
    title = f"<b>{name}</b> ({class_name})" if show_layer_names else f"<b>{class_name}</b>"
    table = ('<<table border="0" cellborder="1" bgcolor="black" cellpadding="10">'
             f'<tr><td colspan="{colspan}" bgcolor="black"><font point-size="16" color="white">{title}</font></td></tr>')
    config = layer.get_config() if layer is not None else {}
    if show_layer_activations and config.get("activation") is not None:
        table += (f'<tr><td bgcolor="white" colspan="{colspan}"><font point-size="14">Activation: '
                  f'<b>{config["activation"]}</b></font></td></tr>')
    cols = []
    if show_shapes:
        if class_name != "InputLayer":
            cols.append('<td bgcolor="white"><font point-size="14">Input shape: '
                        f'<b>{input_shape if input_shape is not None else "?"}</b></font></td>')
        cols.append('<td bgcolor="white"><font point-size="14">Output shape: '
                    f'<b>{output_shape if output_shape is not None else "?"}</b></font></td>')
    if show_dtype:
        cols.append('<td bgcolor="white"><font point-size="14">Output dtype: <b>float32</b></font></td>')
    if show_trainable and layer is not None and layer.built and layer.count_params():
        trainable = "Trainable" if getattr(layer, "trainable", True) else "Non-trainable"
        cols.append(f'<td bgcolor="white"><font point-size="14"><b>{trainable}</b></font></td>')
    if cols:
        table += "<tr>" + "".join(cols) + "</tr>"
    return table + "</table>>"


def model_to_dot(model, show_shapes=False, show_dtype=False, show_layer_names=True, rankdir="TB",
                 expand_nested=False, dpi=200, subgraph=False, show_layer_activations=False, show_trainable=False,
                 splines="ortho", **kwargs):
    """The model as a pydot.Dot graph (needs pydot)."""
    if kwargs:
        raise ValueError(f"Unrecognized keyword arguments: {kwargs}")
    if expand_nested or subgraph:
        raise NotImplementedError("model_to_dot: expand_nested and subgraph are not supported (mdtrain models have "
                                  "no nested models)")
    if not check_pydot():
        raise ImportError("You must install pydot (`pip install pydot`) for model_to_dot to work.")
    model._maybe_build()
    dot = pydot.Dot()
    dot.set("rankdir", rankdir)
    dot.set("concentrate", True)
    dot.set("dpi", dpi)
    dot.set("splines", splines)
    dot.set_node_defaults(shape="record")
    nodes = _nodes(model)
    for name, class_name, layer, input_shape, output_shape, _ in nodes:
        node = pydot.Node(name, label=_label(name, class_name, layer, input_shape, output_shape, show_shapes,
                                              show_dtype, show_layer_names, show_layer_activations, show_trainable))
        node.set("fontname", "Helvetica")
        node.set("border", "0")
        node.set("margin", "0")
        dot.add_node(node)
    for name, _, _, _, _, inbound in nodes:
        for source in inbound:
            if not dot.get_edge(source, name):
                edge = pydot.Edge(source, name)
                edge.set("penwidth", "2")
                dot.add_edge(edge)
    return dot


def plot_model(model, to_file="model.png", show_shapes=False, show_dtype=False, show_layer_names=False, rankdir="TB",
               expand_nested=False, dpi=200, show_layer_activations=False, show_trainable=False, splines="ortho",
               **kwargs):
    """Draws the model into to_file (its extension is the format: png, svg, pdf, dot, ...). Needs
    pydot and Graphviz; without them an ImportError says what to install, as in Keras."""
    if not check_pydot():
        raise ImportError("You must install pydot (`pip install pydot`) for `plot_model` to work.")
    if not check_graphviz():
        raise ImportError("You must install graphviz (see instructions at https://graphviz.gitlab.io/download/) for "
                          "`plot_model` to work.")
    if kwargs.pop("layer_range", None) is not None:
        raise ValueError("Argument `layer_range` is no longer supported.")
    if kwargs:
        raise ValueError(f"Unrecognized keyword arguments: {kwargs}")
    dot = model_to_dot(model, show_shapes=show_shapes, show_dtype=show_dtype, show_layer_names=show_layer_names,
                       rankdir=rankdir, expand_nested=expand_nested, dpi=dpi,
                       show_layer_activations=show_layer_activations, show_trainable=show_trainable, splines=splines)
    to_file = str(to_file)
    _, extension = os.path.splitext(to_file)
    extension = extension[1:] if extension else "png"
    dot.write(to_file, format=extension)
    # Displayed in a notebook as Keras does; an SVG as an SVG (IPython's Image refuses it).
    if extension in ("png", "jpg", "jpeg", "gif", "svg"):
        try:
            from IPython import display
        except ImportError:
            return None
        return display.SVG(filename=to_file) if extension == "svg" else display.Image(filename=to_file)
    return None
