"""A model's configuration (Sequential or Functional) in Keras 3's config.json form, both ways.

Keras 3 writes every object as {"module", "class_name", "config", "registered_name"}; layers add
"build_config" and the model "compile_config". Writing, mdtrain's own configs (which already use
Keras's argument names) are wrapped that way. Reading, each Keras object becomes the mdtrain
object of the same class; a Keras argument mdtrain does not have is dropped when it holds Keras's
default (None, False, ...) and is an error naming the layer and argument otherwise.
"""
import inspect
import json

from mdtrain.keras import _custom_objects
from mdtrain.keras import initializers as _initializers
from mdtrain.keras import layers as _layers
from mdtrain.keras import losses as _losses
from mdtrain.keras import metrics as _metrics
from mdtrain.keras import optimizers as _optimizers
from mdtrain.keras import regularizers as _regularizers
from mdtrain.keras.optimizers import schedules as _schedules

_FLOAT32 = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None}
# Keras arguments mdtrain has no counterpart for, with the values that mean "not used".
_IGNORABLE = {"renorm_momentum": 0.99, "ema_momentum": 0.99, "optional": False, "sparse": False, "ragged": False,
              "input_axes": None, "output_axes": None, "lora_rank": None, "lora_alpha": None}


class UnsupportedKerasObject(ValueError):
    """A Keras file names a layer, loss, optimizer, metric or argument mdtrain does not support."""


def _registry(module, base):
    """The public classes of `module` deriving from `base`, by class name: a config's class_name
    is looked up here, never with getattr on a module (where "__class__", "__loader__" or an
    imported helper would be found and called)."""
    return {name: obj for name, obj in vars(module).items()
            if not name.startswith("_") and isinstance(obj, type) and issubclass(obj, base) and obj is not base}


INITIALIZERS = _registry(_initializers, _initializers.Initializer)
REGULARIZERS = _registry(_regularizers, _regularizers.Regularizer)
LOSSES = _registry(_losses, _losses.Loss)
METRICS = _registry(_metrics, _metrics.Metric)
OPTIMIZERS = _registry(_optimizers, _optimizers.Optimizer)
SCHEDULES = _registry(_schedules, _schedules.LearningRateSchedule)


def _wrap(module, class_name, config):
    return {"module": module, "class_name": class_name, "config": config, "registered_name": None}


def _keras_value(key, value):
    if isinstance(value, dict) and "class_name" in value and key in ("layer", "backward_layer"):
        # A wrapper's layer (Bidirectional's): a layer config of its own, written as Keras writes layers.
        inner = {k: _keras_value(k, v) for k, v in (value.get("config") or {}).items()}
        inner["dtype"] = dict(_FLOAT32)
        return _wrap("keras.layers", value["class_name"], inner)
    if isinstance(value, dict) and "class_name" in value:
        module = "keras.regularizers" if "regularizer" in key else "keras.initializers"
        return _wrap(module, value["class_name"], dict(value.get("config") or {}))
    return value


# ---- mdtrain -> Keras ----------------------------------------------------------------------
def layer_to_keras(layer, input_shape):
    """A layer as Keras writes it; a class of the program's (a registered subclass of a built-in
    layer) is written with its module and registered name, as Keras writes custom classes."""
    config = {k: _keras_value(k, v) for k, v in layer.get_config().items() if k != "batch_input_shape"}
    config["dtype"] = dict(_FLOAT32)
    cls = type(layer)
    if _custom_objects.is_custom_class(cls, _layers._CLASSES):
        entry = _wrap(cls.__module__, cls.__name__, config)
        entry["registered_name"] = _custom_objects.get_registered_name(cls)
    else:
        entry = _wrap("keras.layers", cls.__name__, config)
    if input_shape is not None:
        entry["build_config"] = {"input_shape": input_shape}
    return entry


def _history_list(histories):
    """input_layers/output_layers as Keras writes them: one [name, 0, 0], or a list of them."""
    return histories[0] if len(histories) == 1 else histories


def functional_to_keras(model):
    """config.json's content for a functional (or traced subclassed) model: the C++ Functional
    config (model/functional_config.h) with each layer written as Keras writes it."""
    native = json.loads(model._core.config_json())["config"]
    by_name = {layer.name: layer for layer in model._layers}
    layers = []
    for entry in native["layers"]:
        if entry["class_name"] == "InputLayer":
            c = entry["config"]
            out = _wrap("keras.layers", "InputLayer", {"batch_shape": c["batch_shape"], "dtype": "float32",
                                                       "sparse": False, "ragged": False, "name": c["name"]})
        else:
            args = entry["inbound_nodes"][0]["args"][0]
            tensors = args if isinstance(args, list) else [args]
            shapes = [t["config"]["shape"] for t in tensors]
            out = layer_to_keras(by_name[entry["name"]], shapes if isinstance(args, list) else shapes[0])
        out["name"] = entry["name"]
        out["inbound_nodes"] = entry["inbound_nodes"]
        layers.append(out)
    out = _wrap("keras.src.models.functional", "Functional",
                {"name": model.name, "trainable": model.trainable, "layers": layers,
                 "input_layers": _history_list(native["input_layers"]),
                 "output_layers": _history_list(native["output_layers"])})
    out["registered_name"] = "Functional"
    out["build_config"] = {"input_shape": None}
    if model.optimizer is not None and model.loss is not None:
        out["compile_config"] = compile_to_keras(model)
    return out


def model_to_keras(model):
    """config.json's content for a built model (with compile_config when compiled); an unbuilt
    Sequential model is its layers, as Keras writes one."""
    if model._graph is not None:
        return functional_to_keras(model)
    if not model.built:
        if getattr(model, "_core", None) is None or model._core.is_functional:
            raise ValueError(f"model '{model.name}' is not built yet: its config needs its input shape (call "
                             "build() or the model first)")
        out = _wrap("keras", "Sequential", {"name": model.name, "trainable": True, "dtype": dict(_FLOAT32),
                                             "layers": [layer_to_keras(layer, None) for layer in model._layers]})
        return out
    input_shape = [None, *model._core.input_shape]
    # A model starting with an Embedding reads integer indices: Keras declares such inputs int32.
    input_dtype = "int32" if model._reads_indices() else "float32"
    layers = [_wrap("keras.layers", "InputLayer",
                    {"batch_shape": input_shape, "dtype": input_dtype, "sparse": False, "ragged": False,
                     "name": "input_layer"})]
    for layer in model._layers:
        layers.append(layer_to_keras(layer, [None, *layer.input_shape[1:]]))
    out = _wrap("keras", "Sequential", {"name": model.name, "trainable": True, "dtype": dict(_FLOAT32),
                                         "layers": layers, "build_input_shape": input_shape})
    out["build_config"] = {"input_shape": input_shape}
    if model.optimizer is not None and model.loss is not None:
        out["compile_config"] = compile_to_keras(model)
    return out


def compile_to_keras(model):
    opt_config = dict(model.optimizer.get_config())
    lr = opt_config.get("learning_rate")
    if isinstance(lr, dict):
        opt_config["learning_rate"] = _wrap("keras.optimizers.schedules", lr["class_name"], lr["config"])
    def loss_to_keras(loss):
        loss_class = loss._core.class_name if hasattr(loss._core, "class_name") else type(loss).__name__
        return _wrap("keras.losses", loss_class, dict(loss.get_config()))

    loss_weights, metrics = None, list(model._metric_identifiers) or None
    if getattr(model, "_outputs", None) is not None:  # several outputs: lists in output order, as Keras writes
        loss = [loss_to_keras(l) for l in model.loss.losses]
        loss_weights = list(model.loss.loss_weights)
        metrics = [[m for m, k in zip(model._metric_identifiers, model._metric_outputs) if k == out]
                   for out in range(len(model.loss.losses))]
    else:
        loss = loss_to_keras(model.loss)
    return {"optimizer": _wrap("keras.optimizers", type(model.optimizer).__name__, opt_config),
            "loss": loss, "loss_weights": loss_weights, "metrics": metrics, "weighted_metrics": None,
            "run_eagerly": False, "steps_per_execution": 1, "jit_compile": False}


# ---- Keras -> mdtrain ----------------------------------------------------------------------
def _kwargs(cls, config, what):
    """config's entries that cls accepts; the others must hold a value meaning "not used"."""
    params = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    accepted = set(params) | (_layers._BASE_KWARGS if issubclass(cls, _layers.Layer) else set())
    out = {}
    for key, value in config.items():
        if key in accepted or (takes_any and not issubclass(cls, _layers.Layer)):
            out[key] = value
        elif value is None or value is False or _IGNORABLE.get(key, object()) == value:
            continue
        else:
            raise UnsupportedKerasObject(f"{what}: argument {key}={value!r} is not supported by mdtrain")
    return out


def _config_of(entry, what):
    config = entry.get("config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ValueError(f"{what}: config is a {type(config).__name__}, expected an object")
    return dict(config)


def _lookup(registry, class_name, what):
    cls = registry.get(class_name) if isinstance(class_name, str) else None
    if cls is None:
        raise UnsupportedKerasObject(f"{what}: {class_name!r} is not supported by mdtrain (supported: "
                                     f"{', '.join(sorted(registry))})")
    return cls


def _object(registry, entry, what):
    """An mdtrain object for a Keras-serialized one (a name or None passes through)."""
    if entry is None or isinstance(entry, (str, int, float)):
        return entry
    if not isinstance(entry, dict) or "class_name" not in entry:
        raise ValueError(f"{what}: expected a Keras object {{'class_name': ..., 'config': ...}}, got {entry!r}")
    cls = _lookup(registry, entry["class_name"], what)
    return cls(**_kwargs(cls, _config_of(entry, what), f"{what} {entry['class_name']}"))


def _custom_layer_class(entry):
    """The registered (or custom_objects) layer class an entry names, or None for mdtrain's own."""
    found = _custom_objects.find(entry.get("class_name"), entry.get("registered_name"))
    if found is None:
        return None
    if not (isinstance(found, type) and issubclass(found, _layers.Layer)):
        raise UnsupportedKerasObject(f"layer {entry.get('class_name')!r}: the custom object registered for it is "
                                     f"{found!r}, not a subclass of an mdtrain layer (mdtrain runs its own layers "
                                     "and subclasses of them)")
    return found


def _custom_kwargs(cls, config, what):
    """_kwargs for a subclass of a built-in layer: the arguments of every __init__ up its classes."""
    accepted = set(_layers._BASE_KWARGS)
    for klass in cls.__mro__:
        if isinstance(klass, type) and issubclass(klass, _layers.Layer) and "__init__" in vars(klass):
            accepted |= set(inspect.signature(klass.__init__).parameters)
    out = {}
    for key, value in config.items():
        if key in accepted:
            out[key] = value
        elif not (value is None or value is False or _IGNORABLE.get(key, object()) == value):
            raise UnsupportedKerasObject(f"{what}: argument {key}={value!r} is not supported by mdtrain")
    return out


def layer_from_keras(entry):
    """The mdtrain layer of a Keras layer entry: a registered (or custom_objects) subclass of a
    built-in layer first, as Keras looks registered names up first, then mdtrain's own classes."""
    if not isinstance(entry, dict):
        raise ValueError(f"a layer entry is a {type(entry).__name__}, expected an object with class_name and config")
    class_name = entry.get("class_name")
    custom = _custom_layer_class(entry)
    cls = custom or (_layers._CLASSES.get(class_name) if isinstance(class_name, str) else None)
    if cls is None:
        raise UnsupportedKerasObject(f"layer class {class_name!r} is not supported by mdtrain (supported: "
                                     f"{', '.join(sorted(_layers._CLASSES))}, and classes registered with "
                                     "keras.saving.register_keras_serializable or passed as custom_objects)")
    config = _config_of(entry, f"layer {class_name}")
    config.pop("dtype", None)
    name = config.get("name", class_name)
    for key, value in list(config.items()):
        if key.endswith("_initializer"):
            config[key] = _object(INITIALIZERS, value, f"layer {name!r} {key}")
        elif key.endswith("_regularizer"):
            config[key] = _object(REGULARIZERS, value, f"layer {name!r} {key}")
    if custom is not None:
        return custom.from_config(_custom_kwargs(custom, config, f"layer {name!r} ({class_name})"))
    return cls(**_kwargs(cls, config, f"layer {name!r} ({class_name})"))


def _histories(value):
    """(layer name, call number) of input_layers/output_layers: [name, 0, 0] or a list of them."""
    if value and isinstance(value[0], str):
        return [_history_key(value)], False
    return [_history_key(h) for h in value], True


def _history_key(history):
    """(layer name, call number) of a keras_history [name, call, tensor] (Keras 2 may omit the call)."""
    return (history[0], int(history[1]) if len(history) > 1 else 0)


def _embedding_masks(entries):
    """{name: input} of the NotEqual(x, 0) op layers Keras 3 writes into a Functional config for
    the mask of an Embedding(mask_zero=True) reading x (passed on as a layer's mask= keyword):
    exactly the mask mdtrain's graph gives that Embedding's readers, so the op is not a layer here."""
    def history(arg):
        return (arg.get("config") or {}).get("keras_history", [None])[0] if isinstance(arg, dict) else None

    masked_inputs = set()
    for entry in entries:
        if entry.get("class_name") == "Embedding" and (entry.get("config") or {}).get("mask_zero"):
            for node in entry.get("inbound_nodes") or []:
                args = node.get("args") if isinstance(node, dict) else None
                if args:
                    masked_inputs.add(history(args[0]))
    out = {}
    for entry in entries:
        nodes = entry.get("inbound_nodes") or []
        if entry.get("class_name") != "NotEqual" or len(nodes) != 1 or not isinstance(nodes[0], dict):
            continue
        args = nodes[0].get("args") or []
        if len(args) == 2 and args[1] == 0 and not nodes[0].get("kwargs") and history(args[0]) in masked_inputs:
            out[entry.get("name") or (entry.get("config") or {}).get("name")] = history(args[0])
    return out


def functional_from_keras(config, make_layer=layer_from_keras, input_tensors=None):
    """An mdtrain keras.Model for a Keras Functional config: each layer made as layer_from_keras
    (or make_layer, given the entry) makes it and called on its inbound tensors, so the graph is
    checked as if written in Python. input_tensors: {input layer name: keras.Input tensor} to
    build on instead of new Inputs (clone_model's input_tensors)."""
    from mdtrain.keras import models as _models
    from mdtrain.keras._keras_tensor import Input

    inner = config.get("config") or {}
    values = {}  # (layer name, call number) -> its output KerasTensor
    zero_masks = _embedding_masks(inner.get("layers", []))
    calls = []  # (entry, name, call number, node) of every layer call, in the file's order
    for entry in inner.get("layers", []):
        name = entry.get("name") or (entry.get("config") or {}).get("name")
        if name in zero_masks:
            continue  # the mask Keras writes as an op, which the C++ graph propagates itself
        if entry.get("class_name") == "InputLayer":
            lc = entry.get("config") or {}
            shape = lc.get("batch_shape") or lc.get("batch_input_shape")
            given = (input_tensors or {}).get(name)
            values[(name, 0)] = given if given is not None else Input(shape=tuple(shape[1:]), name=name)
            continue
        nodes = entry.get("inbound_nodes") or []
        if not nodes:
            raise UnsupportedKerasObject(f"Functional model: layer {name!r} has no inbound node (it is called on "
                                         "nothing)")
        calls += [(entry, name, k, node) for k, node in enumerate(nodes)]

    def history(t):
        return _history_key(t["config"]["keras_history"])

    def call_inputs(name, node):
        mask = (node.get("kwargs") or {}).get("mask") if isinstance(node, dict) else None
        if isinstance(mask, dict) and list(node["kwargs"]) == ["mask"] and \
                (mask.get("config") or {}).get("keras_history", [None])[0] in zero_masks:
            node = dict(node, kwargs={})
        if not isinstance(node, dict) or node.get("kwargs"):
            raise UnsupportedKerasObject(f"layer {name!r}: call arguments {node!r} are not supported by mdtrain")
        args = node["args"][0]
        return args if isinstance(args, list) else [args], isinstance(args, list)

    # A shared layer's later call may read layers listed after it: each round makes the calls whose
    # inputs (and whose layer's earlier calls) exist, until all are made.
    layers = {}
    while calls:
        waiting = []
        for entry, name, k, node in calls:
            args, several = call_inputs(name, node)
            if (k > 0 and (name, k - 1) not in values) or any(history(t) not in values for t in args):
                waiting.append((entry, name, k, node))
                continue
            if name not in layers:
                layers[name] = make_layer(entry)
            inputs = [values[history(t)] for t in args]
            values[(name, k)] = layers[name](inputs if several else inputs[0])
        if len(waiting) == len(calls):
            entry, name, k, node = waiting[0]
            missing = [history(t)[0] for t in call_inputs(name, node)[0] if history(t) not in values]
            raise ValueError(f"layer {name!r} reads {missing or [name]!r}, which no layer of the model defines "
                             "before it")
        calls = waiting
    ins, ins_list = _histories(inner.get("input_layers") or [])
    outs, outs_list = _histories(inner.get("output_layers") or [])
    unknown = [key[0] for key in ins + outs if key not in values]
    if unknown or not ins or not outs:
        raise UnsupportedKerasObject(f"Functional model: input_layers/output_layers name {unknown or 'nothing'}, "
                                     f"not layers of the model")
    inputs = [values[n] for n in ins]
    outputs = [values[n] for n in outs]
    return _models.Model(inputs if ins_list else inputs[0], outputs if outs_list else outputs[0],
                         name=inner.get("name"))


def model_from_keras(config):
    """(name, input_shape or None, [mdtrain layers]) of a Keras Sequential config."""
    if not isinstance(config, dict) or config.get("class_name") != "Sequential":
        found = config.get("class_name") if isinstance(config, dict) else type(config).__name__
        raise UnsupportedKerasObject(f"model class {found!r} is not supported by mdtrain (only Sequential and "
                                     "Functional)")
    inner = config.get("config") or {}
    input_shape, layers = None, []
    for entry in inner.get("layers", []):
        if entry.get("class_name") == "InputLayer":
            lc = entry.get("config") or {}
            shape = lc.get("batch_shape") or lc.get("batch_input_shape")
            input_shape = tuple(shape[1:])
            continue
        layers.append(layer_from_keras(entry))
    if input_shape is None:
        shape = inner.get("build_input_shape") or (config.get("build_config") or {}).get("input_shape")
        if shape:
            input_shape = tuple(shape[1:])
    return inner.get("name"), input_shape, layers


def compile_from_keras(compile_config):
    """compile() keyword arguments for a Keras compile_config."""
    opt = compile_config.get("optimizer")
    if isinstance(opt, dict):
        cls = _lookup(OPTIMIZERS, opt.get("class_name"), "optimizer")
        opt_config = _config_of(opt, "optimizer")
        lr = opt_config.get("learning_rate")
        if isinstance(lr, dict):
            opt_config["learning_rate"] = _object(SCHEDULES, lr, "optimizer learning_rate schedule")
        optimizer = cls(**_kwargs(cls, opt_config, f"optimizer {opt['class_name']}"))
    else:
        optimizer = opt
    def loss_from(loss):
        return _object(LOSSES, loss, "loss") if isinstance(loss, dict) and "class_name" in loss else loss

    def metric_from(m):
        if isinstance(m, (list, tuple)):  # one output's metrics (a model with several outputs)
            return [metric_from(e) for e in m]
        if isinstance(m, dict):
            m = _lookup(METRICS, m.get("class_name"), "metric")()
        return m

    loss = compile_config.get("loss")
    if isinstance(loss, (list, tuple)):  # a loss per output
        loss = [loss_from(l) for l in loss]
    elif isinstance(loss, dict) and "class_name" not in loss:  # a loss per output name
        loss = {name: loss_from(l) for name, l in loss.items()}
    else:
        loss = loss_from(loss)
    metrics = compile_config.get("metrics") or []
    metrics = {name: metric_from(m) for name, m in metrics.items()} if isinstance(metrics, dict) \
        else [metric_from(m) for m in metrics]
    if compile_config.get("weighted_metrics"):
        raise UnsupportedKerasObject("compile_config weighted_metrics is not supported by mdtrain")
    out = {"optimizer": optimizer, "loss": loss, "metrics": metrics}
    if compile_config.get("loss_weights") is not None:
        if not isinstance(loss, (list, tuple, dict)) or (isinstance(loss, dict) and "class_name" in loss):
            raise UnsupportedKerasObject("compile_config loss_weights is supported for several outputs only")
        out["loss_weights"] = compile_config["loss_weights"]
    return out


def model_from_config_entry(config, compile=True):
    """The model a serialized model ({"class_name": "Sequential" | "Functional", "config", ...},
    what config.json and to_json hold) describes, compiled when asked and it says how."""
    from mdtrain.keras.models import Sequential

    if not isinstance(config, dict):
        raise ValueError(f"a model config is a {type(config).__name__}, expected an object with class_name and config")
    if config.get("class_name") in ("Functional", "Model"):
        model = functional_from_keras(config)
    else:
        name, input_shape, layers = model_from_keras(config)
        model = Sequential(layers, name=name)
        if input_shape is not None:
            model.build((None, *input_shape))
    compile_config = config.get("compile_config") if compile else None
    if compile_config is not None and not isinstance(compile_config, dict):
        raise ValueError(f"compile_config is a {type(compile_config).__name__}, expected an object")
    if compile_config and compile_config.get("loss") is not None:
        model.compile(**compile_from_keras(compile_config))
    return model
