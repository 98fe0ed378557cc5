"""WavefrontPipeline for a recurrent stack: p = 2, 4, .. stages (one CPU device each, one process),
time chunks of about 1/2 .. 1/16 of the sequence, each priced from the core's plan
(price_pipeline.price_wavefront); skipped when the model's leading layers are not p recurrent
layers with return_sequences=True, or the cluster is not one host's CPU devices."""
from mdtrain.plan import price_pipeline
from mdtrain.plan.candidates import powers_of_two_up_to

RANK = 60


def time_chunks(timesteps):
    """The time chunks a wavefront plan considers: about 2, 4, 8 and 16 chunks of the sequence."""
    return sorted({max(1, -(-timesteps // k)) for k in (2, 4, 8, 16)}, reverse=True)


def candidates(ctx):
    cluster = ctx.cluster
    shape = getattr(ctx.model, "input_shape", None) or ()
    timesteps = shape[1] if len(shape) == 3 and isinstance(shape[1], int) else None
    if timesteps is None:
        return  # not a sequence model: nothing to cut in time
    for p in powers_of_two_up_to(min(cluster.num_devices, 8))[1:]:
        if cluster.hosts > 1 or cluster.cores is None:
            ctx.skip("WavefrontPipeline", p, {"stages": p},
                     "the wavefront pipeline runs on one process's logical CPU devices only")
            continue
        for chunk in time_chunks(timesteps):
            settings = {"stages": p, "time_chunk": chunk, "mesh": (p,)}
            try:
                step = price_pipeline.wavefront_plan(ctx.model, p, chunk, ctx.b)
            except ValueError as e:
                ctx.skip("WavefrontPipeline", p, {"stages": p}, str(e))
                break
            chunks = -(-timesteps // chunk)
            ctx.add("WavefrontPipeline", p, settings,
                    price_pipeline.price_wavefront(step, ctx.prof, cluster, timesteps, ctx.scale),
                    f"{p} stages of recurrent layers, {chunks} time chunks of {chunk} steps flowing stage to stage"
                    f"{ctx.scaled}")
