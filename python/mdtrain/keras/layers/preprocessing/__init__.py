"""Keras 3's preprocessing layers, computed on the host in NumPy (preprocessing_layer.py)."""
from mdtrain.keras.layers.preprocessing.category_encoding import CategoryEncoding
from mdtrain.keras.layers.preprocessing.hashing import Hashing
from mdtrain.keras.layers.preprocessing.integer_lookup import IntegerLookup
from mdtrain.keras.layers.preprocessing.normalization import Normalization
from mdtrain.keras.layers.preprocessing.preprocessing_layer import PreprocessingLayer
from mdtrain.keras.layers.preprocessing.rescaling import Rescaling
from mdtrain.keras.layers.preprocessing.string_lookup import StringLookup
from mdtrain.keras.layers.preprocessing.text_vectorization import TextVectorization
from mdtrain.keras.layers.preprocessing.center_crop import CenterCrop
from mdtrain.keras.layers.preprocessing.random_contrast import RandomContrast
from mdtrain.keras.layers.preprocessing.random_flip import RandomFlip
from mdtrain.keras.layers.preprocessing.random_rotation import RandomRotation
from mdtrain.keras.layers.preprocessing.random_translation import RandomTranslation
from mdtrain.keras.layers.preprocessing.random_zoom import RandomZoom
from mdtrain.keras.layers.preprocessing.resizing import Resizing
