"""The measured costs of one model: per layer, forward and backward seconds as a function of the
rows it runs on, FLOPs, and parameter and activation bytes.

The times come from the core's own layer timer, the one PipelineParallel(stages="balance_time")
cuts stages by (measure_layer_times in cpp/mdtrain/strategy/pipeline_strategy.h): forward +
backward of each layer on a copy of the model, the median of 5 single timings. It is run at two
row counts and fitted per layer to a + b·rows, so the planner can cost any per-device batch. The timer gives
forward + backward together; they are split by the layer's FLOP ratio (a layer with a kernel:
backward = 2 × forward, input and weight gradients; without: backward = forward). That split is
an assumption, not a measurement."""
import dataclasses

import numpy as np

BYTES_PER_VALUE = 4  # float32: the core trains in float32

# Optimizer slots per trainable value (Keras's optimizers as the core implements them).
_SLOTS = {"adam": 2, "adamw": 2, "adamax": 2, "nadam": 2, "rmsprop": 1, "adagrad": 1, "adadelta": 2,
          "ftrl": 2, "lion": 1}


@dataclasses.dataclass(frozen=True)
class LayerCost:
    name: str
    kind: str                    # the layer's class name
    params: int                  # trainable values
    activation_values: int       # output values per row (stashed for backward)
    forward_flops: float         # per row
    backward_flops: float        # per row
    fixed_s: float               # forward + backward seconds per call, independent of rows
    per_row_s: float             # forward + backward seconds per row
    backward_share: float        # the share of the measured time attributed to backward

    def time(self, rows):
        """Forward + backward seconds on `rows` rows, on the machine profiled."""
        return self.fixed_s + self.per_row_s * rows if rows > 0 else 0.0

    def forward_time(self, rows):
        return self.time(rows) * (1.0 - self.backward_share)

    def backward_time(self, rows):
        return self.time(rows) * self.backward_share

    @property
    def param_bytes(self):
        return self.params * BYTES_PER_VALUE


@dataclasses.dataclass(frozen=True)
class ModelProfile:
    """A model's layers' costs, measured on this machine (profile_model)."""
    name: str
    layers: tuple
    input_values: int            # per row
    optimizer: str
    optimizer_slots: int
    rows_measured: tuple
    threads: int                 # the core's CPU threads per op while timed (1: as each of several replicas)
    update_s: float = None       # one optimizer update of every trainable value, measured (None: not measured)
    step_overhead_s: float = 0.0  # per step, besides the layers: batch gather, loss, hand-offs (measured)

    @property
    def params(self):
        return sum(layer.params for layer in self.layers)

    @property
    def param_bytes(self):
        return self.params * BYTES_PER_VALUE

    @property
    def flops_per_row(self):
        return sum(layer.forward_flops + layer.backward_flops for layer in self.layers)

    def time(self, rows):
        return sum(layer.time(rows) for layer in self.layers)


def _kernel_values(layer):
    total = 0
    for v in layer.trainable_variables:
        shape = tuple(v.shape)
        if len(shape) >= 2:
            total += int(np.prod(shape))
    return total


def _layer_flops(layer, out_values):
    """Forward FLOPs per row: 2 per multiply-add of each kernel value at each output position
    (Dense: 2·in·units; Conv2D: 2·k·k·cin·cout·H·W), else one per output value."""
    kernel = _kernel_values(layer)
    out_shape = tuple(layer.output_shape[1:]) if layer.output_shape else ()
    if kernel:
        positions = int(np.prod(out_shape[:-1])) if len(out_shape) > 1 else 1
        return 2.0 * kernel * positions, 2.0
    return float(out_values), 1.0


def check_model(model):
    """ValueError unless `model` is a built Sequential model (what the profiler can time)."""
    built = getattr(model, "built", False)
    if not built or getattr(model, "_core", None) is None:
        raise ValueError(f"plan: model '{getattr(model, 'name', model)}' is not built: build it (give the first layer "
                         f"an input_shape, call model.build(...) or fit it once) before planning")
    if getattr(model, "_graph", None) is not None:
        raise ValueError(f"plan: model '{model.name}' is a functional model; the planner profiles Sequential "
                         f"models only so far (its layer timer is the pipeline's, which times a layer stack)")


def measure_step_costs(model, profile, rows=16, steps=20, repeats=3, threads=1):
    """The optimizer update and the rest of a step (batch gather, loss, thread hand-offs) that the
    layer timer does not see, from short fits of a copy of `model` (same layers and optimizer
    configuration; the model itself is not trained) on one device: the engine's own profile
    (step_time_breakdown) gives the update; compute minus the layers' time at `rows` rows is the
    overhead (assumed not to grow with rows). Returns (update_s, overhead_s)."""
    import os
    import tempfile

    from mdtrain import _core, keras
    with tempfile.TemporaryDirectory() as tmp:  # the copy: saved and loaded, compiled as the model is
        path = os.path.join(tmp, "model.mdtrain")
        model.save(path)
        copy = keras.models.load_model(path, compile=False)
    opt = model.optimizer
    copy.compile(optimizer=type(opt).from_config(opt.get_config()), loss=model.loss)
    x = np.zeros((rows * steps,) + tuple(model.input_shape[1:]), dtype=np.float32)
    loss = model.loss
    sparse = "sparse" in (loss if isinstance(loss, str) else type(loss).__name__).lower()
    y_shape = () if sparse else tuple(copy.output_shape[1:])
    y = np.zeros((rows * steps,) + y_shape, dtype=np.float32)
    before = _core.cpu_thread_count()
    if threads is not None:
        _core.set_cpu_threads(threads)
    try:
        copy.fit(x[:rows * 3], y[:rows * 3], batch_size=rows, epochs=1, verbose=0)  # warm-up
        best = None
        for _ in range(repeats):
            copy._core.reset_profile()
            copy.fit(x, y, batch_size=rows, epochs=1, verbose=0, shuffle=False)
            b = copy.step_time_breakdown()
            if best is None or b["step"] < best["step"]:
                best = b
    finally:
        _core.set_cpu_threads(before)
    return best["update"], max(0.0, best["compute"] - profile.time(rows))


def _median_layer_times(core, model, rows, repeats):
    """Seconds per layer, the median of `repeats` single timings: a sustained step pays the
    typical time, not the best (the timer's own best-of-k picks a moment with a free core, which on
    a loaded machine is far from what a step gets)."""
    runs = [core.measure_layer_times(model._core, rows, 1) for _ in range(repeats)]
    return np.median(np.asarray(runs, dtype=np.float64), axis=0) * 1e-9


def profile_model(model, rows=(16, 128), repeats=5, threads=1, step_costs=True):
    """Times `model`'s layers on this machine (on a copy: the model's weights and statistics are
    not touched) at each of `rows` and fits each layer's time to a + b·rows. `threads`: the core's
    threads per op while timing: 1 is what each replica gets when several run in one process (the
    executor's ThreadTeam), None every core (one replica alone)."""
    from mdtrain import _core
    check_model(model)
    r0, r1 = rows
    before = _core.cpu_thread_count()
    if threads is not None:
        _core.set_cpu_threads(threads)
    try:
        t0 = _median_layer_times(_core, model, r0, repeats)
        t1 = _median_layer_times(_core, model, r1, repeats)
        threads = _core.cpu_thread_count()
    finally:
        _core.set_cpu_threads(before)
    per_row = np.maximum(0.0, (t1 - t0) / (r1 - r0))
    fixed = np.maximum(0.0, t0 - per_row * r0)
    layers = []
    for i, layer in enumerate(model.layers):
        out_values = int(np.prod(layer.output_shape[1:])) if layer.output_shape else 0
        fwd, ratio = _layer_flops(layer, out_values)
        params = int(sum(int(np.prod(tuple(v.shape))) for v in layer.trainable_variables))
        layers.append(LayerCost(name=layer.name, kind=type(layer).__name__, params=params,
                                activation_values=out_values, forward_flops=fwd, backward_flops=fwd * ratio,
                                fixed_s=float(fixed[i]), per_row_s=float(per_row[i]),
                                backward_share=ratio / (1.0 + ratio)))
    opt = getattr(model, "optimizer", None)
    opt_name = type(opt).__name__.lower() if opt is not None else "sgd"
    slots = _SLOTS.get(opt_name, 0)
    if opt_name == "sgd" and getattr(opt, "momentum", 0):
        slots = 1
    input_values = int(np.prod(model.input_shape[1:]))
    prof = ModelProfile(name=model.name, layers=tuple(layers), input_values=input_values, optimizer=opt_name,
                        optimizer_slots=slots, rows_measured=(r0, r1), threads=threads)
    if step_costs and opt is not None and model.loss is not None:
        update, overhead = measure_step_costs(model, prof, rows=r0, threads=threads)
        prof = dataclasses.replace(prof, update_s=update, step_overhead_s=overhead)
    return prof
