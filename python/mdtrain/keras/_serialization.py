"""Turning Keras-style arguments (names, objects, None) into the JSON the C++ core reads."""
import json


def to_config(obj, kind):
    """None → null; a string → itself; an object with get_config() → {"class_name", "config"}."""
    if obj is None or isinstance(obj, str):
        return obj
    if hasattr(obj, "get_config"):
        return {"class_name": type(obj).__name__, "config": obj.get_config()}
    if isinstance(obj, dict) and "class_name" in obj:
        return obj
    raise TypeError(f"{kind} must be a name, a keras {kind} object or None, got {obj!r}")


def dumps(obj):
    return json.dumps(obj)
