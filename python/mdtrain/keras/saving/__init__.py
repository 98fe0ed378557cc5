"""keras.saving: saving and loading models, and the serialization of Keras objects (Keras 3's
names; .keras files are docs/file_format.md's "Keras files")."""
from mdtrain.keras._custom_objects import (CustomObjectScope, custom_object_scope, get_custom_objects,
                                           get_registered_name, get_registered_object, register_keras_serializable)
from mdtrain.keras.models import load_model
from mdtrain.keras.saving.serialization_lib import deserialize_keras_object, serialize_keras_object


def save_model(model, filepath, overwrite=True, zipped=None, **kwargs):
    """model.save(filepath): a .keras file of Keras 3, or mdtrain's own format for other paths."""
    return model.save(filepath, overwrite=overwrite, zipped=zipped, **kwargs)


def save_weights(model, filepath, overwrite=True, **kwargs):
    return model.save_weights(filepath, overwrite=overwrite, **kwargs)


def load_weights(model, filepath, skip_mismatch=False, **kwargs):
    return model.load_weights(filepath, skip_mismatch=skip_mismatch, **kwargs)


__all__ = ["CustomObjectScope", "custom_object_scope", "deserialize_keras_object", "get_custom_objects",
           "get_registered_name", "get_registered_object", "load_model", "load_weights", "register_keras_serializable",
           "save_model", "save_weights", "serialize_keras_object"]
