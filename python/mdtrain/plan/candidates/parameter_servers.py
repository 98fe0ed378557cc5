"""ParameterServerStrategy with 1, 2 and 4 servers: the worker's StepPlan (price_parameter_servers.py).
On this machine workers and servers are processes talking ZeroMQ, costed from that transport's
measured α–β (ps_probe.py), never from the threads link (which would rank them first on no
evidence); on a preset, synchronous workers over the servers' links."""
from mdtrain._ps.local_cluster import tasks_threads
from mdtrain.config import _env_cpu_threads
from mdtrain.plan import price_parameter_servers
from mdtrain.plan.ps_probe import PS_STEPS_PER_EXECUTION, ps_step_overhead

RANK = 30


def candidates(ctx):
    cluster, b = ctx.cluster, ctx.b
    workers = cluster.num_devices
    for k in (1, 2, 4):
        if cluster.name != "this-machine":
            ctx.add("ParameterServerStrategy", workers, {"num_ps": k, "synchronous": True},
                    price_parameter_servers.parameter_servers(ctx.prof, cluster, workers, k, b, scale=ctx.scale),
                    f"{workers} workers push/pull through {k} server link(s) (the "
                    f"{'inter' if cluster.hosts > 1 else 'intra'}-host link's figures){ctx.scaled}")
            continue
        settings = {"num_ps": k, "workers": workers, "mode": "asynchronous", "rows_per_step": b,
                    "partitioner": f"FixedShards({k})", "steps_per_execution": PS_STEPS_PER_EXECUTION}
        if cluster.ps_transport is None:
            ctx.skip("ParameterServerStrategy", workers, settings, cluster.ps_source or
                     "the ZeroMQ transport between processes is not measured")
            continue
        cores = cluster.cores or workers + k
        # The launched processes inherit MDTRAIN_CPU_THREADS (LocalCluster passes the environment
        # on); without it LocalCluster deals the cores among its tasks.
        threads = _env_cpu_threads() or tasks_threads("worker", workers, cores)
        # Costed from the profile timed on as many threads as a worker has: one, or every core (a
        # count in between is costed from the one-thread profile); a server's apply is costed on
        # as many too (it has one thread, but its apply is memory bound).
        threads = min(threads, cores)
        ps_profile = ctx.alone if threads >= cores else ctx.prof
        ctx.add("ParameterServerStrategy", workers, settings,
                price_parameter_servers.parameter_servers_async(
                    ps_profile, cluster, workers, k, b, cluster.ps_transport, scale=ctx.scale,
                    process_threads=threads, push_transport=cluster.ps_push,
                    step_overhead_s=ps_step_overhead(cluster, ctx.prof, b)),
                f"{workers} worker and {k} server processes on {cores} cores, asynchronous (the strategy's "
                f"default): each step of {b} rows pulls every variable, computes, pushes, and waits for the "
                f"servers' applies (measured ZeroMQ pull and push, the model's measured update for the apply, "
                f"the measured step loop besides them at steps_per_execution={PS_STEPS_PER_EXECUTION}; each "
                f"worker's ops on {threads} core(s), time-shared); step = seconds per update in the replayed "
                f"steady state; not modelled: staleness")
