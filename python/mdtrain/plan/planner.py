"""plan(model, global_batch_size, cluster): every strategy and setting that applies to the model
on the cluster, simulated from the model's measured profile, best first.

Compute on a preset cluster is the time measured on this machine scaled by the ratio of this
machine's measured per-device GEMM FLOP/s to the preset's peak FLOP/s (an assumption: it treats
every layer as reaching the same fraction of peak on both, which favours small layers on GPUs)."""
import math

from mdtrain.plan import candidates
from mdtrain.plan.cluster import Cluster, measure_core_gemm_flops
from mdtrain.plan.plan_result import Plan, PlanList
from mdtrain.plan.profile import check_model, profile_model, profile_rows


# The largest global batch planned for: the profile times every power of two up to it on one device.
MAX_GLOBAL_BATCH_SIZE = 1 << 24


def _profile_bytes_per_row(model):
    """Host bytes one row of a profile pass holds at least: the input and every layer's output,
    each with its gradient, in float32 (the layers' scratch comes on top)."""
    def elements(shape):
        return math.prod(d for d in (shape or ())[1:] if d is not None)
    return 2 * 4 * (elements(model.input_shape) + sum(elements(layer.output_shape) for layer in model.layers))


def _check_global_batch_size(model, global_batch_size):
    """ValueError naming global_batch_size unless it is an integer from 1 to the smaller of
    MAX_GLOBAL_BATCH_SIZE and the rows whose profile pass fits the host memory left: the profile
    runs one pass of global_batch_size rows on this machine before anything is planned, and
    10**9 rows ran for minutes towards the OOM killer."""
    b = global_batch_size
    if not isinstance(b, int) or isinstance(b, bool) or b < 1:
        raise ValueError(f"plan: global_batch_size must be an integer >= 1, got {b!r}")
    if b > MAX_GLOBAL_BATCH_SIZE:
        raise ValueError(f"plan: global_batch_size={b} exceeds the limit of {MAX_GLOBAL_BATCH_SIZE} "
                         f"(the profile times one device at every power of two up to the global batch)")
    from mdtrain import _core
    per_row = _profile_bytes_per_row(model)
    left = _core.host_memory_available()
    if left["bytes"] is not None and per_row and b * per_row > left["bytes"]:
        raise ValueError(f"plan: global_batch_size={b} needs at least {b * per_row / 2**30:.1f} GiB of host memory "
                         f"to profile one device at that batch ({per_row} bytes per row: the input and the layers' "
                         f"outputs with their gradients); {left['bytes'] / 2**30:.1f} GiB available "
                         f"({left['description']}): at most {left['bytes'] // per_row} rows fit")


def _clips_by_norm(model):
    """Whether the model's optimizer clips by norm (the core's plan then all-reduces before a sharded
    update); False before compile."""
    config = getattr(getattr(model, "optimizer", None), "_config", None) or {}
    return bool(config.get("clipnorm") or config.get("global_clipnorm"))


def _resolve_cluster(cluster):
    if cluster is None:
        return Cluster.measure()
    if isinstance(cluster, str):
        return Cluster.preset(cluster)
    if not isinstance(cluster, Cluster):
        raise ValueError(f"plan: cluster must be None (this machine), a preset name or a Cluster, got {cluster!r}")
    return cluster


def plan(model, global_batch_size, cluster=None, profile=None, this_machine_flops=None, alone_profile=None):
    """Plans for training `model` (built, Sequential) with `global_batch_size` on `cluster` (None:
    this machine, measured; a preset name; a Cluster), best first. `profile` (a ModelProfile, used
    for every strategy unless `alone_profile` is given for one device alone) /
    `this_machine_flops`: reuse earlier measurements.

    On this machine, one replica alone is costed from a profile timed on every core (the core
    splits a lone replica's GEMMs over its threads) and several replicas or stages from one timed
    on one thread each (what each gets while the others run)."""
    check_model(model)
    _check_global_batch_size(model, global_batch_size)
    cluster = _resolve_cluster(cluster)
    if cluster.num_devices < 1:
        raise ValueError(f"plan: cluster '{cluster.name}' has zero devices")
    # Every power of two up to the global batch: each per-device batch and micro-batch the plans
    # below cost is one of them (or lies between two).
    rows = profile_rows(global_batch_size)
    # The shared timings (every core running a copy) are only used on the machine profiled.
    prof = profile if profile is not None else profile_model(model, rows=rows, threads=1,
                                                             shared=None if cluster.cores is not None else False)
    alone = prof if alone_profile is None else alone_profile
    if cluster.name == "this-machine" and profile is None and alone_profile is None:
        alone = profile_model(model, rows=rows, threads=None)
    if cluster.name == "this-machine":
        scale = 1.0
    else:
        here = this_machine_flops if this_machine_flops is not None else measure_core_gemm_flops()
        scale = here / cluster.peak_flops
    plans = []
    scaled = "" if scale == 1.0 else f"; compute scaled x{scale:.3g} by FLOP/s ratio"

    def add(name, n, settings, result, why):
        fits = result.memory_per_device_bytes <= cluster.memory_bytes
        plans.append(Plan(name, n, settings, result.step_time_s, result.memory_per_device_bytes, result.breakdown,
                          why if fits else why + " (does NOT fit device memory)", timeline=result.timeline))

    def skip(name, n, settings, reason):
        plans.append(Plan(name, n, settings, float("nan"), float("nan"), {}, "", skipped=reason))

    # Every strategy family's settings (plan/candidates/), each priced from the core's StepPlan.
    ctx = candidates.PlanContext(model=model, prof=prof, alone=alone, cluster=cluster, b=global_batch_size,
                                 scale=scale, scaled=scaled, clips=_clips_by_norm(model), add=add, skip=skip)
    for family in candidates.families():
        family.candidates(ctx)
    b = global_batch_size
    inputs = (f"model '{prof.name}': {prof.params} parameters, {len(prof.layers)} layers, profiled on this machine "
              f"at rows {prof.rows_measured}; global batch {b}; cluster {cluster}")
    return PlanList(plans, inputs)
