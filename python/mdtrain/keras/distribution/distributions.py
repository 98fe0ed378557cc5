"""keras.distribution's Distribution, DataParallel and ModelParallel, and the global distribution.

Keras 3's names and semantics (keras/src/distribution/distribution_lib.py), where Keras runs them only on
JAX. In mdtrain a distribution is also a ``tf.distribute.Strategy``: ``with dist.scope(): model = ...;
model.compile(...)`` and then ``fit``, or ``set_distribution(dist)`` for every model compiled afterwards.

- ``DataParallel`` replicates every weight over the mesh's first axis: it runs exactly as
  ``MirroredStrategy`` over the mesh's devices (``MultiWorkerMirroredStrategy`` when the process was
  started by an MPI launcher).
- ``ModelParallel`` splits the weights its ``LayoutMap`` names over the mesh's other axes (tensor
  parallelism: docs/model_parallel.md) and the batch over ``batch_dim_name``. The layouts are resolved
  against the model when it is compiled (the model must be built then), strictly: see ``LayoutMap``.
"""
import contextlib
import warnings
import weakref

import numpy as np

from mdtrain import _core
from mdtrain import distribute as _distribute
from mdtrain.keras.distribution.device_mesh import DeviceMesh, list_devices
from mdtrain.keras.distribution.layout_map import LayoutMap
from mdtrain.keras.distribution.tensor_layout import TensorLayout

__all__ = ["DataParallel", "Distribution", "ModelParallel", "distribution", "set_distribution"]

DEFAULT_BATCH_DIM_NAME = "batch"


class Distribution(_distribute.Strategy):
    """Base of the keras.distribution family: a device mesh, the name of its batch axis, and the
    layouts of data and weights on it."""

    def __init__(self, device_mesh, batch_dim_name=None, auto_shard_dataset=True):
        if not isinstance(device_mesh, DeviceMesh):
            raise ValueError(f"Expect `device_mesh` to be an instance of `DeviceMesh`. Received: "
                             f"device_mesh={device_mesh} (of type {type(device_mesh)})")
        if batch_dim_name is not None and batch_dim_name not in device_mesh.axis_names:
            raise ValueError(f"batch_dim_name={batch_dim_name!r} is not an axis of {device_mesh} (axes: "
                             f"{list(device_mesh.axis_names)})")
        self._device_mesh = device_mesh
        self._batch_dim_name = batch_dim_name
        self._auto_shard_dataset = auto_shard_dataset

    @property
    def device_mesh(self):
        return self._device_mesh

    @property
    def batch_dim_name(self):
        return self._batch_dim_name

    @property
    def auto_shard_dataset(self):
        return self._auto_shard_dataset

    @auto_shard_dataset.setter
    def auto_shard_dataset(self, value):
        self._auto_shard_dataset = value

    @property
    def num_processes(self):
        return self._core.num_workers

    @property
    def num_model_replicas(self):
        raise NotImplementedError

    def get_data_layout(self, data_shape):
        """Inputs are split along their first dimension over the batch axis."""
        spec = [None] * len(data_shape)
        spec[0] = self.batch_dim_name
        return TensorLayout(spec, self.device_mesh)

    def get_variable_layout(self, variable):
        if getattr(variable, "_layout", None) is not None:
            return variable._layout
        return TensorLayout([None] * len(variable.shape), self.device_mesh)

    def get_tensor_layout(self, path):
        return None

    def distribute_dataset(self, dataset):
        """The dataset unchanged: fit cuts each global batch across the replicas (and, with several
        processes, every process reads the same global batches and keeps its rows), so no sharding is
        needed here."""
        return dataset

    @contextlib.contextmanager
    def scope(self):
        """Makes this distribution current (Keras) and its strategy scope open (mdtrain): models
        created and compiled inside belong to it."""
        with super().scope():
            yield self

    def __repr__(self):
        return f"<{type(self).__name__} device_mesh={self.device_mesh}>"


class DataParallel(Distribution):
    """Data parallelism over a 1-D mesh (``device_mesh``), a list of ``devices``, or every device
    ``list_devices()`` returns. With a mesh of several axes the first is the batch axis, with a warning
    (as in Keras): the weights are replicated on every device."""

    def __init__(self, device_mesh=None, devices=None, auto_shard_dataset=True):
        if device_mesh is not None and devices is not None:
            raise ValueError("DataParallel: give device_mesh or devices, not both")
        if device_mesh is None:
            devices = np.array(devices if devices is not None else list_devices())
            device_mesh = DeviceMesh(shape=devices.shape, axis_names=[DEFAULT_BATCH_DIM_NAME], devices=devices)
        elif not isinstance(device_mesh, DeviceMesh):
            raise ValueError(f"Expect `mesh` to be an instance of `DeviceMesh`. Received: mesh={device_mesh} "
                             f"(of type {type(device_mesh)})")
        elif device_mesh.devices.ndim != 1:
            warnings.warn(f"Expect the input mesh to be 1D, but received mesh.devices.ndim={device_mesh.devices.ndim}. "
                          "The first axis will be used for data-parallel sharding.", stacklevel=2)
        super().__init__(device_mesh, device_mesh.axis_names[0], auto_shard_dataset)
        if _distribute._launched_by_mpi():
            self._replicas = _distribute.MultiWorkerMirroredStrategy()
        else:
            self._replicas = _distribute.MirroredStrategy(devices=[str(d) for d in device_mesh.devices.reshape(-1)])
        _distribute.Strategy.__init__(self, self._replicas._core)

    @property
    def num_model_replicas(self):
        return self._core.num_replicas_in_sync

    def _sync_workers(self, arrays):
        return self._replicas._sync_workers(arrays)


class _PerModelDistribution(Distribution):
    """A distribution whose C++ strategy depends on the model it trains (its weights' layouts, its
    stage cuts): each compiled model gets its own (``_core_for``, remembered for the model's reports),
    and before any, a placeholder made for no model answers questions about devices and replicas.
    Subclasses define ``_model_core_arg(model)`` (model None: the placeholder's) and ``_make_core(arg)``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._placeholder_core = None
        self._model_cores = weakref.WeakKeyDictionary()  # model -> its C++ strategy

    @property
    def _core(self):
        if self._placeholder_core is None:
            self._placeholder_core = self._make_core(self._model_core_arg(None))
        return self._placeholder_core

    def _core_for(self, model):
        core = self._make_core(self._model_core_arg(model))
        self._model_cores[model] = core
        return core

    def _compiled_core(self, model):
        core = self._model_cores.get(model)
        if core is None:
            raise ValueError(f"model '{getattr(model, 'name', model)}' was not compiled under this "
                             f"{type(self).__name__}")
        return core


class ModelParallel(_PerModelDistribution):
    """Weights split over the mesh as ``layout_map`` says (tensor parallelism), the batch split over
    ``batch_dim_name`` (default: the mesh's first axis). See docs/model_parallel.md for which layers
    and layouts are supported and the communication each brings."""

    def __init__(self, *, layout_map=None, batch_dim_name=None, auto_shard_dataset=True, **kwargs):
        kwargs.pop("device_mesh", None)  # Keras accepted it once; the layout map's mesh is the one used
        if kwargs:
            raise TypeError(f"ModelParallel got unexpected keyword arguments {sorted(kwargs)}")
        if layout_map is None:
            raise ValueError("You must specify a layout_map argument.")
        if not isinstance(layout_map, LayoutMap):
            raise ValueError(f"Argument `layout_map` must be a `LayoutMap` instance. Received: layout_map={layout_map}")
        mesh = layout_map.device_mesh
        super().__init__(mesh, batch_dim_name or mesh.axis_names[0], auto_shard_dataset)
        self._layout_map = layout_map

    @property
    def layout_map(self):
        return self._layout_map

    @property
    def num_model_replicas(self):
        return int(self.device_mesh.shape[list(self.device_mesh.axis_names).index(self.batch_dim_name)])

    def get_variable_layout(self, variable):
        if getattr(variable, "_layout", None) is not None:
            return variable._layout
        layout = self._layout_map[variable.path]
        return layout if layout is not None else super().get_variable_layout(variable)

    def get_tensor_layout(self, path):
        return self._layout_map[path]

    @property
    def num_replicas_in_sync(self):
        """Model replicas training on different rows: the size of the batch axis."""
        return self.num_model_replicas

    def run(self, fn, args=(), kwargs=None):
        raise NotImplementedError("strategy.run (custom training loops) under ModelParallel is not supported: a "
                                  "replica's tape would see only its shard of each split weight. Train with "
                                  "model.fit / evaluate / predict, or use MirroredStrategy for custom loops.")

    def memory_per_device(self, model):
        """Measured bytes each device holds for ``model`` after it trained at least one step: a list in
        mesh order of ``{"device", "weights", "optimizer_state"}`` (the allocations, not shapes)."""
        core = self._compiled_core(model)
        devices = [str(d) for d in self.device_mesh.devices.reshape(-1)]
        return [{"device": d, "weights": int(w), "optimizer_state": int(o)}
                for d, w, o in zip(devices, core.parameter_bytes_per_device(), core.optimizer_state_bytes_per_device())]

    def model_axis_bytes_per_step(self, model):
        """Bytes each device sent and received over the model axis in ``model``'s last training step."""
        return [int(b) for b in self._compiled_core(model).model_axis_bytes_per_step()]

    def _model_core_arg(self, model):
        """The weights' layouts of ``model`` resolved against the map (strictly); before a model is
        compiled none (every weight replicated)."""
        if model is None:
            return {}
        resolved = self._layout_map.resolve(model)
        return {r.path: list(r.axes) for r in resolved if any(a is not None for a in r.axes)}

    def _make_core(self, layouts):
        if not hasattr(_core, "ModelParallelStrategy"):
            raise NotImplementedError("ModelParallel needs mdtrain's tensor-parallel core, which this build lacks")
        return _core.ModelParallelStrategy(self.device_mesh._core, layouts, self.batch_dim_name)

    def __repr__(self):
        return f"<ModelParallel device_mesh={self.device_mesh}, batch_dim_name={self.batch_dim_name!r}>"


def distribution():
    """The distribution set by ``set_distribution`` (None if none)."""
    return _distribute._global_strategy()


def set_distribution(value):
    """Makes ``value`` (a ``Distribution``, or None to clear) the strategy of every model created or
    compiled outside any scope from now on."""
    if value is not None and not isinstance(value, Distribution):
        raise ValueError(f"set_distribution expects a keras.distribution.Distribution or None, got {value!r}")
    _distribute._set_global_strategy(value)
