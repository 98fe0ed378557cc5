"""plan(model, global_batch_size, cluster): every strategy and setting that applies to the model
on the cluster, simulated from the model's measured profile, best first.

Compute on a preset cluster is the time measured on this machine scaled by the ratio of this
machine's measured per-device GEMM FLOP/s to the preset's peak FLOP/s (an assumption: it treats
every layer as reaching the same fraction of peak on both, which favours small layers on GPUs)."""
import math

from mdtrain._ps.local_cluster import tasks_threads
from mdtrain.config import _env_cpu_threads
from mdtrain.plan import price_parameter_servers, price_pipeline, price_plan, price_tensor_parallel
from mdtrain.plan.cluster import Cluster, measure_core_gemm_flops
from mdtrain.plan.plan_result import Plan, PlanList
from mdtrain.plan.profile import check_model, profile_model, profile_rows
from mdtrain.plan.ps_probe import PS_STEPS_PER_EXECUTION, ps_step_overhead
from mdtrain.plan.stage_profile import measure_stage_costs

BUCKET_SIZES = (25 << 20, 4 << 20, 1 << 20)  # GradientReducer's default (DDP's) and two smaller
_MIB = 1 << 20


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


def _powers_of_two_up_to(n):
    out, k = [], 1
    while k <= n:
        out.append(k)
        k *= 2
    if out[-1] != n:
        out.append(n)
    return out


def _resolve_cluster(cluster):
    if cluster is None:
        return Cluster.measure()
    if isinstance(cluster, str):
        return Cluster.preset(cluster)
    if not isinstance(cluster, Cluster):
        raise ValueError(f"plan: cluster must be None (this machine), a preset name or a Cluster, got {cluster!r}")
    return cluster


def _time_chunks(timesteps):
    """The time chunks a wavefront plan considers: about 2, 4, 8 and 16 chunks of the sequence."""
    return sorted({max(1, -(-timesteps // k)) for k in (2, 4, 8, 16)}, reverse=True)


def _add_wavefronts(model, prof, cluster, b, scale, scaled, add, skip):
    """WavefrontPipeline candidates for a recurrent stack: p = 2, 4, .. stages (one CPU device each,
    one process), time chunks of about 1/2 .. 1/16 of the sequence, each priced from the core's plan
    (price_pipeline.price_wavefront); skipped when the model's leading layers are not p recurrent
    layers with return_sequences=True, or the cluster is not one host's CPU devices."""
    shape = getattr(model, "input_shape", None) or ()
    timesteps = shape[1] if len(shape) == 3 and isinstance(shape[1], int) else None
    if timesteps is None:
        return  # not a sequence model: nothing to cut in time
    for p in _powers_of_two_up_to(min(cluster.num_devices, 8))[1:]:
        if cluster.hosts > 1 or cluster.cores is None:
            skip("WavefrontPipeline", p, {"stages": p},
                 "the wavefront pipeline runs on one process's logical CPU devices only")
            continue
        for chunk in _time_chunks(timesteps):
            settings = {"stages": p, "time_chunk": chunk, "mesh": (p,)}
            try:
                step = price_pipeline.wavefront_plan(model, p, chunk, b)
            except ValueError as e:
                skip("WavefrontPipeline", p, {"stages": p}, str(e))
                break
            chunks = -(-timesteps // chunk)
            add("WavefrontPipeline", p, settings, price_pipeline.price_wavefront(step, prof, cluster, timesteps, scale),
                f"{p} stages of recurrent layers, {chunks} time chunks of {chunk} steps flowing stage to stage"
                f"{scaled}")


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
    n_all, per_host = cluster.num_devices, cluster.devices_per_host
    b = global_batch_size
    scaled = "" if scale == 1.0 else f"; compute scaled x{scale:.3g} by FLOP/s ratio"

    def add(name, n, settings, result, why):
        fits = result.memory_per_device_bytes <= cluster.memory_bytes
        plans.append(Plan(name, n, settings, result.step_time_s, result.memory_per_device_bytes, result.breakdown,
                          why if fits else why + " (does NOT fit device memory)", timeline=result.timeline))

    def skip(name, n, settings, reason):
        plans.append(Plan(name, n, settings, float("nan"), float("nan"), {}, "", skipped=reason))

    # Data parallel on one device / one host: the core's StepPlan, priced (price_plan.py). The
    # devices of one process are host (CPU) devices where the cluster does not overlap
    # communication with compute, GPUs where it does; the core decides the gradient sync.
    clips = _clips_by_norm(model)
    one = price_plan.replicated_plan(alone, "OneDeviceStrategy", 1, clips_by_norm=clips)
    add("OneDeviceStrategy", 1, {}, price_plan.price(one, alone, cluster, b, scale=scale),
        f"one device: no communication{scaled}")
    for n in _powers_of_two_up_to(per_host)[1:]:
        if b < n:
            skip("MirroredStrategy", n, {}, f"global batch {b} < {n} replicas (replicas with no rows)")
            continue
        host = not cluster.overlaps_communication
        for bucket in BUCKET_SIZES:
            step = price_plan.replicated_plan(prof, "MirroredStrategy", n, host_replicas=host, bucket_bytes=bucket,
                                              clips_by_norm=clips)
            kind = price_plan.sync_kind(step)
            sharing = f" sharing {cluster.cores} cores" if cluster.cores and n > cluster.cores else ""
            if kind == "zero1":
                add("MirroredStrategy", n, {"gradient_sync": "zero1"}, price_plan.price(step, prof, cluster, b,
                                                                                        scale=scale),
                    f"{n} replicas: reduce-scatter, 1/{n} of the update each, all-gather (the CPU executor's "
                    f"ZeRO-1){sharing}{scaled}")
                break  # no buckets
            settings = {"bucket_bytes": f"{bucket // _MIB}MiB"}
            why = f"{n} replicas, {bucket // _MIB} MiB buckets all-reduced during backward"
            if kind == "zero1_after_all_reduce":
                settings = {"gradient_sync": kind, **settings}
                why += f", 1/{n} of the update each, all-gather (clipping by norm needs the whole gradient)"
            add("MirroredStrategy", n, settings, price_plan.price(step, prof, cluster, b, scale=scale),
                f"{why}{sharing}{scaled}")
    if cluster.hosts > 1:
        if b < n_all:
            skip("MultiWorkerMirroredStrategy", n_all, {}, f"global batch {b} < {n_all} replicas")
        else:
            for bucket in BUCKET_SIZES:
                settings = {"workers": cluster.hosts, "bucket_bytes": f"{bucket // _MIB}MiB"}
                step = price_plan.replicated_plan(prof, "MultiWorkerMirroredStrategy", per_host, workers=cluster.hosts,
                                                  host_replicas=not cluster.overlaps_communication,
                                                  bucket_bytes=bucket, clips_by_norm=clips)
                add("MultiWorkerMirroredStrategy", n_all, settings, price_plan.price(step, prof, cluster, b, scale=scale),
                    f"{cluster.hosts} hosts x {per_host}: hierarchical all-reduce of {bucket // _MIB} MiB buckets"
                    f"{scaled}")
    elif cluster.mpi_processes:
        # Worker processes on this host, one device each, talking MPI (measured by Cluster.measure).
        for k in cluster.mpi_workers():
            settings = {"workers": k, "bucket_bytes": f"{BUCKET_SIZES[0] // _MIB}MiB"}
            if b < k:
                skip("MultiWorkerMirroredStrategy", k, settings, f"global batch {b} < {k} workers")
                continue
            cores = cluster.cores or k
            step = price_plan.replicated_plan(prof, "MultiWorkerMirroredStrategy", 1, workers=k,
                                              bucket_bytes=BUCKET_SIZES[0], clips_by_norm=clips)
            add("MultiWorkerMirroredStrategy", k, settings,
                price_plan.price(step, prof, cluster, b, scale=scale, processes=True),
                f"{k} MPI processes on this host{f' sharing {cores} cores' if k > cores else ''}: gradient "
                f"buckets all-reduced by MPI (measured α–β and step cost of {k} processes), each updates all")
    else:
        skip("MultiWorkerMirroredStrategy", n_all, {},
             f"one host: Mirrored covers it (MPI transport between processes not measured: {cluster.mpi_source})")
    # Centralized parameters.
    if per_host > 1 and b >= per_host:
        step = price_plan.replicated_plan(prof, "CentralStorageStrategy", per_host, parameter_device=True,
                                          reduce_to_one=True, clips_by_norm=clips)
        add("CentralStorageStrategy", per_host, {}, price_plan.price(step, prof, cluster, b, scale=scale),
            f"gradients reduced onto one device, its update, weights broadcast{scaled}")
    for k in (1, 2, 4):
        workers = n_all
        if cluster.name == "this-machine":
            # Workers and servers are processes talking ZeroMQ here: costed from that transport's
            # measured α–β (ps_probe.py), never from the threads link (which would rank them first
            # on no evidence).
            settings = {"num_ps": k, "workers": workers, "mode": "asynchronous", "rows_per_step": b,
                        "partitioner": f"FixedShards({k})", "steps_per_execution": PS_STEPS_PER_EXECUTION}
            if cluster.ps_transport is None:
                skip("ParameterServerStrategy", workers, settings, cluster.ps_source or
                     "the ZeroMQ transport between processes is not measured")
                continue
            cores = cluster.cores or workers + k
            # The launched processes inherit MDTRAIN_CPU_THREADS (LocalCluster passes the
            # environment on); without it LocalCluster deals the cores among its tasks.
            threads = _env_cpu_threads() or tasks_threads("worker", workers, cores)
            # Costed from the profile timed on as many threads as a worker has: one, or every core
            # (a count in between is costed from the one-thread profile); a server's apply is
            # costed on as many too (it has one thread, but its apply is memory bound).
            threads = min(threads, cores)
            ps_profile = alone if threads >= cores else prof
            add("ParameterServerStrategy", workers, settings,
                price_parameter_servers.parameter_servers_async(
                    ps_profile, cluster, workers, k, b, cluster.ps_transport, scale=scale, process_threads=threads,
                    push_transport=cluster.ps_push, step_overhead_s=ps_step_overhead(cluster, prof, b)),
                f"{workers} worker and {k} server processes on {cores} cores, asynchronous (the strategy's "
                f"default): each step of {b} rows pulls every variable, computes, pushes, and waits for the "
                f"servers' applies (measured ZeroMQ pull and push, the model's measured update for the apply, "
                f"the measured step loop besides them at steps_per_execution={PS_STEPS_PER_EXECUTION}; each worker's "
                f"ops on {threads} core(s), time-shared); step = seconds per update in the replayed steady "
                f"state; not modelled: staleness")
            continue
        add("ParameterServerStrategy", workers, {"num_ps": k, "synchronous": True},
            price_parameter_servers.parameter_servers(prof, cluster, workers, k, b, scale=scale),
            f"{workers} workers push/pull through {k} server link(s) (the "
            f"{'inter' if cluster.hosts > 1 else 'intra'}-host link's figures){scaled}")
    # Tensor parallel (ModelParallel), with the rest of the devices on the batch axis.
    for t in _powers_of_two_up_to(per_host)[1:]:
        dp = n_all // t
        forms = price_tensor_parallel.forms(prof, t)
        if all(f == "replicated" for f in forms):
            skip("ModelParallel", t * dp, {"mesh": (dp, t)}, f"no Dense layer has units divisible by {t}")
            continue
        if b % dp:
            skip("ModelParallel", t * dp, {"mesh": (dp, t)}, f"global batch {b} not divisible by the batch axis {dp}")
            continue
        result, forms = price_tensor_parallel.tensor_parallel(prof, cluster, t, dp, b, scale=scale)
        split = ", ".join(f"{layer.name}:{f}" for layer, f in zip(prof.layers, forms) if f != "replicated")
        add("ModelParallel", t * dp, {"mesh": (dp, t), "layout": split}, result,
            f"Dense layers split {t} ways ({split}), all-reduces of activations in forward and backward{scaled}")
    # Pipelines.
    layers = len(prof.layers)
    time_stages_here = scale == 1.0 and all(layer.points for layer in prof.layers)
    for p in _powers_of_two_up_to(min(n_all, 8))[1:]:
        dp = n_all // p
        if p > layers:
            skip("PipelineParallel", p * dp, {"stages": p}, f"{p} stages > {layers} layers")
            continue
        # The cut stages="balance_time" makes (the executor times each layer once, whatever m).
        starts = price_pipeline.balance_time_starts(prof, p)
        for m in (p, 2 * p, 4 * p, 8 * p):
            if b % (dp * m):
                skip("PipelineParallel", p * dp, {"stages": p, "microbatches": m},
                     f"global batch {b} not divisible by batch axis {dp} x {m} micro-batches")
                continue
            for schedule in ("gpipe", "1f1b"):
                # On this machine each stage is timed as it runs (stage_profile.py); elsewhere its
                # layers' profiled times are scaled.
                measured = (measure_stage_costs(model, starts, b // (dp * m), schedule, m)
                            if time_stages_here else None)
                # The core's plan of the pipeline (the one the executor runs), priced op by op.
                step = price_pipeline.pipeline_plan(prof, p, m, schedule, dp, b, stage_starts=starts)
                result, bubble, _ = price_pipeline.price_pipeline(step, prof, cluster, scale,
                                                                  measured_stages=measured)
                add("PipelineParallel", p * dp, {"stages": p, "microbatches": m, "schedule": schedule,
                                                 "mesh": (p, dp), "stage_starts": starts}, result,
                    f"{p} stages cut by time, {m} micro-batches of {b // (dp * m)} rows, {schedule}: "
                    f"bubble {bubble / max(result.step_time_s, 1e-30):.0%} of the step{scaled}")
    _add_wavefronts(model, prof, cluster, b, scale, scaled, add, skip)
    inputs = (f"model '{prof.name}': {prof.params} parameters, {len(prof.layers)} layers, profiled on this machine "
              f"at rows {prof.rows_measured}; global batch {b}; cluster {cluster}")
    return PlanList(plans, inputs)
