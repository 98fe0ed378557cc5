"""tf.TensorSpec: the shape (None for an unknown dimension) and dtype of a value, and the helpers
that describe structures of values (tuples, dicts) with them."""
import numpy as np


def _as_shape(shape):
    if shape is None:
        return None  # unknown rank
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"TensorSpec: shape must be a sequence of ints and None, got {shape!r}") from None
    for d in dims:
        if d is not None and (not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0):
            raise ValueError(f"TensorSpec: dimensions must be ints >= 0 or None, got {shape!r}")
    return tuple(None if d is None else int(d) for d in dims)


class TensorSpec:
    """tf.TensorSpec(shape, dtype=float32, name=None). dtype is stored as a NumPy dtype (a tf.DType
    such as tf.float32 is accepted and compares equal to it)."""

    def __init__(self, shape, dtype=np.float32, name=None):
        self.shape = _as_shape(shape)
        dtype = getattr(dtype, "as_numpy_dtype", dtype)  # tf.float32 -> np.float32
        try:
            self.dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"TensorSpec: {dtype!r} is not a dtype") from None
        self.name = name

    def is_compatible_with(self, shape):
        """Whether a value of `shape` (or a spec) fits this spec."""
        if isinstance(shape, TensorSpec):
            shape = shape.shape
        if self.shape is None or shape is None:
            return True
        shape = tuple(shape)
        return len(shape) == len(self.shape) and all(a is None or b is None or a == b
                                                      for a, b in zip(self.shape, shape))

    @classmethod
    def from_tensor(cls, tensor, name=None):
        array = np.asarray(tensor)
        return cls(array.shape, array.dtype, name)

    def __eq__(self, other):
        return (isinstance(other, TensorSpec) and self.shape == other.shape and self.dtype == other.dtype
                and self.name == other.name)

    def __hash__(self):
        return hash((self.shape, self.dtype, self.name))

    def __repr__(self):
        shape = "<unknown>" if self.shape is None else "(" + ", ".join(
            "None" if d is None else str(d) for d in self.shape) + ("," if len(self.shape) == 1 else "") + ")"
        return f"TensorSpec(shape={shape}, dtype={self.dtype.name}, name={self.name!r})"


def map_structure(fn, structure):
    """fn applied to every leaf of a structure of tuples (named too) and dicts."""
    if isinstance(structure, tuple):
        items = [map_structure(fn, s) for s in structure]
        return type(structure)(*items) if hasattr(structure, "_fields") else tuple(items)
    if isinstance(structure, dict):
        return {k: map_structure(fn, v) for k, v in structure.items()}
    return fn(structure)


def flatten_like(template, value):
    """The parts of `value` at the leaf positions of `template`, in leaf order (dict keys sorted),
    where a part may itself be a tuple (a shape). None stands for None at every leaf."""
    if isinstance(template, tuple):
        parts = (None,) * len(template) if value is None else tuple(value)
        if len(parts) != len(template):
            raise ValueError(f"output_shapes {value!r} does not match the structure of {template!r}")
        return [leaf for t, v in zip(template, parts) for leaf in flatten_like(t, v)]
    if isinstance(template, dict):
        if value is not None and (not isinstance(value, dict) or set(value) != set(template)):
            raise ValueError(f"output_shapes {value!r} does not match the structure of {template!r}")
        return [leaf for k in sorted(template) for leaf in flatten_like(template[k], None if value is None
                                                                          else value[k])]
    return [value]


def spec_of(value):
    """The TensorSpec structure of a value (tuples, dicts, arrays and scalars)."""
    return map_structure(lambda leaf: TensorSpec.from_tensor(leaf), value)
