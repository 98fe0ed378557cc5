"""keras.saving.serialize_keras_object / deserialize_keras_object: any Keras object as the dict
Keras 3 writes for it ({"module", "class_name", "config", "registered_name"}, plus build_config
and compile_config for layers and models), and back.

Deserializing, a class is found by its registered_name or class_name in the custom objects
(_custom_objects: the custom_objects argument, the current scope, the global registry) and then
in mdtrain's own classes of the kind the module names; the "module" field is never imported.
"""
import json

import numpy as np

from mdtrain.keras import _custom_objects, _keras_config
from mdtrain.keras import layers as _layers
from mdtrain.keras import models as _models

PLAIN_TYPES = (str, int, float, bool)

# The Keras module of each kind of mdtrain object, and the registry its class names are found in.
_KINDS = [("keras.layers", _layers._CLASSES), ("keras.losses", _keras_config.LOSSES),
          ("keras.metrics", _keras_config.METRICS), ("keras.optimizers", _keras_config.OPTIMIZERS),
          ("keras.optimizers.schedules", _keras_config.SCHEDULES),
          ("keras.initializers", _keras_config.INITIALIZERS), ("keras.regularizers", _keras_config.REGULARIZERS)]
_FUNCTION_MODULES = {}  # module name -> {function name: function}, filled by register_functions


def register_functions(module_name, functions):
    """mdtrain's built-in functions of a Keras module (keras.activations, keras.losses), found
    by name when a config says {"class_name": "function", "config": name}."""
    _FUNCTION_MODULES.setdefault(module_name, {}).update(functions)


def _builtin_kind(cls):
    for module, registry in _KINDS:
        if registry.get(cls.__name__) is cls:
            return module
    return None


def _serialize_dict(obj):
    return {key: serialize_keras_object(value) for key, value in obj.items()}


def _builtin_function(fn):
    for module, functions in _FUNCTION_MODULES.items():
        if functions.get(getattr(fn, "__name__", None)) is fn:
            return module
    return None


def serialize_keras_object(obj):
    """The dict Keras 3 writes for obj (plain values, lists and dicts element-wise)."""
    if obj is None or isinstance(obj, PLAIN_TYPES):
        return obj
    if isinstance(obj, (list, tuple)):
        out = [serialize_keras_object(x) for x in obj]
        return tuple(out) if isinstance(obj, tuple) else out
    if isinstance(obj, dict):
        return _serialize_dict(obj)
    if isinstance(obj, bytes):
        return {"class_name": "__bytes__", "config": {"value": obj.decode("utf-8")}}
    if isinstance(obj, np.ndarray) and obj.ndim > 0:
        return {"class_name": "__numpy__", "config": {"value": obj.tolist(), "dtype": str(obj.dtype)}}
    if isinstance(obj, np.generic) or (isinstance(obj, np.ndarray) and obj.ndim == 0):
        return obj.item()
    if isinstance(obj, _models.Model):
        return _keras_config.model_to_keras(obj)
    if isinstance(obj, _layers.Layer):
        return _keras_config.layer_to_keras(obj, [None, *obj.input_shape[1:]] if obj.built else None)
    if callable(obj) and not isinstance(obj, type) and not hasattr(obj, "get_config"):
        if getattr(obj, "__name__", None) == "<lambda>":
            raise ValueError("serialize_keras_object: a lambda cannot be serialized by mdtrain (its files hold no "
                             "code); use a named function registered with keras.saving.register_keras_serializable")
        if _builtin_function(obj) is not None:  # what Keras 3 writes for its own functions
            return {"module": "builtins", "class_name": "function", "config": obj.__name__,
                    "registered_name": "function"}
        registered = _custom_objects.get_registered_name(obj)
        return {"module": obj.__module__, "class_name": "function", "config": registered,
                "registered_name": registered}
    if not hasattr(obj, "get_config"):
        raise TypeError(f"serialize_keras_object: cannot serialize {obj!r} (a {type(obj).__name__}; it has no "
                        "get_config())")
    cls = type(obj)
    config = _serialize_dict(obj.get_config())
    if isinstance(obj, _keras_config._optimizers.Optimizer):
        lr = config.get("learning_rate")
        if isinstance(lr, dict) and "class_name" in lr and "module" not in lr:
            config["learning_rate"] = _keras_config._wrap("keras.optimizers.schedules", lr["class_name"],
                                                          dict(lr.get("config") or {}))
    class_name = cls.__name__
    core = getattr(obj, "_core", None)
    if isinstance(obj, _keras_config._losses.Loss) and hasattr(core, "class_name"):
        class_name = core.class_name
    module = _builtin_kind(cls)
    if module is not None:
        return {"module": module, "class_name": class_name, "config": config, "registered_name": None}
    return {"module": cls.__module__, "class_name": class_name, "config": config,
            "registered_name": _custom_objects.get_registered_name(cls)}


def _special(config):
    """The value of Keras's "__numpy__", "__tuple__", "__bytes__" entries (or a marker: none)."""
    name, inner = config["class_name"], config.get("config") or {}
    if name == "__numpy__":
        return np.array(inner["value"], dtype=inner.get("dtype"))
    if name == "__tuple__":
        return tuple(deserialize_keras_object(v) for v in inner.get("value", []))
    if name == "__bytes__":
        return inner["value"].encode("utf-8")
    if name == "__lambda__":
        raise ValueError("deserialize_keras_object: the config holds a lambda (Python bytecode); mdtrain never "
                         "loads code from a config, whatever safe_mode says. Register a named function with "
                         "keras.saving.register_keras_serializable instead")
    return _NOT_SPECIAL


_NOT_SPECIAL = object()


def _function(config, custom_objects):
    name = config.get("config")
    found = _custom_objects.find(name, config.get("registered_name"), custom_objects)
    if found is not None:
        return found
    module = config.get("module")
    for functions in ([_FUNCTION_MODULES.get(module, {})] if module in _FUNCTION_MODULES
                      else list(_FUNCTION_MODULES.values())):
        if isinstance(name, str) and name in functions:
            return functions[name]
    raise TypeError(f"Could not locate function '{name}'. Make sure custom functions are decorated with "
                    "`@keras.saving.register_keras_serializable()` or passed in custom_objects (mdtrain never "
                    f"imports the module a config names, here {module!r})")


def _class(config, custom_objects):
    class_name, module = config.get("class_name"), config.get("module")
    found = _custom_objects.find(class_name, config.get("registered_name"), custom_objects)
    if found is not None:
        return found, True
    kinds = [r for m, r in _KINDS if m == module] or [r for _, r in _KINDS]
    for registry in kinds:
        if isinstance(class_name, str) and class_name in registry:
            return registry[class_name], False
    raise TypeError(f"Could not locate class '{class_name}'. Make sure custom classes are decorated with "
                    "`@keras.saving.register_keras_serializable()` or passed in custom_objects (mdtrain never "
                    f"imports the module a config names, here {module!r}). Full object config: {config}")


def deserialize_keras_object(config, custom_objects=None, safe_mode=True, **kwargs):
    """The object a serialized config describes (serialize_keras_object's inverse). safe_mode
    is only checked: mdtrain refuses lambdas whatever it says."""
    if not isinstance(safe_mode, bool):
        raise ValueError(f"deserialize_keras_object: safe_mode must be True or False, got {safe_mode!r}")
    if kwargs.get("module_objects"):
        custom_objects = {**kwargs.pop("module_objects"), **(custom_objects or {})}
    kwargs.pop("module_objects", None)
    if kwargs:
        raise TypeError(f"deserialize_keras_object: unexpected arguments {sorted(kwargs)}")
    if config is None:
        return None
    if isinstance(config, str):
        found = _custom_objects.find(config, None, custom_objects)
        return found if found is not None else config
    if isinstance(config, PLAIN_TYPES):
        return config
    if isinstance(config, (list, tuple)):
        return [deserialize_keras_object(c, custom_objects) for c in config]
    if not isinstance(config, dict):
        raise TypeError(f"deserialize_keras_object: cannot deserialize a {type(config).__name__}: {config!r}")
    if "class_name" not in config or "config" not in config:
        return {key: deserialize_keras_object(value, custom_objects) for key, value in config.items()}
    special = _special(config)
    if special is not _NOT_SPECIAL:
        return special
    if config["class_name"] == "function":
        return _function(config, custom_objects)
    with _custom_objects.custom_object_scope({**_custom_objects._scope_objects(), **(custom_objects or {})}):
        if config["class_name"] in ("Sequential", "Functional", "Model") and \
                _custom_objects.find(config["class_name"], config.get("registered_name"), custom_objects) is None:
            return _keras_config.model_from_config_entry(config)
        cls, custom = _class(config, custom_objects)
        if isinstance(cls, type) and issubclass(cls, _layers.Layer):
            return _keras_config.layer_from_keras(config)
        inner = config.get("config")
        if not isinstance(inner, dict):
            raise ValueError(f"deserialize_keras_object: {config['class_name']}: config is a "
                             f"{type(inner).__name__}, expected an object")
        if isinstance(cls, type) and issubclass(cls, _keras_config._optimizers.Optimizer) and not custom:
            return _keras_config.compile_from_keras({"optimizer": config, "loss": None})["optimizer"]
        if custom:
            inner = {k: deserialize_keras_object(v, custom_objects) for k, v in inner.items()}
            return cls.from_config(inner) if hasattr(cls, "from_config") else cls(**inner)
        registry = next(r for _, r in _KINDS if r.get(config["class_name"]) is cls)
        return _keras_config._object(registry, config, config["class_name"])


def dumps(obj, **kwargs):
    """serialize_keras_object as JSON text (NumPy values as plain numbers)."""
    return json.dumps(serialize_keras_object(obj), **kwargs)
