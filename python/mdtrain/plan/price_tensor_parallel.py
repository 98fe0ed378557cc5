"""Prices ModelParallel's StepPlan (cpp/mdtrain/strategy/tensor_parallel_step_plan.h): the plan the
ModelParallelExecutor runs, made by the same core function from a profiled model's layers.

`forms` asks the core for the Megatron layout a planner writes over a model axis of t (pairs of
Dense layers: column-parallel then row-parallel; a Dense with no partner gathers its output) and
`tensor_parallel_plan` for the plan of a (batch=dp, model=t) mesh (one segment per layer, each
profiled layer one weight, split over "model" when its form shards it). `price` replays the model
group of batch 0 (its devices' ops in order): a forward or backward of a sharded layer costs its
profiled time divided by t (assumed to split evenly); the model axis's collectives block the
group's threads where the plan puts them; after backward, the batch axis's gradient sync (its
collectives in the plan's order, blocking) and each device's update of its values."""
from mdtrain import _core
from mdtrain.plan.price_plan import _collective_seconds
from mdtrain.plan.profile import BYTES_PER_VALUE
from mdtrain.plan.simulate import COMMUNICATION
from mdtrain.plan.step_costs import (StepResult, _breakdown, add_update, on_core, overhead_seconds, start_replay,
                                update_seconds)


def forms(profile, t):
    """Each profiled layer's form over a model axis of t, as the core decides it."""
    return list(_core.tensor_parallel_forms([(layer.kind, layer.params, layer.activation_values)
                                             for layer in profile.layers], t))


def plan_layers(profile, layer_forms):
    """The profiled layers as the core's plan reads them."""
    out, inputs = [], profile.input_values
    for i, (layer, form) in enumerate(zip(profile.layers, layer_forms)):
        out.append({"name": layer.name, "form": form, "input_values": inputs,
                    "output_values": layer.activation_values, "input_grad": i > 0,
                    "weights": [(layer.name, layer.params, 0 if form != "replicated" else -1)]})
        inputs = layer.activation_values
    return out


def tensor_parallel_plan(profile, layer_forms, t, dp, global_batch, cpu_devices=True):
    """The core's ModelParallel StepPlan of the profiled model on a (batch=dp, model=t) mesh; on CPU
    devices of one process (cpu_devices) the batch axis's sync is ZeRO-1, else bucketed all-reduces."""
    return _core.tensor_parallel_step_plan(plan_layers(profile, layer_forms), [dp, t], ["batch", "model"],
                                           model_axis="model", batch_axis="batch", cpu_devices=cpu_devices,
                                           global_batch=global_batch)


def _sharded_segments(plan):
    """Per segment: the model axis's size when one of its weights is split over it, else 1."""
    t = plan.mesh_shape[plan.mesh_axes.index("model")]
    out = []
    for seg in plan.segments:
        mine = [w for w in plan.layouts if w["weight"] == seg["name"] or w["weight"].startswith(seg["name"] + "/")]
        out.append(t if any(w["axis"] for w in mine) else 1)
    return out


def price(plan, profile, cluster, scale=1.0):
    """The simulated step of a tensor-parallel `plan` of the profiled model (one segment per
    profiled layer)."""
    layers = profile.layers
    if len(plan.segments) != len(layers):
        raise ValueError(f"price_tensor_parallel: the plan has {len(plan.segments)} segments for {len(layers)} "
                         f"profiled layers")
    t = plan.mesh_shape[plan.mesh_axes.index("model")]
    dp = plan.devices // t
    shard = _sharded_segments(plan)
    cluster, sim, compute, devs, group = start_replay(profile, cluster, scale, t)
    ops = [plan.ops(j) for j in range(len(devs))]
    sim.add("replica hand-off", group, cluster.step_overhead(t * dp), category=COMMUNICATION)
    for j, d in enumerate(devs):
        sim.add(f"{d} gather+loss", on_core(cluster, d, j), overhead_seconds(profile, scale))
    # The devices of a model group run the same ops in the same order: device 0's list, each
    # forward and backward as every replayed device's own, each update as its own values.
    rows = max((op["rows"] for op in ops[0] if op["kind"] in ("forward", "backward")), default=0)
    slots = profile.optimizer_slots
    # A device's values as the planner costs them: its layers' profiled values, split ones / t.
    local_values = sum(w["values"] / t if w["axis"] else w["values"] for w in plan.layouts)
    synced = max(1, plan.syncs[0]["values"])
    for op in ops[0]:
        kind = op["kind"]
        if kind in ("forward", "backward"):
            i = op["segment"]
            for j, d in enumerate(devs):
                if kind == "forward":
                    compute.add(f"{d} fwd {layers[i].name}", on_core(cluster, d, j),
                                lambda shared, i=i: layers[i].forward_time(rows, shared) / shard[i])
                else:
                    compute.add(f"{d} bwd {layers[i].name}", on_core(cluster, d, j),
                                lambda shared, i=i: layers[i].backward_time(rows, shared) / shard[i])
        elif kind == "collective":
            sim.add(f"{op['collective']} ({op['axis']} axis)", group, _collective_seconds(op, cluster, False),
                    category=COMMUNICATION)
        elif kind == "update":
            for j, d in enumerate(devs):
                mine = [u for u in ops[j] if u["kind"] == "update"]
                share = mine[0]["values"] / synced if mine else 0.0
                add_update(sim, f"{d} update", on_core(cluster, d, j),
                           update_seconds(local_values * share, slots, cluster, profile, scale), profile, cluster,
                           scale)
    timeline = sim.run()
    act = rows * BYTES_PER_VALUE * (profile.input_values +
                                    sum(layer.activation_values / shard[i] for i, layer in enumerate(layers)))
    return StepResult(timeline.makespan, _breakdown(timeline, devs),
                      local_values * BYTES_PER_VALUE * (2 + slots) + act, timeline)


def tensor_parallel(profile, cluster, t, dp, global_batch, scale=1.0):
    """ModelParallel on a (batch=dp, model=t) mesh with the planner's layout: (the priced step, the
    layers' forms). The devices are CPU devices of one process (the batch axis ZeRO-1) where the
    cluster does not overlap communication with compute, GPUs where it does."""
    layer_forms = forms(profile, t)
    plan = tensor_parallel_plan(profile, layer_forms, t, dp, global_batch,
                                cpu_devices=not cluster.overlaps_communication)
    return price(plan, profile, cluster, scale=scale), layer_forms
