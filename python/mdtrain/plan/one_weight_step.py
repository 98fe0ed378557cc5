"""The step of a one-weight model under a strategy: its layers' work is nothing, so its step is
what the strategy costs per step besides the work (waking and joining threads or processes,
handing out the batch, messages). Cluster.measure's probes run it in child processes
(cluster.py: replicas of one process; probes.py: MPI workers, pipeline stages), each under its
own strategy's scope."""
import numpy as np


def best_step(scope, batch, layers=1, steps=200, repeats=3):
    """Seconds per step of a chain of `layers` Dense(1) layers on one feature, built and compiled
    (SGD, MSE) under `scope`, fitted on `batch` rows per step: the best of `repeats` fits of
    `steps` steps, after a fit of steps // 10 steps that pays the first-step costs (thread start,
    allocations). The best, not the mean: these costs are small and the load only adds to them."""
    import mdtrain as tf
    with scope:
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(1,))] +
                                    [tf.keras.layers.Dense(1) for _ in range(layers - 1)])
        model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((batch * steps, 1), np.float32)
    warm = batch * max(1, steps // 10)
    model.fit(x[:warm], x[:warm], batch_size=batch, epochs=1, verbose=0)
    best = float("inf")
    for _ in range(repeats):
        model._core.reset_profile()
        model.fit(x, x, batch_size=batch, epochs=1, verbose=0, shuffle=False)
        best = min(best, model.step_time_breakdown()["step"])
    return best
