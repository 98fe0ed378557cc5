"""Custom objects: the classes and functions a config may name beyond mdtrain's own, as Keras 3
keeps them (keras.saving.register_keras_serializable, custom_object_scope, get_custom_objects).

A config's class_name or registered_name is looked up only in these explicit registries (the
global one, the current custom_object_scope, a custom_objects argument) and in mdtrain's own
classes; it is never resolved through the config's "module" (no import, no getattr on a module),
so a file cannot make mdtrain import or call code the program did not register.
"""
import inspect
import threading

# Keras's names: "package>name" -> object, and object -> "package>name".
GLOBAL_CUSTOM_OBJECTS = {}
GLOBAL_CUSTOM_NAMES = {}

_state = threading.local()  # the current scope's dictionary, per thread as in Keras


def _scope_objects():
    return getattr(_state, "objects", None) or {}


class CustomObjectScope:
    """with custom_object_scope({"name": obj}): the objects a load or deserialization inside may
    find by name. As in Keras an inner scope replaces the outer one until it exits."""

    def __init__(self, custom_objects):
        if custom_objects is not None and not isinstance(custom_objects, dict):
            raise TypeError(f"custom_object_scope: custom_objects must be a dict of name -> object, got "
                            f"{type(custom_objects).__name__}")
        self.custom_objects = dict(custom_objects or {})
        self.backup = None

    def __enter__(self):
        self.backup = dict(_scope_objects())
        _state.objects = dict(self.custom_objects)
        return self

    def __exit__(self, *exc):
        _state.objects = self.backup


custom_object_scope = CustomObjectScope


def get_custom_objects():
    """The live global dictionary of registered objects (not the current scope's)."""
    return GLOBAL_CUSTOM_OBJECTS


def register_keras_serializable(package="Custom", name=None):
    """Decorator registering a class (which must have get_config) or a function under
    "package>name" (name: the object's __name__ by default)."""

    def decorator(arg):
        class_name = name if name is not None else arg.__name__
        registered_name = f"{package}>{class_name}"
        if inspect.isclass(arg) and not hasattr(arg, "get_config"):
            raise ValueError("Cannot register a class that does not have a get_config() method.")
        GLOBAL_CUSTOM_OBJECTS[registered_name] = arg
        GLOBAL_CUSTOM_NAMES[arg] = registered_name
        return arg

    return decorator


def get_registered_name(obj):
    """"package>name" of a registered object, its __name__ otherwise."""
    return GLOBAL_CUSTOM_NAMES.get(obj, obj.__name__)


def get_registered_object(name, custom_objects=None, module_objects=None):
    """The object registered under name: in the current scope, the global registry, then
    custom_objects and module_objects (Keras's order); None when none has it."""
    for table in (_scope_objects(), GLOBAL_CUSTOM_OBJECTS, custom_objects or {}, module_objects or {}):
        if name in table:
            return table[name]
    return None


def find(class_name, registered_name=None, custom_objects=None):
    """The custom object a config entry names, or None: its registered_name first, then its
    class_name, each in custom_objects, the current scope and the global registry."""
    for key in (registered_name, class_name):
        if isinstance(key, str) and key:
            for table in (custom_objects or {}, _scope_objects(), GLOBAL_CUSTOM_OBJECTS):
                if key in table:
                    return table[key]
    return None


def is_custom_class(cls, builtin):
    """Whether cls (a class) is not one of mdtrain's own classes in the builtin registry."""
    return builtin.get(cls.__name__) is not cls
