"""keras.distribution.LayoutMap: which weights are split over which mesh axes.

Keras 3's semantics: a dict-like map from string keys to ``TensorLayout``; a key is tried as the exact
weight path first, then as a regular expression (``re.fullmatch``) over it; a tuple value is turned into
a ``TensorLayout`` on the map's mesh. Weight paths are ``layer_name/weight_name`` (``dense_1/kernel``,
what ``weight.path`` gives); keys written for Keras versions whose paths start with the model's name
(``sequential/dense_1/kernel``) match too.

Where mdtrain is strict (Keras silently replicates, and users run out of memory): when a model is
resolved against the map, a key that matches no weight, a layout whose length is not the weight's rank,
a weight matched by two keys, or a dimension not divisible by its mesh axis is a ``ValueError`` naming
the key, the weight, its shape and the mesh.
"""
import collections
import re

from mdtrain.keras.distribution.tensor_layout import TensorLayout

__all__ = ["LayoutMap", "ResolvedWeight"]

# One weight of a model as a mesh holds it: its path and logical shape, the mesh axis (or None) of each
# dimension, and its shard on every device.
ResolvedWeight = collections.namedtuple("ResolvedWeight", "path shape dtype axes key shard_shape shard_bytes")


class LayoutMap(collections.abc.MutableMapping):
    """A dict-like object that maps weight paths (or regexes over them) to ``TensorLayout``s.

    Args:
        device_mesh: the ``keras.distribution.DeviceMesh`` the layouts refer to.
    """

    def __init__(self, device_mesh):
        self._layout_map = collections.OrderedDict()
        self._device_mesh = device_mesh
        self._last_model = None

    def __getitem__(self, key):
        """The layout for ``key``: an exact key, else the one key matching it as a regex, else None.
        Two matching keys are a ``ValueError``, as in Keras."""
        if key in self._layout_map:
            return self._layout_map[key]
        matching = [pattern for pattern in self._layout_map if _matches(pattern, key)]
        if len(matching) > 1:
            raise ValueError(f"Path '{key}' matches multiple layout specification keys: {matching}. Please make sure "
                             "each tensor/variable path only matches at most one layout specification key in the "
                             "LayoutMap.")
        return self._layout_map[matching[0]] if matching else None

    def __setitem__(self, key, layout):
        if not isinstance(key, str):
            raise ValueError(f"LayoutMap keys are weight paths or regexes (strings), got {key!r}")
        if key in self._layout_map:
            raise ValueError(f"{key} already exist in the LayoutMap with value {self._layout_map[key]}. Please make "
                             "sure to not use duplicated keys.")
        try:
            re.compile(key)
        except re.error as e:
            raise ValueError(f"LayoutMap key {key!r} is not a valid regular expression: {e}") from None
        if isinstance(layout, (tuple, list)):
            layout = TensorLayout(axes=layout, device_mesh=None)
        if not isinstance(layout, TensorLayout):
            raise ValueError(f"{layout} should be a TensorLayout type, got {type(layout)}")
        if layout.device_mesh is None and self._device_mesh is not None:
            layout.device_mesh = self._device_mesh
        elif layout.device_mesh is not None and layout.device_mesh is not self._device_mesh:
            raise ValueError(f"LayoutMap[{key!r}]: the layout's mesh {layout.device_mesh} is not the map's "
                             f"{self._device_mesh}")
        self._layout_map[key] = layout

    def __delitem__(self, key):
        return self._layout_map.pop(key)

    def __len__(self):
        return len(self._layout_map)

    def __iter__(self):
        return iter(self._layout_map)

    @property
    def device_mesh(self):
        return self._device_mesh

    # ---- mdtrain: resolving a model against the map --------------------------------------------
    def resolve(self, model):
        """Every weight of the built ``model`` with its layout, in ``model.weights`` order (a list of
        ``ResolvedWeight``). Raises ``ValueError`` for the strict-map cases in the module docstring."""
        if not getattr(model, "built", False):
            raise ValueError(f"LayoutMap: model '{getattr(model, 'name', model)}' is not built; give its input shape "
                             "(keras.Input or input_shape=) so its weights exist before they are laid out")
        mesh = self._device_mesh
        axis_size = dict(zip(mesh.axis_names, mesh.shape))
        prefix = f"{model.name}/"
        weights = list(model.weights)
        used = collections.Counter()
        resolved = []
        for w in weights:
            path, shape = str(w.path), tuple(int(n) for n in w.shape)
            key = self._key_for(path, prefix + path)
            axes = (None,) * len(shape)
            if key is not None:
                used[key] += 1
                axes = self._layout_map[key].axes
                if len(axes) != len(shape):
                    raise ValueError(f"LayoutMap[{key!r}] = {axes} has {len(axes)} entries, but weight '{path}' has "
                                     f"shape {shape} ({len(shape)} dimensions): give one mesh axis or None per "
                                     "dimension")
                for dim, (n, a) in enumerate(zip(shape, axes)):
                    if a is not None and n % axis_size[a]:
                        raise ValueError(f"LayoutMap[{key!r}] = {axes}: dimension {dim} of weight '{path}' (shape "
                                         f"{shape}) has {n} entries, not divisible by the {axis_size[a]} devices of "
                                         f"mesh axis '{a}' ({mesh})")
            shard = tuple(n // axis_size[a] if a is not None else n for n, a in zip(shape, axes))
            itemsize = w.dtype.size
            shard_bytes = itemsize
            for n in shard:
                shard_bytes *= n
            resolved.append(ResolvedWeight(path, shape, w.dtype.name, tuple(axes), key, shard, shard_bytes))
        unused = [k for k in self._layout_map if not used[k]]
        if unused:
            paths = ", ".join(str(w.path) for w in weights)
            raise ValueError(f"LayoutMap: key(s) {unused} match no weight of model '{model.name}' (weight paths: "
                             f"{paths}). Keras would replicate those weights silently; fix the key or delete it.")
        self._last_model = model
        return resolved

    def _key_for(self, path, full_path):
        exact = [k for k in (path, full_path) if k in self._layout_map]
        if exact:
            return exact[0]
        matching = [k for k in self._layout_map if _matches(k, path) or _matches(k, full_path)]
        if len(matching) > 1:
            raise ValueError(f"Weight '{path}' matches multiple layout specification keys: {matching}. Make sure each "
                             "weight path matches at most one key in the LayoutMap.")
        return matching[0] if matching else None

    def summary(self, model=None, print_fn=None):
        """Prints where each weight of ``model`` lives and its bytes per device, then each device's total
        (weights only: the optimizer's slots are laid out like their weight and add the same shares).
        ``model=None`` takes the model last compiled (resolved) with this map."""
        model = model if model is not None else self._last_model
        print_fn = print_fn or print
        mesh = self._device_mesh
        if model is None:
            lines = [f"LayoutMap on {mesh} (no model resolved yet: pass model= or compile one under the distribution)"]
            lines += [f"  {k!r}: {v.axes}" for k, v in self._layout_map.items()]
            print_fn("\n".join(lines))
            return
        rows = self.resolve(model)
        headers = ("Weight", "Shape", "Layout", "Shard shape", "Bytes / device")
        table = [(r.path, str(r.shape), _layout_text(r.axes), str(r.shard_shape), f"{r.shard_bytes:,}") for r in rows]
        widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h) for i, h in enumerate(headers)]
        line = "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()
        out = [f"Layout of model '{model.name}' on {mesh} ({mesh.devices.size} devices)", line, "-" * len(line)]
        out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
        per_device = sum(r.shard_bytes for r in rows)
        unsharded = sum(r.shard_bytes * _shard_count(r.axes, mesh) for r in rows)
        out.append("-" * len(line))
        out.append(f"Weights per device: {per_device:,} bytes (unsharded model: {unsharded:,} bytes; every device "
                   "holds one shard of each weight, so all devices hold the same amount)")
        print_fn("\n".join(out))


def _matches(pattern, path):
    try:
        return re.fullmatch(pattern, path) is not None
    except re.error:
        return False


def _layout_text(axes):
    return "replicated" if all(a is None for a in axes) else str(axes)


def _shard_count(axes, mesh):
    size = dict(zip(mesh.axis_names, mesh.shape))
    n = 1
    for a in axes:
        if a is not None:
            n *= size[a]
    return n
