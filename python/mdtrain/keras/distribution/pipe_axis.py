"""The base of the distributions that cut a model into stages along a mesh's pipe axis
(PipelineParallel, WavefrontPipeline): the pipe axis's name, its number of stages, and the model
replicas (one pipeline per position on the batch axis, if any)."""
from mdtrain.keras.distribution.distributions import _PerModelDistribution


class _PipeAxisDistribution(_PerModelDistribution):
    """A per-model distribution with one stage per device of ``pipe_dim_name``. Subclasses call
    ``_set_pipe_axis`` in their ``__init__`` where they check their arguments."""

    def _set_pipe_axis(self, pipe_dim_name):
        axes = list(self.device_mesh.axis_names)
        if pipe_dim_name not in axes:
            raise ValueError(f"pipe_dim_name={pipe_dim_name!r} is not an axis of {self.device_mesh} (axes: {axes})")
        self._pipe_dim_name = pipe_dim_name
        self._num_stages = int(self.device_mesh.shape[axes.index(pipe_dim_name)])

    @property
    def pipe_dim_name(self):
        return self._pipe_dim_name

    @property
    def num_stages(self):
        return self._num_stages

    @property
    def num_model_replicas(self):
        if self.batch_dim_name is None:
            return 1
        return int(self.device_mesh.shape[list(self.device_mesh.axis_names).index(self.batch_dim_name)])

    @property
    def num_replicas_in_sync(self):
        return self.num_model_replicas

    def run(self, fn, args=(), kwargs=None):
        raise NotImplementedError(f"strategy.run (custom training loops) under {type(self).__name__} is not "
                                  "supported: train with model.fit / evaluate / predict")
