"""Utilities of the Keras-like front end (``mdtrain.keras.utils``)."""

from mdtrain._random import set_random_seed

from mdtrain.keras._custom_objects import (CustomObjectScope, custom_object_scope, get_custom_objects,
                                           get_registered_name, get_registered_object, register_keras_serializable)

from .model_visualization import model_to_dot, plot_model
from .numerical_utils import to_categorical
from .progbar import Progbar
from .sequence_utils import pad_sequences


class experimental:  # noqa: N801 - keras.utils.experimental namespace
    from mdtrain._ps.fit import DatasetCreator


__all__ = ["CustomObjectScope", "custom_object_scope", "experimental", "get_custom_objects",
           "get_registered_name", "get_registered_object", "model_to_dot", "pad_sequences", "plot_model", "Progbar",
           "register_keras_serializable", "set_random_seed", "to_categorical"]
