"""What the planner tries, one module per strategy family: each module's `candidates(ctx)` adds
the family's settings for a model on a cluster (`ctx.add`, priced from the core's StepPlan by the
pricer of its ops), or says why a setting does not apply (`ctx.skip`). The planner runs every
module of this package in the order of their RANK; a strategy added later is a module here (with
its plan function in the core), not a change to the planner."""
import dataclasses
import importlib
import pkgutil

BUCKET_SIZES = (25 << 20, 4 << 20, 1 << 20)  # GradientReducer's default (DDP's) and two smaller
MIB = 1 << 20


def powers_of_two_up_to(n):
    """1, 2, 4, .. up to n, and n itself."""
    out, k = [], 1
    while k <= n:
        out.append(k)
        k *= 2
    if out[-1] != n:
        out.append(n)
    return out


@dataclasses.dataclass
class PlanContext:
    """What every family's candidates read: the model and its profiles (`prof` timed on one thread,
    for several replicas or stages; `alone` for one device alone), the cluster, the global batch
    `b`, the compute `scale` to the cluster (and `scaled`, the phrase saying so), whether the
    optimizer clips by norm, and the planner's `add(name, n, settings, result, why)` and
    `skip(name, n, settings, reason)`."""
    model: object
    prof: object
    alone: object
    cluster: object
    b: int
    scale: float
    scaled: str
    clips: bool
    add: object
    skip: object


def families():
    """This package's family modules, in the order of their RANK."""
    modules = [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)]
    return sorted((m for m in modules if hasattr(m, "candidates")), key=lambda m: m.RANK)
