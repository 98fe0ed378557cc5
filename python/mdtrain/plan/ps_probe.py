"""The parameter-server transport of this machine, measured with our own classes: a
`ParameterShardServer` (its C++ serving thread, ZeroMQ over tcp://127.0.0.1) and a
`ParameterServerClient` in this process, one float32 variable on one server, SGD on the server.

- A pull is one round trip: a small request, a reply carrying the variable's S bytes (the server
  copies its rows out, the client copies them into a new array). Its measured sizes (read
  piecewise-linearly, printed as their α–β fit: MeasuredTransfer) are the transport.
- A push is one round trip the other way (S bytes of gradient in, a small ack out) **and** the
  server applying the gradient before it acks (SGD here: a read and a write of the variable). It
  is fitted separately; push minus pull at a size is roughly that apply, which depends on the
  optimizer, so the planner costs a push as the pull's transfer plus the model's own measured
  update (not this SGD's).

Both ends run in one process on their own threads, so what this measures is the transport when
each end has a core; a worker and servers that share fewer cores than they have threads also wait
for one (the planner's replay deals them over the cores). The median of `repeats` rounds at each
size, as the other probes: a step pays the typical round trip, not the best."""
import json
import time

import numpy as np

from mdtrain.plan.alpha_beta import measured_transfer

PS_SIZES = (4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20)  # a small layer's bias .. a large layer's kernel


def _sgd():
    from mdtrain import _core
    return _core.make_optimizer(json.dumps({"class_name": "SGD", "config": {"learning_rate": 1e-6}}))


def _round_trips(nbytes, repeats):
    """(median seconds of a pull, of a push) of one float32 variable of `nbytes` on one server."""
    from mdtrain import _core
    values = nbytes // 4
    layout = _core.PsShardLayout.make(1, [("probe", (values,), "float32")], [_core.ps_fixed_shards(1, [values])])
    server = _core.ParameterShardServer(layout, 0, [], _sgd())
    try:
        client = _core.ParameterServerClient(layout, [server.endpoint], 0, timeout=30.0)
        grad = [np.ones(values, np.float32)]
        # Enough round trips per round that a round lasts about a millisecond or more.
        iters = max(2, min(50, (4 << 20) // max(nbytes, 1)))
        _, versions = client.pull()  # connects; first touch of the server's and client's buffers
        client.push(grad, versions)
        pulls, pushes = [], []
        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(iters):
                _, versions = client.pull()
            pulls.append((time.perf_counter() - t) / iters)
            t = time.perf_counter()
            for _ in range(iters):
                client.push(grad, versions)
            pushes.append((time.perf_counter() - t) / iters)
        return float(np.median(pulls)), float(np.median(pushes))
    finally:
        server.stop()


def measure_ps_transport(repeats=5, sizes=PS_SIZES):
    """(AlphaBeta of a pull, AlphaBeta of a push including the server's SGD apply, a sentence
    saying where they come from), or (None, None, the reason) when they cannot be measured."""
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ValueError(f"measure_ps_transport: repeats must be an integer >= 1, got {repeats!r}")
    from mdtrain import _core
    if not _core.zmq_available():
        return None, None, "parameter-server transport not measured: mdtrain was built without ZeroMQ"
    try:
        timed = [_round_trips(s, repeats) for s in sizes]
    except (RuntimeError, TimeoutError, OSError) as e:
        return None, None, f"parameter-server transport not measured: the loopback probe failed ({e})"
    pull = measured_transfer(sizes, [t[0] for t in timed])
    push = measured_transfer(sizes, [t[1] for t in timed])
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return pull, push, (f"ZeroMQ PS transport measured {stamp}: pull/push of one float32 variable, "
                        f"{sizes[0] >> 10} KB..{sizes[-1] >> 20} MB, one in-process server on tcp://127.0.0.1, "
                        f"median of {repeats} rounds")
