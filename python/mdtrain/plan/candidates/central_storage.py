"""CentralStorageStrategy: the data-parallel plan with the ReduceToDevice sync (price_plan.py)."""
from mdtrain.plan import price_plan

RANK = 20


def candidates(ctx):
    per_host = ctx.cluster.devices_per_host
    if per_host > 1 and ctx.b >= per_host:
        step = price_plan.replicated_plan(ctx.prof, "CentralStorageStrategy", per_host, parameter_device=True,
                                          reduce_to_one=True, clips_by_norm=ctx.clips)
        ctx.add("CentralStorageStrategy", per_host, {}, price_plan.price(step, ctx.prof, ctx.cluster, ctx.b,
                                                                         scale=ctx.scale),
                f"gradients reduced onto one device, its update, weights broadcast{ctx.scaled}")
