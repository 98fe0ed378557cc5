"""Keras-compatible dataset loaders: `mnist.load_data()`, `fashion_mnist.load_data()`.

Pure Python + NumPy; see docs/datasets.md for where the files are looked for.
"""

from . import fashion_mnist, mnist
from ._files import DatasetNotFoundError

__all__ = ["fashion_mnist", "mnist", "DatasetNotFoundError"]
