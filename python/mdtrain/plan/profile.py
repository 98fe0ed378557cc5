"""The measured costs of one model: per layer, forward and backward seconds as a function of the
rows it runs on, FLOPs, and parameter and activation bytes.

The times come from the core's own layer timer, the one PipelineParallel(stages="balance_time")
cuts stages by (measure_layer_times in cpp/mdtrain/strategy/pipeline_strategy.h): forward +
backward of each layer on a copy of the model, the median of at least 5 single timings. It is run
at every power of two from 1 row up to the largest batch a plan gives one device, and a layer's
time at other row counts is interpolated piecewise-linearly between those points: a layer's time
is not linear in rows (BLAS kernels change blocking, small calls are dominated by fixed costs), so
a two-point a + b·rows fit of 16 and 128 rows extrapolated to 2-8-row micro-batches was a guess
exactly where pipelines need a measurement. Profiles without points (synthetic or published ones)
keep a + b·rows. Each point is timed twice: alone, and while every other core runs its own copy of
the model through the same timer (`shared`), which is what a device's layer costs when several
devices compute at once and share the memory bandwidth and caches (the replay uses it for the part
of a task that overlaps another core's compute: simulate.py). The one-thread profile also times
each row count as a GPipe stage runs it, several micro-batches held at once (`in_flight_points`:
a pipeline stage's time per micro-batch, LayerCost.in_flight_factor). The timer gives forward + backward
together; they are split by the layer's FLOP ratio (a layer with a kernel:
backward = 2 × forward, input and weight gradients; without: backward = forward). That split is
an assumption, not a measurement."""
import dataclasses
import os
import threading
import time

import numpy as np

from mdtrain.plan.core_threads import core_threads
from mdtrain.plan.interpolate import piecewise_linear

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
    # Measured (rows, seconds) points, rows ascending: time() interpolates between them; empty:
    # a + b·rows from fixed_s and per_row_s.
    points: tuple = ()
    # The same rows' seconds while every core of the machine ran a copy at once (empty: not
    # measured; the replay then uses the alone time throughout).
    shared_points: tuple = ()
    # ((rows, in_flight, seconds per micro-batch), ...): timed as a GPipe stage runs `in_flight`
    # micro-batches of `rows` rows, every forward then every backward (empty: not measured, no
    # in-flight cost).
    in_flight_points: tuple = ()

    def time(self, rows, shared=False, in_flight=1):
        """Forward + backward seconds on `rows` rows, on the machine profiled; `shared`: while
        the other cores compute too (the alone time when that was not measured); `in_flight`:
        per micro-batch when a stage holds that many micro-batches' activations at once
        (in_flight_factor)."""
        if rows <= 0:
            return 0.0
        points = self.shared_points if shared and self.shared_points else self.points
        if not points:
            return self.fixed_s + self.per_row_s * rows
        return piecewise_linear(points, rows) * self.in_flight_factor(rows, in_flight)

    def in_flight_factor(self, rows, in_flight):
        """How much slower (or faster) a micro-batch of `rows` rows runs with `in_flight`
        micro-batches held at once than alone: the in-flight point's time over the alone point's at
        the measured row count nearest `rows`; for fewer micro-batches in flight than measured,
        linearly in their count from 1 (one in flight: 1), for more the measured factor (the
        activations were already out of cache). Below 1 too: micro-batches run back to back
        through the same weights, and the heavy MLP's 16 x 4 rows held read 0.80-0.91x its layers'
        4 rows alone (its GPipe rows were predicted 25-30 % over with the factor held at 1)."""
        if in_flight <= 1 or not self.in_flight_points:
            return 1.0
        alone = dict(self.points)
        measured = [(r, k, t / alone[r]) for r, k, t in self.in_flight_points if alone.get(r)]
        if not measured:
            return 1.0
        xs = [r for r, _, _ in measured]
        at = int(np.clip(np.searchsorted(xs, rows), 0, len(xs) - 1))
        if at > 0 and xs[at] != rows and abs(xs[at - 1] - rows) < abs(xs[at] - rows):
            at -= 1
        _, k, ratio = measured[at]
        return 1.0 + (ratio - 1.0) * min(1.0, (in_flight - 1) / max(1, k - 1))

    def forward_time(self, rows, shared=False, in_flight=1):
        return self.time(rows, shared, in_flight) * (1.0 - self.backward_share)

    def backward_time(self, rows, shared=False, in_flight=1):
        return self.time(rows, shared, in_flight) * self.backward_share

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
    # The same while every other core fits a copy of its own (None: not measured; measure_step_costs)
    update_shared_s: float = None
    step_overhead_s: float = 0.0  # per step, besides the layers: batch gather, loss, hand-offs (measured)
    shared_by: int = 1           # how many copies ran at once for the layers' shared points (1: none)

    @property
    def params(self):
        return sum(layer.params for layer in self.layers)

    @property
    def param_bytes(self):
        return self.params * BYTES_PER_VALUE

    @property
    def flops_per_row(self):
        return sum(layer.forward_flops + layer.backward_flops for layer in self.layers)

    def time(self, rows, shared=False):
        return sum(layer.time(rows, shared) for layer in self.layers)


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
    if any(d is None for d in model.input_shape[1:]):
        raise ValueError(f"plan: model '{model.name}' takes inputs of variable length {model.input_shape}; the "
                         "planner times fixed sizes: plan a copy built for a typical length (keras.Input(shape=(128,)))")
    if getattr(model, "_graph", None) is not None:
        raise ValueError(f"plan: model '{model.name}' is a functional model; the planner profiles Sequential "
                         f"models only so far (its layer timer is the pipeline's, which times a layer stack)")


def _compiled_copy(model):
    """A copy of `model` (same layers, weights and optimizer configuration), compiled as it is:
    what the step-cost fits train, so the model itself is not trained."""
    import tempfile

    from mdtrain import keras
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.mdtrain")
        model.save(path)
        copy = keras.models.load_model(path, compile=False)
    opt = model.optimizer
    copy.compile(optimizer=type(opt).from_config(opt.get_config()), loss=model.loss)
    return copy


def _zero_batches(model, rows):
    """Inputs and targets of zeros, `rows` of each, shaped for `model` and its loss."""
    x = np.zeros((rows,) + tuple(model.input_shape[1:]), dtype=np.float32)
    loss = model.loss
    # A compiled loss keeps its Keras name (a string given to compile becomes a Loss named after it).
    name = loss if isinstance(loss, str) else getattr(loss, "name", None) or type(loss).__name__
    sparse = "sparse" in str(name).lower()
    y_shape = () if sparse else tuple(model.output_shape[1:])
    return x, np.zeros((rows,) + y_shape, dtype=np.float32)


def measure_step_costs(model, profile, rows=16, steps=20, repeats=3, threads=1, competitors=0):
    """The optimizer update and the rest of a step (batch gather, loss, thread hand-offs) that the
    layer timer does not see, from short fits of a copy of `model` (same layers and optimizer
    configuration; the model itself is not trained) on one device: the engine's own profile
    (step_time_breakdown) gives the update; compute minus the layers' time at `rows` rows is the
    overhead (assumed not to grow with rows). Returns (update_s, overhead_s).

    competitors > 0: as many other threads each fit a copy of their own all the while (the
    binding releases the GIL for an epoch), so the update is timed as a replica's runs while the
    other cores run their steps: what the update costs in the replay where it overlaps other
    cores' work. Measured rather than derived from a memory-bandwidth probe: two Adam updates of
    the heavy MLP's 23 MB started together (two processes, in lockstep) take 4.7 ms each against
    2.4 alone, a copy probe's share said 0.59, yet in its MultiWorkerMirrored step of 2 processes
    a rank's update took 2.4-4.6 ms across runs and under ZeRO-1 no longer than alone: a
    replica's update meets the other replicas' compute and communication as well as their
    updates, and this measures that mix."""
    copies = [_compiled_copy(model) for _ in range(1 + competitors)]
    x, y = _zero_batches(model, rows * steps)
    stop = threading.Event()

    def compete(copy):
        while not stop.is_set():
            copy.fit(x, y, batch_size=rows, epochs=1, verbose=0, shuffle=False)

    with core_threads(threads):
        for copy in copies:  # warm-up: first steps pay page faults and slot creation
            copy.fit(x[:rows * 3], y[:rows * 3], batch_size=rows, epochs=1, verbose=0)
        others = [threading.Thread(target=compete, args=(copy,), daemon=True) for copy in copies[1:]]
        for th in others:
            th.start()
        try:
            timed, fits = copies[0], []
            for _ in range(repeats):
                timed._core.reset_profile()
                timed.fit(x, y, batch_size=rows, epochs=1, verbose=0, shuffle=False)
                fits.append(timed.step_time_breakdown())
        finally:
            stop.set()
            for th in others:
                th.join()
    best = min(fits, key=lambda b: b["step"])
    # Alone, the best fit's update (the others were interrupted); beside competitors the median:
    # what an update meets (their compute or their updates) differs from fit to fit.
    update = best["update"] if not competitors else float(np.median([b["update"] for b in fits]))
    return update, max(0.0, best["compute"] - profile.time(rows))


def profile_rows(largest):
    """The row counts profiled for plans of at most `largest` rows per device: every power of two
    from 1 up to it, and it (the planner's per-device and per-micro-batch batches are these for
    power-of-two batches and meshes; others are interpolated)."""
    if not isinstance(largest, (int, np.integer)) or largest < 1:
        raise ValueError(f"profile_rows: the largest row count must be an integer >= 1, got {largest!r}")
    out, k = [], 1
    while k < largest:
        out.append(k)
        k *= 2
    return tuple(out + [int(largest)])


MIN_PROFILE_SECONDS = 0.2  # per profile pass: small models get more rounds than `repeats`
MAX_ROUNDS = 50
MIN_COMPETING_TIMINGS = 3  # a competing thread's timings at a row count it only passed through are no median


def _median_layer_times(core, model, points, repeats, shared_by=1):
    """Seconds per layer at each of `points`, (rows, micro-batches in flight) pairs (an array
    points x layers: per micro-batch), the median of at least `repeats` single timings: a
    sustained step pays the typical time, not the best (the timer's own best-of-k picks a moment
    with a free core, which on a loaded machine is far from what a step gets). The points are
    timed in interleaved rounds, so a burst of other work slows one timing of several points
    rather than every timing of one; rounds go on until they took MIN_PROFILE_SECONDS (at most
    MAX_ROUNDS): the seed MLP's layers take 0.03-0.2 ms, and five timings are a small sample of so
    noisy a time. With shared_by > 1, shared_by - 1 other threads time their own copies at the
    same row count (one micro-batch) through the same timer all the while (the binding releases
    the GIL), so each timing is of a layer competing for memory bandwidth and caches as a
    replica's does; a point's time is then the slowest thread's median (each thread's from at
    least MIN_COMPETING_TIMINGS timings at that row count): replicas in step wait for the slowest,
    and on a shared host the cores need not run alike (this VM's two vCPUs, working at once, ran
    GEMMs 1.2x and Adam's update up to 5x slower for seconds at a time, 2026-11-25)."""
    stop = threading.Event()
    current = [points[0][0]]

    def compete(timings):
        while not stop.is_set():
            r = current[0]
            timings.setdefault(r, []).append(core.measure_layer_times(model._core, r, 1))

    competitors = [{} for _ in range(shared_by - 1)]
    others = [threading.Thread(target=compete, args=(timings,), daemon=True) for timings in competitors]
    for th in others:
        th.start()
    runs = {point: [] for point in points}
    started = time.perf_counter()
    try:
        rounds = 0
        while rounds < repeats or (time.perf_counter() - started < MIN_PROFILE_SECONDS and rounds < MAX_ROUNDS):
            for r, k in points:
                current[0] = r
                runs[(r, k)].append(core.measure_layer_times(model._core, r, 1, k))
            rounds += 1
    finally:
        stop.set()
        for th in others:
            th.join()
    return np.stack([_slowest_median(runs[point], [t.get(point[0], ()) for t in competitors])
                     for point in points]) * 1e-9


def _slowest_median(own, competing):
    """Per layer, the largest of the timing thread's median over `own` timings and each competing
    thread's median over its timings in `competing` (those with at least MIN_COMPETING_TIMINGS)."""
    medians = [np.median(np.asarray(own, dtype=np.float64), axis=0)]
    medians += [np.median(np.asarray(t, dtype=np.float64), axis=0)
                for t in competing if len(t) >= MIN_COMPETING_TIMINGS]
    return np.max(medians, axis=0)


MAX_IN_FLIGHT = 32  # beyond it a stage's held activations are as far out of cache as at it


def in_flight_rows(rows):
    """The (rows, micro-batches in flight) the in-flight timing runs: each profiled row count
    below the largest with as many micro-batches as make the largest (a GPipe stage of the whole
    batch in micro-batches of that size), at most MAX_IN_FLIGHT."""
    return tuple((r, min(MAX_IN_FLIGHT, rows[-1] // r)) for r in rows[:-1] if rows[-1] // r > 1)


def _points(rows, times):
    """Per layer, ((rows, seconds), ...). A layer on fewer rows is not slower than on more: where a
    timing says so it was interrupted (noise only adds time), so each point is capped by the
    points above it."""
    times = np.minimum.accumulate(np.asarray(times)[::-1], axis=0)[::-1]
    return [tuple((int(r), float(t)) for r, t in zip(rows, times[:, i])) for i in range(times.shape[1])]


def _line(points):
    """a + b·rows through the points (least squares, clamped at 0): the summary a reader sees."""
    if len(points) < 2:
        return 0.0, points[0][1] / points[0][0]
    b, a = np.polyfit([r for r, _ in points], [t for _, t in points], 1)
    return max(0.0, float(a)), max(0.0, float(b))


def profile_model(model, rows=None, repeats=5, threads=1, step_costs=True, shared=None, in_flight=None):
    """Times `model`'s layers on this machine (on a copy: the model's weights and statistics are
    not touched) at each of `rows` (default: profile_rows(128)); a layer's time at other rows is
    interpolated between them. `threads`: the core's threads per op while timing: 1 is what each
    replica gets when several run in one process (the executor's ThreadTeam), None every core (one
    replica alone). `shared`: also time each point while every other core runs a copy (default:
    with threads=1 on a machine of several cores: what replicas and stages run as). `in_flight`:
    also time each row count with as many micro-batches held at once as make the largest
    (in_flight_rows: a GPipe stage's; default: with threads=1, what pipeline stages run on)."""
    from mdtrain import _core
    check_model(model)
    rows = profile_rows(128) if rows is None else tuple(sorted({int(r) for r in rows}))
    if not rows or rows[0] < 1:
        raise ValueError(f"profile_model: rows must be row counts >= 1, got {rows!r}")
    cores = os.cpu_count() or 1
    shared = (threads == 1 and cores > 1) if shared is None else bool(shared)
    in_flight = (threads == 1) if in_flight is None else bool(in_flight)
    with core_threads(threads):
        # Warm-up: two untimed rounds over every row count. The first round's timings of 8-64
        # rows of the CNN read 1.3-1.5x every later round's (fresh pages and the allocator
        # settling for that mix of sizes), which a sustained step never pays; one call at the
        # largest row count did not settle it, one round not quite at 64 rows.
        for _ in range(2):
            for r in rows:
                _core.measure_layer_times(model._core, r, 1)
        one_each = [(r, 1) for r in rows]
        alone = _median_layer_times(_core, model, one_each, repeats)
        together = _median_layer_times(_core, model, one_each, repeats, cores) if shared else None
        pairs = in_flight_rows(rows) if in_flight else ()
        held = _median_layer_times(_core, model, pairs, repeats) if pairs else None
        threads = _core.cpu_thread_count()
    points = _points(rows, alone)
    shared_points = _points(rows, together) if shared else [()] * len(points)
    layers = []
    for i, layer in enumerate(model.layers):
        out_values = int(np.prod(layer.output_shape[1:])) if layer.output_shape else 0
        fwd, ratio = _layer_flops(layer, out_values)
        params = int(sum(int(np.prod(tuple(v.shape))) for v in layer.trainable_variables))
        fixed, per_row = _line(points[i])
        layers.append(LayerCost(name=layer.name, kind=type(layer).__name__, params=params,
                                activation_values=out_values, forward_flops=fwd, backward_flops=fwd * ratio,
                                fixed_s=fixed, per_row_s=per_row, backward_share=ratio / (1.0 + ratio),
                                points=points[i], shared_points=shared_points[i],
                                in_flight_points=tuple((r, k, float(held[j, i])) for j, (r, k) in enumerate(pairs))))
    opt = getattr(model, "optimizer", None)
    opt_name = type(opt).__name__.lower() if opt is not None else "sgd"
    slots = _SLOTS.get(opt_name, 0)
    if opt_name == "sgd" and getattr(opt, "momentum", 0):
        slots = 1
    input_values = int(np.prod(model.input_shape[1:]))
    prof = ModelProfile(name=model.name, layers=tuple(layers), input_values=input_values, optimizer=opt_name,
                        optimizer_slots=slots, rows_measured=rows, threads=threads,
                        shared_by=cores if shared else 1)
    if step_costs and opt is not None and model.loss is not None:
        step_rows = min(16, rows[-1])
        update, overhead = measure_step_costs(model, prof, rows=step_rows, threads=threads)
        update_shared = (measure_step_costs(model, prof, rows=step_rows, threads=threads, repeats=7,
                                           competitors=cores - 1)[0]
                         if shared else None)
        prof = dataclasses.replace(prof, update_s=update, step_overhead_s=overhead, update_shared_s=update_shared)
    return prof
