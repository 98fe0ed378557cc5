"""How many micro-batches' activations a pipeline stage holds at its peak, over its op list (as
peak_in_flight in cpp/mdtrain/strategy/pipeline_schedule.h counts it)."""


def peak_in_flight(stage_ops):
    held = peak = 0
    for kind, _ in stage_ops:
        if kind == "forward":
            held += 1
            peak = max(peak, held)
        elif kind == "backward":
            held -= 1
    return peak
