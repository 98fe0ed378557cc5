"""keras.distribution.WavefrontPipeline: a deep recurrent stack cut into stages, one per device of the
mesh's pipe axis, with the sequence cut into time chunks: stage l runs chunk k as soon as stage l-1 sent
it, so the devices work on different chunks of the same batch at once (docs/wavefront.md).

A sibling of PipelineParallel rather than a PipelineParallel option: PipelineParallel cuts the batch
into micro-batches and trains through ``fit``; the wavefront cuts time and, for now, trains through its
own ``train_on_batch`` / ``fit`` (the model is compiled as usual, without a distribution scope, and this
object drives its steps; the model's own ``fit`` still trains on one device)."""
import numpy as np

from mdtrain import _core

__all__ = ["WavefrontPipeline"]


class WavefrontPipeline:
    """The wavefront pipeline over ``device_mesh``'s ``pipe_dim_name`` axis (logical CPU devices,
    one thread each), ``time_chunk`` steps per message.

    The model must be a compiled Sequential whose leading layers (at least one per stage) are
    recurrent layers (SimpleRNN, LSTM, GRU) with ``return_sequences=True``; the layers after them
    (Dense, a last recurrent layer with ``return_sequences=False``, ...) run on the last stage."""

    def __init__(self, device_mesh, time_chunk, pipe_dim_name="pipe"):
        if isinstance(time_chunk, bool) or not isinstance(time_chunk, (int, np.integer)) or time_chunk < 1:
            raise ValueError(f"time_chunk must be a positive integer (time steps per message), got {time_chunk!r}")
        if pipe_dim_name not in device_mesh.axis_names:
            raise ValueError(f"pipe_dim_name={pipe_dim_name!r} is not an axis of {device_mesh} (axes: "
                             f"{list(device_mesh.axis_names)})")
        if len(device_mesh.axis_names) != 1:
            raise ValueError(f"WavefrontPipeline needs a 1-D mesh with only the {pipe_dim_name!r} axis, got "
                             f"{list(device_mesh.axis_names)}")
        self.device_mesh = device_mesh
        self.time_chunk = int(time_chunk)
        self.pipe_dim_name = pipe_dim_name
        self.num_stages = int(device_mesh.shape[0])
        self._executors = {}

    def _check_layers(self, model):
        from mdtrain.keras import layers as L
        recurrent = tuple(getattr(L, n) for n in ("SimpleRNN", "LSTM", "GRU") if hasattr(L, n))
        for i, layer in enumerate(model.layers[:self.num_stages - 1]):
            if not isinstance(layer, recurrent) or not getattr(layer, "return_sequences", False):
                raise ValueError(f"WavefrontPipeline: layer '{layer.name}' (index {i}) would sit before the last of "
                                 f"{self.num_stages} stages, which must hold recurrent layers (SimpleRNN, LSTM, "
                                 "GRU) with return_sequences=True")

    def _executor(self, model):
        ex = self._executors.get(id(model))
        if ex is None or ex[0] is not model:
            if getattr(model, "_core", None) is None or not model._core.compiled:
                raise ValueError(f"model '{model.name}' must be built and compiled before WavefrontPipeline trains it")
            self._check_layers(model)
            ex = (model, _core.WavefrontExecutor(model._core, self.num_stages, self.time_chunk))
            self._executors[id(model)] = ex
        return ex[1]

    def train_on_batch(self, model, x, y):
        """One optimizer step of ``model`` on (x, y) through the wavefront; returns the loss."""
        return float(self._executor(model).train_step(np.ascontiguousarray(x), np.ascontiguousarray(y)))

    def fit(self, model, x, y, batch_size=32, epochs=1):
        """Epochs of train_on_batch over (x, y) in order (no shuffling); returns {"loss": [per-epoch mean]}."""
        losses = []
        n = len(x)
        for _ in range(epochs):
            total, count = 0.0, 0
            for start in range(0, n, batch_size):
                stop = min(n, start + batch_size)
                total += self.train_on_batch(model, x[start:stop], y[start:stop]) * (stop - start)
                count += stop - start
            losses.append(total / count)
        return {"loss": losses}

    def stage_starts(self, model):
        """The first layer index of each stage."""
        return list(self._executor(model).stage_starts())

    def __repr__(self):
        return f"<WavefrontPipeline device_mesh={self.device_mesh}, time_chunk={self.time_chunk}>"
