"""Seconds of the collectives our communicators run, from a link's α–β (one point-to-point
transfer: α + β·bytes). Ring algorithms (what the threads, MPI and NCCL backends use for large
messages): an all-reduce of S bytes over n ranks is 2(n-1) steps of S/n bytes, a reduce-scatter or
an all-gather (n-1) steps. A group spanning several hosts is costed hierarchically (NCCL's
tree/ring over hosts): reduce-scatter inside each host, all-reduce of a host's shard between
hosts, all-gather inside each host. On this machine the threads communicator's whole all-reduce
of n ranks is measured (Cluster.threads_all_reduce): a group of n devices of one host is costed
from it, a reduce-scatter or an all-gather as half of it (the ring's two halves); its reduce onto
one rank and broadcast from it are measured too (threads_reduce, threads_broadcast)."""


def _measured(n, cluster, which="threads_all_reduce"):
    """The measured fit (Cluster.threads_all_reduce, threads_reduce or threads_broadcast) of n
    devices of one host, or None."""
    if n > cluster.devices_per_host:
        return None
    return dict(getattr(cluster, which)).get(n)


def ring_steps(n, steps_per_rank, nbytes, link):
    if n <= 1:
        return 0.0
    return steps_per_rank * (n - 1) * link.time(nbytes / n)


def all_reduce(nbytes, n, cluster):
    if n <= 1:
        return 0.0
    fit = _measured(n, cluster)
    if fit is not None:
        return fit.time(nbytes)
    per_host = min(n, cluster.devices_per_host)
    hosts = -(-n // per_host)
    if hosts == 1:
        return ring_steps(n, 2, nbytes, cluster.intra_host)
    return (ring_steps(per_host, 1, nbytes, cluster.intra_host) +
            ring_steps(hosts, 2, nbytes / per_host, cluster.inter_host) +
            ring_steps(per_host, 1, nbytes, cluster.intra_host))


def reduce_scatter(nbytes, n, cluster):
    """nbytes: the whole buffer (each rank ends with nbytes / n)."""
    if n <= 1:
        return 0.0
    fit = _measured(n, cluster)
    if fit is not None:
        return fit.time(nbytes) / 2
    return ring_steps(n, 1, nbytes, cluster.link(n))


all_gather = reduce_scatter  # the same traffic, the other way


def _one_root(nbytes, n, cluster, measured):
    """A collective with one root (a reduce onto it, a broadcast from it): the threads
    communicator's measured fit `measured` for devices of one host where there is one, else (n-1)
    steps of the whole buffer pipelined through the root's link."""
    if n <= 1:
        return 0.0
    fit = _measured(n, cluster, measured)
    if fit is not None:
        return fit.time(nbytes)
    link = cluster.link(n)
    return (n - 1) * link.alpha + link.beta * nbytes * (n - 1)


def reduce_to_one(nbytes, n, cluster):
    """A reduction onto one rank (ReductionToOneDevice, CentralStorage)."""
    return _one_root(nbytes, n, cluster, "threads_reduce")


def broadcast(nbytes, n, cluster):
    """One rank's buffer to all (CentralStorage's weights back to the replicas)."""
    return _one_root(nbytes, n, cluster, "threads_broadcast")


def point_to_point(nbytes, same_host, cluster):
    return (cluster.intra_host if same_host else cluster.inter_host).time(nbytes)
