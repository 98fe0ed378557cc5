"""The α–β (latency–bandwidth) model of a transport: sending S bytes costs α + β·S seconds.

Fitted by least squares to measured (bytes, seconds) pairs, e.g. the rows our all-reduce
benchmarks write (bench/allreduce.py, bench/allreduce_mpi.py) or a few all-reduces timed by
Cluster.measure()."""
import dataclasses
import json

import numpy as np

from mdtrain.plan.interpolate import piecewise_linear


@dataclasses.dataclass(frozen=True)
class AlphaBeta:
    """alpha: seconds per message; beta: seconds per byte (1 / bandwidth)."""
    alpha: float
    beta: float

    @property
    def bandwidth(self):
        """Bytes per second (inf when beta is 0)."""
        return float("inf") if self.beta == 0 else 1.0 / self.beta

    def time(self, nbytes):
        return self.alpha + self.beta * float(nbytes)


@dataclasses.dataclass(frozen=True)
class MeasuredTransfer(AlphaBeta):
    """A transfer measured at several sizes on this machine: its α–β fit (alpha, beta: what the
    cluster prints and what a link is derived from) and the measured points, which time() reads
    piecewise-linearly. Between a few MB in cache and tens of MB streaming from memory the cost per
    byte changes severalfold, and a line weighted to fit 4 KB as well as 64 MB put the heavy
    MLP's 23 MB all-reduce of 2 threads at 0.66 ms where it measures 1.4-1.7 ms."""
    points: tuple = ()  # ((bytes, seconds), ...), bytes ascending

    def time(self, nbytes):
        return piecewise_linear(self.points, float(nbytes)) if self.points else super().time(nbytes)


def measured_transfer(sizes, seconds):
    """The MeasuredTransfer of (sizes, seconds) measurements: their fit and the points."""
    fit = fit_alpha_beta(sizes, seconds)
    points = tuple(sorted((float(b), float(t)) for b, t in zip(sizes, seconds)))
    return MeasuredTransfer(fit.alpha, fit.beta, points)


def fit_alpha_beta(sizes, seconds):
    """Least-squares fit of seconds ≈ α + β·bytes. Needs at least two distinct sizes; α and β are
    clipped at 0 (a negative latency is noise in the small messages, not a property of the link).
    The residuals are weighted by 1/seconds so a 1 KB message counts as much as a 256 MB one (an
    unweighted fit lets the biggest messages decide α)."""
    x = np.asarray(sizes, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"fit_alpha_beta: sizes and seconds must be 1-D of the same length, got {x.shape} "
                         f"and {y.shape}")
    if len(np.unique(x)) < 2:
        raise ValueError("fit_alpha_beta: needs measurements at two or more distinct message sizes")
    if np.any(y <= 0) or np.any(x < 0):
        raise ValueError("fit_alpha_beta: seconds must be > 0 and sizes >= 0")
    w = 1.0 / y
    a = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(a, y * w, rcond=None)
    alpha, beta = max(0.0, float(alpha)), max(0.0, float(beta))
    if beta == 0.0:  # α absorbed everything: refit the slope through the smallest time
        beta = max(0.0, float(np.polyfit(x, y, 1)[0]))
    return AlphaBeta(alpha, beta)


def fit_benchmark_json(path, ranks=2, key_bytes="bytes", key_time_us="time_us"):
    """The α–β fit of one group size's rows of a bench/results/*.json (bench/allreduce.py's or
    bench/allreduce_mpi.py's output: rows with "bytes", "ranks" and "time_us")."""
    with open(path) as f:
        rows = json.load(f)["results"]
    rows = [r for r in rows if r.get("ranks", ranks) == ranks and key_time_us in r]
    if not rows:
        raise ValueError(f"{path}: no rows for {ranks} ranks with '{key_time_us}'")
    return fit_alpha_beta([r[key_bytes] for r in rows], [r[key_time_us] * 1e-6 for r in rows])
