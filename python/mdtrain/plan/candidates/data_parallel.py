"""OneDeviceStrategy, MirroredStrategy and MultiWorkerMirroredStrategy: the core's data-parallel
StepPlan (price_plan.py). The devices of one process are host (CPU) devices where the cluster does
not overlap communication with compute, GPUs where it does; the core decides the gradient sync."""
from mdtrain.plan import price_plan
from mdtrain.plan.candidates import BUCKET_SIZES, MIB, powers_of_two_up_to

RANK = 10


def candidates(ctx):
    cluster, b, scale, scaled, clips = ctx.cluster, ctx.b, ctx.scale, ctx.scaled, ctx.clips
    n_all, per_host = cluster.num_devices, cluster.devices_per_host
    one = price_plan.replicated_plan(ctx.alone, "OneDeviceStrategy", 1, clips_by_norm=clips)
    ctx.add("OneDeviceStrategy", 1, {}, price_plan.price(one, ctx.alone, cluster, b, scale=scale),
            f"one device: no communication{scaled}")
    for n in powers_of_two_up_to(per_host)[1:]:
        if b < n:
            ctx.skip("MirroredStrategy", n, {}, f"global batch {b} < {n} replicas (replicas with no rows)")
            continue
        host = not cluster.overlaps_communication
        for bucket in BUCKET_SIZES:
            step = price_plan.replicated_plan(ctx.prof, "MirroredStrategy", n, host_replicas=host, bucket_bytes=bucket,
                                              clips_by_norm=clips)
            kind = price_plan.sync_kind(step)
            sharing = f" sharing {cluster.cores} cores" if cluster.cores and n > cluster.cores else ""
            if kind == "zero1":
                ctx.add("MirroredStrategy", n, {"gradient_sync": "zero1"},
                        price_plan.price(step, ctx.prof, cluster, b, scale=scale),
                        f"{n} replicas: reduce-scatter, 1/{n} of the update each, all-gather (the CPU executor's "
                        f"ZeRO-1){sharing}{scaled}")
                break  # no buckets
            settings = {"bucket_bytes": f"{bucket // MIB}MiB"}
            why = f"{n} replicas, {bucket // MIB} MiB buckets all-reduced during backward"
            if kind == "zero1_after_all_reduce":
                settings = {"gradient_sync": kind, **settings}
                why += f", 1/{n} of the update each, all-gather (clipping by norm needs the whole gradient)"
            ctx.add("MirroredStrategy", n, settings, price_plan.price(step, ctx.prof, cluster, b, scale=scale),
                    f"{why}{sharing}{scaled}")
    if cluster.hosts > 1:
        if b < n_all:
            ctx.skip("MultiWorkerMirroredStrategy", n_all, {}, f"global batch {b} < {n_all} replicas")
            return
        for bucket in BUCKET_SIZES:
            settings = {"workers": cluster.hosts, "bucket_bytes": f"{bucket // MIB}MiB"}
            step = price_plan.replicated_plan(ctx.prof, "MultiWorkerMirroredStrategy", per_host, workers=cluster.hosts,
                                              host_replicas=not cluster.overlaps_communication,
                                              bucket_bytes=bucket, clips_by_norm=clips)
            ctx.add("MultiWorkerMirroredStrategy", n_all, settings,
                    price_plan.price(step, ctx.prof, cluster, b, scale=scale),
                    f"{cluster.hosts} hosts x {per_host}: hierarchical all-reduce of {bucket // MIB} MiB buckets"
                    f"{scaled}")
    elif cluster.mpi_processes:
        # Worker processes on this host, one device each, talking MPI (measured by Cluster.measure).
        for k in cluster.mpi_workers():
            settings = {"workers": k, "bucket_bytes": f"{BUCKET_SIZES[0] // MIB}MiB"}
            if b < k:
                ctx.skip("MultiWorkerMirroredStrategy", k, settings, f"global batch {b} < {k} workers")
                continue
            cores = cluster.cores or k
            step = price_plan.replicated_plan(ctx.prof, "MultiWorkerMirroredStrategy", 1, workers=k,
                                              bucket_bytes=BUCKET_SIZES[0], clips_by_norm=clips)
            ctx.add("MultiWorkerMirroredStrategy", k, settings,
                    price_plan.price(step, ctx.prof, cluster, b, scale=scale, processes=True),
                    f"{k} MPI processes on this host{f' sharing {cores} cores' if k > cores else ''}: gradient "
                    f"buckets all-reduced by MPI (measured α–β and step cost of {k} processes), each updates all")
    else:
        ctx.skip("MultiWorkerMirroredStrategy", n_all, {},
                 f"one host: Mirrored covers it (MPI transport between processes not measured: {cluster.mpi_source})")
