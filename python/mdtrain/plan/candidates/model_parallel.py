"""ModelParallel on a (batch, model) mesh, the rest of the devices on the batch axis: the core's
tensor-parallel StepPlan of the layout the core writes for the profile (price_tensor_parallel.py)."""
from mdtrain.plan import price_tensor_parallel
from mdtrain.plan.candidates import powers_of_two_up_to

RANK = 40


def candidates(ctx):
    prof, b = ctx.prof, ctx.b
    for t in powers_of_two_up_to(ctx.cluster.devices_per_host)[1:]:
        dp = ctx.cluster.num_devices // t
        forms = price_tensor_parallel.forms(prof, t)
        if all(f == "replicated" for f in forms):
            ctx.skip("ModelParallel", t * dp, {"mesh": (dp, t)}, f"no Dense layer has units divisible by {t}")
            continue
        if b % dp:
            ctx.skip("ModelParallel", t * dp, {"mesh": (dp, t)},
                     f"global batch {b} not divisible by the batch axis {dp}")
            continue
        result, forms = price_tensor_parallel.tensor_parallel(prof, ctx.cluster, t, dp, b, scale=ctx.scale)
        split = ", ".join(f"{layer.name}:{f}" for layer, f in zip(prof.layers, forms) if f != "replicated")
        ctx.add("ModelParallel", t * dp, {"mesh": (dp, t), "layout": split}, result,
                f"Dense layers split {t} ways ({split}), all-reduces of activations in forward and "
                f"backward{ctx.scaled}")
