"""PipelineParallel with 2, 4 and 8 stages cut by time, m = p..8p micro-batches, GPipe and 1F1B: the
core's pipeline StepPlan (the one PipelineExecutor runs), priced op by op (price_pipeline.py). On
this machine each stage is timed as it runs (stage_profile.py); elsewhere its layers' profiled
times are scaled."""
from mdtrain.plan import price_pipeline, stage_profile
from mdtrain.plan.candidates import powers_of_two_up_to

RANK = 50


def candidates(ctx):
    prof, b, n_all = ctx.prof, ctx.b, ctx.cluster.num_devices
    layers = len(prof.layers)
    time_stages_here = ctx.scale == 1.0 and all(layer.points for layer in prof.layers)
    for p in powers_of_two_up_to(min(n_all, 8))[1:]:
        dp = n_all // p
        if p > layers:
            ctx.skip("PipelineParallel", p * dp, {"stages": p}, f"{p} stages > {layers} layers")
            continue
        # The cut stages="balance_time" makes (the executor times each layer once, whatever m).
        starts = price_pipeline.balance_time_starts(prof, p)
        for m in (p, 2 * p, 4 * p, 8 * p):
            if b % (dp * m):
                ctx.skip("PipelineParallel", p * dp, {"stages": p, "microbatches": m},
                         f"global batch {b} not divisible by batch axis {dp} x {m} micro-batches")
                continue
            for schedule in ("gpipe", "1f1b"):
                measured = (stage_profile.measure_stage_costs(ctx.model, starts, b // (dp * m), schedule, m)
                            if time_stages_here else None)
                step = price_pipeline.pipeline_plan(prof, p, m, schedule, dp, b, stage_starts=starts)
                result, bubble, _ = price_pipeline.price_pipeline(step, prof, ctx.cluster, ctx.scale,
                                                                  measured_stages=measured)
                ctx.add("PipelineParallel", p * dp, {"stages": p, "microbatches": m, "schedule": schedule,
                                                     "mesh": (p, dp), "stage_starts": starts}, result,
                        f"{p} stages cut by time, {m} micro-batches of {b // (dp * m)} rows, {schedule}: "
                        f"bubble {bubble / max(result.step_time_s, 1e-30):.0%} of the step{ctx.scaled}")
