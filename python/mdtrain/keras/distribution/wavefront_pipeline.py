"""keras.distribution.WavefrontPipeline: a deep recurrent stack cut into stages, one per device of the
mesh's pipe axis, with the sequence cut into time chunks: stage l runs chunk k as soon as stage l-1 sent
it, so the devices work on different chunks of the same batch at once (docs/wavefront.md).

Used like PipelineParallel: ``with WavefrontPipeline(mesh, time_chunk=8).scope(): model = ...;
model.compile(...)``, then ``fit`` / ``evaluate`` / ``predict`` unchanged (the model's optimizer takes
every step: its iterations, slots and checkpoints are the trained state). A sibling of PipelineParallel
rather than an option of it: PipelineParallel cuts the batch into micro-batches, the wavefront cuts
time (the time chunk plays the micro-batch's role)."""
import numpy as np

from mdtrain import _core
from mdtrain.keras.distribution.pipe_axis import _PipeAxisDistribution

__all__ = ["WavefrontPipeline"]


class WavefrontPipeline(_PipeAxisDistribution):
    """The wavefront pipeline over ``device_mesh``'s ``pipe_dim_name`` axis (logical CPU devices,
    one thread each), ``time_chunk`` steps per message.

    The model (Sequential, or Functional) must start with recurrent layers (SimpleRNN, LSTM, GRU; at
    least one per stage) with ``return_sequences=True``, stacked: each reads only the one before it;
    the layers after them (Dense, a last recurrent layer with ``return_sequences=False``, any graph
    in a Functional model, ...) run on the last stage. Training runs the
    wavefront; evaluate and predict run the whole model forward on one thread, as one device does."""

    def __init__(self, device_mesh, time_chunk, pipe_dim_name="pipe", auto_shard_dataset=True):
        super().__init__(device_mesh, None, auto_shard_dataset)
        if isinstance(time_chunk, bool) or not isinstance(time_chunk, (int, np.integer)) or time_chunk < 1:
            raise ValueError(f"time_chunk must be a positive integer (time steps per message), got {time_chunk!r}")
        self._set_pipe_axis(pipe_dim_name)
        if len(device_mesh.axis_names) != 1:
            raise ValueError(f"WavefrontPipeline needs a 1-D mesh with only the {pipe_dim_name!r} axis, got "
                             f"{list(device_mesh.axis_names)}")
        self._time_chunk = int(time_chunk)

    @property
    def time_chunk(self):
        return self._time_chunk

    def _check_layers(self, model):
        from mdtrain.keras import layers as L
        recurrent = tuple(getattr(L, n) for n in ("SimpleRNN", "LSTM", "GRU") if hasattr(L, n))
        for i, layer in enumerate(model.layers[:self._num_stages - 1]):
            if not isinstance(layer, recurrent) or not getattr(layer, "return_sequences", False):
                raise ValueError(f"WavefrontPipeline: layer '{layer.name}' (index {i}) would sit before the last of "
                                 f"{self._num_stages} stages, which must hold recurrent layers (SimpleRNN, LSTM, "
                                 "GRU) with return_sequences=True")
        if len(model.layers) < self._num_stages:
            raise ValueError(f"WavefrontPipeline: model '{model.name}' has {len(model.layers)} layers, fewer than "
                             f"its {self._num_stages} stages")

    def _model_core_arg(self, model):
        """Checks ``model``'s layers against the stages (when a model is compiled); the C++ strategy
        needs nothing from it."""
        if model is not None:
            self._check_layers(model)
        return None

    def _make_core(self, _):
        return _core.WavefrontStrategy(self.device_mesh._core, self._time_chunk, self._pipe_dim_name)

    def stage_starts(self, model):
        """The first layer index of each stage of ``model`` (once it has trained a step)."""
        return list(self._compiled_core(model).stage_starts())

    def __repr__(self):
        return f"<WavefrontPipeline device_mesh={self.device_mesh}, time_chunk={self._time_chunk}>"
