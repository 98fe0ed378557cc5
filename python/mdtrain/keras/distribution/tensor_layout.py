"""keras.distribution.TensorLayout: how one tensor is laid out on a device mesh.

Keras 3's names and semantics (keras/src/distribution/distribution_lib.py): ``axes`` holds one entry per
dimension of the tensor, a mesh axis name to split that dimension along, or ``None`` to keep it whole;
the mesh may be given later (a ``LayoutMap`` fills in its own). Where mdtrain is stricter: an axis name
the mesh does not have, or one axis used for two dimensions, is a ``ValueError`` as soon as both are
known.
"""

__all__ = ["TensorLayout"]


class TensorLayout:
    """A layout to apply to a tensor.

    Args:
        axes: tuple of mesh axis names (or ``None``), one per dimension of the tensor.
        device_mesh: optional ``DeviceMesh``; set once, later, by the ``LayoutMap`` holding the layout.
    """

    def __init__(self, axes, device_mesh=None):
        if isinstance(axes, str):
            raise ValueError(f"TensorLayout: axes must be a tuple with one entry per dimension, got the string "
                             f"{axes!r}; write ({axes!r},) for a 1-D tensor")
        try:
            self._axes = tuple(axes)
        except TypeError:
            raise ValueError(f"TensorLayout: axes must be a tuple of mesh axis names or None, got {axes!r}") from None
        for a in self._axes:
            if a is not None and not isinstance(a, str):
                raise ValueError(f"TensorLayout: each axis must be a mesh axis name or None, got {a!r} in {self._axes}")
        named = [a for a in self._axes if a is not None]
        if len(set(named)) != len(named):
            raise ValueError(f"TensorLayout: axes={self._axes} uses one mesh axis for two dimensions")
        self._device_mesh = device_mesh
        self._validate_axes()

    @property
    def axes(self):
        return self._axes

    @property
    def device_mesh(self):
        return self._device_mesh

    @device_mesh.setter
    def device_mesh(self, device_mesh):
        if self._device_mesh is not None:
            raise ValueError(f"Cannot override device mesh value. Existing value is {self._device_mesh}")
        self._device_mesh = device_mesh
        self._validate_axes()

    def _validate_axes(self):
        if self._device_mesh is None:
            return
        valid = set(self._device_mesh.axis_names)
        unknown = [a for a in self._axes if a is not None and a not in valid]
        if unknown:
            raise ValueError(f"Invalid axis names for Layout. Valid axis names: {sorted(valid)}, Got {unknown} "
                             f"(axes={self._axes})")

    def __eq__(self, other):
        return isinstance(other, TensorLayout) and self._axes == other._axes

    def __hash__(self):
        return hash(self._axes)

    def __repr__(self):
        return f"<{type(self).__name__} axes={self.axes}, device_mesh={self.device_mesh}>"

    __str__ = __repr__
