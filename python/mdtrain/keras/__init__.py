"""mdtrain.keras: the Keras API (the subset mdtrain supports), laid out as tf.keras."""
from mdtrain.keras import (activations, backend, callbacks, datasets, distribution, initializers, layers, losses, metrics,
                           models, optimizers, preprocessing, regularizers, saving, utils)
from mdtrain.keras.layers import Input
from mdtrain.keras.models import Model, Sequential, load_model

__all__ = ["Input", "Model", "Sequential", "load_model", "activations", "backend", "callbacks", "datasets", "distribution",
           "initializers", "layers", "losses", "metrics", "models", "optimizers", "preprocessing", "regularizers", "saving",
           "utils"]
