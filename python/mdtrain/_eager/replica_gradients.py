"""optimizer.apply_gradients inside strategy.run with several replicas: one update from the sum of
every replica's gradients, as TF's MirroredStrategy does.

strategy.run calls the replicas' step functions one after another (one replica context at a
time), so each replica's tape computes its gradients on its slice before the next replica runs.
Each replica's apply_gradients hands its gradients to the ReplicaGradients of that strategy.run;
the last replica's call adds them up in replica order (g0 + g1 + ... in the variables' dtype, the
order the in-process all-reduce of fit uses, the same every step) and applies that sum once,
through the one-device path. With tf.nn.compute_average_loss(..., global_batch_size=...) the sum
is the gradient of the global batch's mean loss. This is correct, not parallel: the replicas run
in turn on the host copy of the weights.

MultiWorkerMirroredStrategy: each worker sums its own replicas so, then the workers' sums are
added over MPI (the strategy's sum_across_workers: float64, rank order, identical on every
worker) and every worker applies the same update. With one replica per worker and two workers
this is bitwise the float32 sum g0 + g1 (a sum of two float32 values is exact in float64).
"""
import numpy as np


class ReplicaGradients:
    """Collects each replica's (gradient, variable) pairs per optimizer during one strategy.run."""

    def __init__(self, num_replicas, sum_across_workers=None, first_replica=0):
        self.num_replicas = num_replicas  # this process's replicas
        self.first_replica = first_replica  # the replica id (in the sync group) of the first of them
        self.sum_across_workers = sum_across_workers  # None with one worker
        self.pending = {}  # id(optimizer) -> (optimizer, {replica: [(gradient array, variable)]})

    def add(self, optimizer, replica, pairs, apply):
        """Keeps this replica's pairs; on the last replica's call, applies the sum with `apply`."""
        _, by_replica = self.pending.setdefault(id(optimizer), (optimizer, {}))
        replica -= self.first_replica
        if replica in by_replica:
            raise RuntimeError(f"apply_gradients: replica {self.first_replica + replica} called "
                               f"{type(optimizer).__name__}.apply_gradients twice in one strategy.run; call it once per replica and step")
        if by_replica:
            first = next(iter(by_replica.values()))
            if [v._id for _, v in first] != [v._id for _, v in pairs]:
                raise ValueError("apply_gradients: every replica must pass the same variables, in the same order "
                                 "(and the same gradients that are None)")
        by_replica[replica] = pairs
        if len(by_replica) < self.num_replicas:
            return
        del self.pending[id(optimizer)]
        replicas = [by_replica[r] for r in range(self.num_replicas)]
        summed = []
        for k, (_, v) in enumerate(replicas[0]):
            total = np.array(replicas[0][k][0], copy=True)
            for pairs_r in replicas[1:]:
                np.add(total, pairs_r[k][0], out=total)
            summed.append((total, v))
        if self.sum_across_workers is not None:
            totals = self.sum_across_workers([g for g, _ in summed])
            summed = [(g, v) for g, (_, v) in zip(totals, summed)]
        apply(summed)

    def check_complete(self):
        """At the end of strategy.run: every replica that applied gradients was joined by all others."""
        for optimizer, by_replica in self.pending.values():
            missing = [self.first_replica + r for r in sorted(set(range(self.num_replicas)) - set(by_replica))]
            called = [self.first_replica + r for r in sorted(by_replica)]
            raise RuntimeError(f"apply_gradients: {type(optimizer).__name__}.apply_gradients was called by replicas "
                               f"{called} but not by {missing} in this strategy.run; every replica must "
                               "call it (the update is applied once, from the sum of all replicas' gradients)")
