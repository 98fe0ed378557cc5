"""mdtrain: multi-device training with a C++ core and a Keras front end.

Written so that TensorFlow code using the supported subset runs after changing only its
import::

    import mdtrain as tf
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([...])
        model.compile(...)
    model.fit(x, y, epochs=5)
"""
from mdtrain import _blas

_blas.preload()

from mdtrain import _core  # noqa: E402
from mdtrain import config, distribute, keras  # noqa: E402
from mdtrain import compat, data, io, train  # noqa: E402
from mdtrain._version import __version__  # noqa: E402
from mdtrain.distribute import get_strategy  # noqa: E402,F401
from mdtrain._tensor_spec import TensorSpec  # noqa: E402
from mdtrain import _eager  # noqa: E402

# Eager tensors and the tape (docs/eager.md): tf.constant, tf.Variable, tf.GradientTape, tf.matmul,
# tf.float32, tf.math, tf.nn, ... (tf.range, tf.print, tf.abs, tf.pow and tf.round shadow the
# builtins here only).
globals().update(_eager.exports())

# TF's top-level aliases of Keras modules (tf.losses.SparseCategoricalCrossentropy, ...).
losses = keras.losses
metrics = keras.metrics
optimizers = keras.optimizers


def cmake_dir():
    """Directory holding mdtrainConfig.cmake, for C++ programs: cmake -Dmdtrain_DIR=$(...)."""
    import os

    # Next to _core, which is where the wheel (and an editable install) puts the C++ package.
    return os.path.join(os.path.dirname(os.path.abspath(_core.__file__)), "cpp", "lib", "cmake", "mdtrain")


__all__ = ["compat", "config", "data", "distribute", "io", "keras", "losses", "metrics", "optimizers", "train", "TensorSpec",
           "cmake_dir", "get_strategy", "__version__"] + sorted(
               name for name in _eager.exports() if name not in ("abs", "bool", "pow", "print", "range", "round"))
