"""keras.distribution.PipelineParallel: the model's layers cut into stages on the devices of the
mesh's pipe axis, each global batch cut into micro-batches that flow through the stages by a
schedule ("gpipe" or "1f1b"); optionally several pipelines over a batch axis (docs/pipeline.md).
The mesh's devices are logical CPU devices or GPUs ("gpu:0", "gpu:1", ...: each stage on its GPU,
activations and gradients over NCCL), not a mix.

Not a Keras API (Keras 3 has no pipeline parallelism); named in its family:
``with PipelineParallel(mesh, num_microbatches=8).scope(): model = ...; model.compile(...)``, then
``fit`` / ``evaluate`` / ``predict`` unchanged."""
import hashlib
import warnings

from mdtrain import _core
from mdtrain.keras.distribution.pipe_axis import _PipeAxisDistribution

__all__ = ["PipelineParallel"]

SCHEDULES = ("gpipe", "1f1b")


# The core's limit (strategy/pipeline_schedule.h kMaxMicrobatches), checked here first to name the argument.
MAX_MICROBATCHES = 4096


def bubble_fraction(stages, num_microbatches):
    """The idle share of a synchronous pipeline step with equal stages: (p - 1) / (m + p - 1)."""
    return (stages - 1) / (num_microbatches + stages - 1)


class PipelineParallel(_PipeAxisDistribution):
    """Pipeline parallelism over ``device_mesh``'s ``pipe_dim_name`` axis.

    ``stages``: None (cut at the model's ``PipelineSplit`` layers, or, without any, as
    ``"balance_params"``), a list of the first layer of stages 1..p-1 (indices into
    ``model.layers``, or layer names), ``"balance_params"``
    (by parameter counts), or ``"balance_time"`` (by each layer's forward + backward time, measured
    on a copy of the model when the first step runs). Both take the contiguous cut whose costliest
    stage costs least, then the most even one. ``batch_dim_name`` names a data-parallel axis: one pipeline per position on it.
    A Functional model is cut the same ways, at the points of its graph where exactly one tensor
    crosses (between residual blocks, not inside one: a stage that would start inside a block is a
    ValueError naming the layer); a block inside a stage runs whole there.
    Fewer micro-batches than stages is a ValueError here, before any training; fewer than
    4 x stages warns with the bubble fraction it costs.

    ``recompute``: False (the default) keeps each in-flight micro-batch's activations until its backward
    (a copy of the stage's layer state per micro-batch in flight: m under GPipe, at most p - s on stage s
    under 1F1B); True keeps only their inputs and runs each micro-batch's forward again before its
    backward (less memory, one more forward per micro-batch). Both give bitwise the same weights."""

    def __init__(self, device_mesh, num_microbatches, schedule="1f1b", pipe_dim_name="pipe", batch_dim_name=None,
                 stages=None, auto_shard_dataset=True, recompute=False):
        if not isinstance(recompute, bool):
            raise TypeError(f"recompute must be a bool, got {recompute!r} ({type(recompute).__name__})")
        super().__init__(device_mesh, batch_dim_name, auto_shard_dataset)
        self._set_pipe_axis(pipe_dim_name)
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        p = self._num_stages
        if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int) or num_microbatches < p:
            raise ValueError(f"num_microbatches={num_microbatches!r} must be an int >= the number of stages ({p}): "
                             "with fewer micro-batches some stages would never overlap (other libraries hang here)")
        if num_microbatches > MAX_MICROBATCHES:
            raise ValueError(f"num_microbatches={num_microbatches} exceeds the limit of {MAX_MICROBATCHES}: the "
                             "schedule and each micro-batch's state are made before any batch is seen, and a batch "
                             f"would need more than {MAX_MICROBATCHES} rows for every micro-batch to have one")
        if not (stages is None or stages in ("balance_params", "balance_time") or
                (isinstance(stages, (list, tuple)) and
                 all(isinstance(i, (int, str)) and not isinstance(i, bool) for i in stages))):
            raise ValueError(f"stages must be None, 'balance_params', 'balance_time' or a list of layer indices or "
                             f"names, got {stages!r}")
        if isinstance(stages, (list, tuple)) and len(stages) != p - 1:
            raise ValueError(f"stages: {p} stages need the first layer index of stages 1..{p - 1} ({p - 1} indices), "
                             f"got {list(stages)}")
        if num_microbatches < 4 * p:
            warnings.warn(f"PipelineParallel: {num_microbatches} micro-batches for {p} stages leave each device idle "
                          f"for about {bubble_fraction(p, num_microbatches):.0%} of a step (the bubble, "
                          f"(p-1)/(m+p-1)); use at least {4 * p} micro-batches to bring it under "
                          f"{bubble_fraction(p, 4 * p):.0%}", stacklevel=2)
        self._num_microbatches = num_microbatches
        self._schedule = schedule
        self._recompute = recompute
        self._stages = list(stages) if isinstance(stages, (list, tuple)) else stages

    @property
    def num_microbatches(self):
        return self._num_microbatches

    @property
    def schedule(self):
        return self._schedule

    @property
    def recompute(self):
        return self._recompute

    def _model_core_arg(self, model):
        """The first layer of stages 1..p-1 for ``model`` ([]: cut by the C++ strategy; also before a
        model is compiled)."""
        return [] if model is None else self._stage_starts(model)

    def _stage_starts(self, model):
        if isinstance(self._stages, list):
            index = {layer.name: i for i, layer in enumerate(model.layers)}
            missing = [s for s in self._stages if isinstance(s, str) and s not in index]
            if missing:
                raise ValueError(f"stages: model '{model.name}' has no layer named {missing[0]!r}")
            return [index[s] if isinstance(s, str) else s for s in self._stages]
        if self._stages in ("balance_params", "balance_time"):
            return []
        from mdtrain.keras.layers import PipelineSplit
        splits = [i for i, layer in enumerate(model.layers) if isinstance(layer, PipelineSplit)]
        if not splits:
            return []
        if len(splits) != self._num_stages - 1:
            raise ValueError(f"model '{model.name}' has {len(splits)} PipelineSplit layers but the mesh has "
                             f"{self._num_stages} stages (it needs {self._num_stages - 1} splits)")
        return splits

    def _make_core(self, stage_starts):
        return _core.PipelineStrategy(self.device_mesh._core, self._num_microbatches, self._schedule,
                                      stage_starts, self._pipe_dim_name, self.batch_dim_name,
                                      self._stages == "balance_time", self._recompute)

    def gather_stages(self, model):
        """With the pipe axis across MPI workers: sends every stage's weights and optimizer slots
        of ``model`` to the other workers, so that ``get_weights``, ``save`` and the optimizer state
        are whole on each. ``fit`` does it at the end of every epoch, ``evaluate``, ``predict`` and
        ``train_on_batch`` too, and the callbacks that save mid-epoch before they save; between
        those points each worker keeps only its own stage current. Collective: every worker must
        call it at the same point (a worker left out waits for the others forever); a worker that
        has not trained ``model`` while the others have is an error on all. No-op otherwise."""
        core = self._model_cores.get(model)
        if core is not None:
            core.gather_stages()

    def _refresh_model(self, model):
        """Before get_weights / save / evaluate / predict: refuses to hand out the other workers'
        stages as they were at the last gather (the model's reads call this on one worker only,
        so it cannot gather itself)."""
        core = self._model_cores.get(model)
        if core is not None and not core.stages_whole():
            raise ValueError(
                f"model '{model.name}': under PipelineParallel with the pipe axis across workers each worker keeps "
                "only its own stage current during an epoch; the other stages are gathered at the end of each "
                "epoch and before evaluate / predict. To read or save the whole model mid-epoch, call "
                "distribution.gather_stages(model) on every worker at the same point first (e.g. in "
                "on_train_batch_end of a callback every worker runs), or use ModelCheckpoint / BackupAndRestore "
                "with an integer save_freq, which do that.")

    def _fit_agreement(self, model, callbacks):
        """Extra fields fit checks every worker agrees on: the callbacks that gather the stages
        mid-epoch (a collective) must be the same on every worker, else fit refuses to start."""
        if not self._core.pipe_across_workers:
            return {}
        from mdtrain.keras import callbacks as _callbacks
        savers = sorted((type(c).__name__, int(c.save_freq)) for c in (callbacks or [])
                        if isinstance(c, (_callbacks.ModelCheckpoint, _callbacks.BackupAndRestore))
                        and c.save_freq != "epoch")
        digest = hashlib.sha256(repr(savers).encode()).digest()[:6] if savers else bytes(6)
        return {"mid_epoch_savers (ModelCheckpoint / BackupAndRestore with an integer save_freq gather the stages, "
                "a collective: give them to every worker)": int.from_bytes(digest, "little")}

    def stage_report(self, model):
        """Per device of this worker in mesh order, once ``model`` trained: its stage's first layer, seconds busy
        (forward + backward), ``forward`` (busy's forward part: the last stage's includes the loss, a
        recomputed forward counts as backward) and idle (the bubble: the rest of the pipeline's span, from the step's start
        to the end of the last device's schedule; the update after it is not counted) since the profile
        was reset,
        ``peak_stash_bytes``: the peak bytes of micro-batch inputs it held stashed in the last step, and
        ``peak_activation_bytes``: that plus the bytes its layers' saved state holds (activations kept for
        backward, outputs, backward scratch) for every micro-batch that can be in flight at once (with
        ``recompute=True``: for one), measured as what their calls left allocated. With the pipe axis
        across workers, ``gathers``: how many times the stages were gathered (gather_stages), and
        ``stages_whole``: whether this worker holds every stage's current weights now."""
        core = self._compiled_core(model)
        starts = list(core.stage_starts())
        # The core reports this worker's devices only: label them with this worker's part of the mesh.
        busy = list(core.busy_seconds())
        first = core.worker_index * len(busy)
        devices = [str(d) for d in self.device_mesh.devices.reshape(-1)][first:first + len(busy)]
        return {"stage_starts": starts, "gathers": int(core.gathers()), "stages_whole": bool(core.stages_whole()),
                "devices": [{"device": d, "busy": float(b), "forward": float(f), "idle": float(i),
                             "peak_stash_bytes": int(s), "peak_activation_bytes": int(a)}
                            for d, b, f, i, s, a in zip(devices, busy, core.forward_seconds(), core.idle_seconds(),
                                                        core.peak_stash_bytes(), core.peak_activation_bytes())]}

    def __repr__(self):
        return (f"<PipelineParallel device_mesh={self.device_mesh}, num_microbatches={self._num_microbatches}, "
                f"schedule={self._schedule!r}, recompute={self._recompute}>")
