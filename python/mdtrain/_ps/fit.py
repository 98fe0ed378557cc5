"""`model.fit` under ParameterServerStrategy: each training step is a closure the coordinator
schedules on some worker (as TF's Keras does), on that worker's own dataset iterator.

Data: a `DatasetCreator(dataset_fn)` or a function `dataset_fn(input_context)` (made on every
worker), a dataset (each worker iterates its own copy), or arrays x, y (each worker draws batches
from its own shuffle of them). The per-worker data repeats, so `steps_per_epoch` decides the
epoch (required unless it can be counted: arrays, or a finite dataset). Epoch logs are the means
over the epoch's steps, weighted by their rows. Batch-level callbacks see each step's logs when
the epoch's steps have finished (the steps run concurrently on the workers). Each closure runs
compile's `steps_per_execution` steps (as TF recommends for this strategy: fewer round trips).

Fault tolerance: `keras.callbacks.BackupAndRestore(backup_dir, save_freq)` makes the servers write
a checkpoint at each epoch end (or every save_freq steps); a parameter server that dies makes
every server restart from the last one and fit resumes at its step, and a chief started again
resumes from it too.
"""
import json
import logging
import math
import os
import shutil
import warnings

import numpy as np

from mdtrain._atomic import atomic_path
from mdtrain._ps.coordinator import ParameterServersRestored

_log = logging.getLogger("mdtrain")


class DatasetCreator:
    """tf.keras.utils.experimental.DatasetCreator(dataset_fn, input_options=None)."""

    def __init__(self, dataset_fn, input_options=None):
        if not callable(dataset_fn):
            raise TypeError(f"DatasetCreator: dataset_fn must be callable, got {dataset_fn!r}")
        self.dataset_fn = dataset_fn
        self.input_options = input_options

    def __call__(self, input_context):
        return self.dataset_fn(input_context)


class _Batches:
    """A worker's endless (x, y, sample_weight or None) batches of a dataset or of a dataset_fn's
    dataset."""

    def __init__(self, source):
        self.source = source

    def __call__(self, input_context=None):
        from mdtrain.keras._data_adapter import _xy

        source = self.source
        dataset = source(input_context) if callable(source) else source
        while True:
            produced = False
            for element in dataset:
                produced = True
                yield _xy(element, "fit")
            if not produced:
                raise ValueError("fit: the dataset yielded no batches")


class _ArrayBatches:
    """A worker's endless (x, y, sample_weight or None) batches of arrays: its own shuffle of them,
    pass after pass."""

    def __init__(self, x, y, batch_size, shuffle, seed, w=None):
        self.x, self.y, self.batch_size, self.shuffle, self.seed = x, y, batch_size, shuffle, seed
        self.w = w

    def __call__(self, input_context=None):
        worker = 0 if input_context is None else input_context.input_pipeline_id
        n = len(self.x)
        for rotation in range(2 ** 62):
            order = (np.random.default_rng([self.seed, worker, rotation]).permutation(n) if self.shuffle
                     else np.arange(n))
            for begin in range(0, n, self.batch_size):
                rows = order[begin:begin + self.batch_size]
                yield self.x[rows], self.y[rows], None if self.w is None else self.w[rows]


def _train_step(model, iterator, class_weight):
    """One training step on a worker (class_weight: fit's, for the batches of a dataset)."""
    x, y, w = next(iterator)
    logs = model.train_on_batch(x, y, sample_weight=w, class_weight=class_weight, return_dict=True)
    return len(x), logs


def _train_steps(model, iterator, steps, class_weight=None):
    """The closure fit schedules: `steps` training steps on a worker (compile's steps_per_execution)."""
    return [_train_step(model, iterator, class_weight) for _ in range(steps)]


def fit(model, strategy, x, y, batch_size, epochs, verbose, callbacks, validation_data, shuffle, initial_epoch,
        steps_per_epoch, validation_batch_size, validation_freq, sample_weight=None, class_weight=None):
    from mdtrain.keras import callbacks as _callbacks
    from mdtrain.keras._data_adapter import check_batch_size, check_count, is_dataset
    from mdtrain.keras._sample_weights import per_sample_weights

    if validation_data is not None and is_dataset(validation_data):
        raise ValueError("fit under ParameterServerStrategy: pass validation_data as arrays (x_val, y_val)")
    if isinstance(x, DatasetCreator) or (callable(x) and not is_dataset(x)):
        if y is not None or sample_weight is not None:
            raise ValueError("fit: with a dataset function, y and sample_weight must not be given (it yields "
                             "(x, y) or (x, y, sample_weight))")
        if steps_per_epoch is None:
            raise ValueError("fit under ParameterServerStrategy: steps_per_epoch is required with a DatasetCreator "
                             "or dataset function (each worker's dataset repeats)")
        source = _Batches(x)
    elif is_dataset(x):
        if y is not None or sample_weight is not None:
            raise ValueError("fit: when x is a dataset it yields (x, y) or (x, y, sample_weight); y and "
                             "sample_weight must not be given")
        if steps_per_epoch is None:
            card = int(x.cardinality())
            if card < 0:
                raise ValueError("fit under ParameterServerStrategy: steps_per_epoch is required with an infinite "
                                 "dataset")
            steps_per_epoch = card
        source = _Batches(x)
    else:
        prepared_x, prepared_y = model._prepare_xy(x, y, "fit")  # checks now; workers convert their batches
        # Array weights (class_weight read from all labels at once) go to the workers with the arrays.
        weights = per_sample_weights(sample_weight, class_weight, prepared_y, "fit")
        class_weight = None
        if len(prepared_x) == 0:
            raise ValueError("fit: the training data is empty (x has 0 samples)")
        batch_size = check_batch_size(batch_size, "fit")
        if steps_per_epoch is None:
            steps_per_epoch = math.ceil(len(prepared_x) / batch_size)
        source = None
        del prepared_x, prepared_y
    steps = check_count(steps_per_epoch, "steps_per_epoch", "fit")
    if validation_data is not None:
        vx, vy = model._prepare_xy(validation_data[0], validation_data[1], "fit (validation_data)")
        vw = per_sample_weights(validation_data[2] if len(validation_data) == 3 else None, None, vy,
                                "fit (validation_data)")
        validation_data = (vx, vy, vw)

    coordinator = strategy._coordinator_or_new()
    job = strategy._job(model)
    if source is None:
        # The arrays go to each worker once (as the caller's arrays: uint8 images stay 4x smaller
        # than float32) and their endless shuffle continues from one fit call to the next.
        key = (id(x), id(y), batch_size, shuffle not in (False, None),
               None if weights is None else weights.tobytes())
        cached = job.array_iterators.get(key)
        if cached is None:
            source = _ArrayBatches(np.asarray(x), np.asarray(y), batch_size, key[3], model._epoch_seed(), weights)
            cached = job.array_iterators[key] = (x, y, iter(coordinator.create_per_worker_dataset(source)))
        iterator = cached[2]
    else:
        iterator = iter(coordinator.create_per_worker_dataset(source))

    callbacks = list(callbacks or [])
    backups = [cb for cb in callbacks if isinstance(cb, _callbacks.BackupAndRestore)]
    callbacks = [cb for cb in callbacks if not isinstance(cb, _callbacks.BackupAndRestore)]
    backup = _PsBackup(backups[0], job) if backups else None
    cbs = _callbacks.CallbackList(callbacks, add_history=True, add_progbar=verbose != 0, model=model,
                                  verbose=verbose, epochs=epochs, steps=steps)
    model.stop_training = False
    epoch, step = initial_epoch, 0
    if backup is not None:
        epoch, step = backup.restore() or (epoch, step)
    cbs.on_train_begin()
    logs = {}
    while epoch < epochs and not model.stop_training:
        if step == 0:
            cbs.on_epoch_begin(epoch)
        try:
            results = []
            per_closure = getattr(model, "_steps_per_execution", 1)
            while step < steps:
                chunk = steps - step if backup is None or backup.every is None else min(backup.every, steps - step)
                chunk_results = []
                for first in range(0, chunk, per_closure):
                    k = min(per_closure, chunk - first)
                    chunk_results.append(coordinator.schedule(_train_steps, args=(model, iterator, k, class_weight),
                                                              steps=k))
                coordinator.join()
                step += chunk
                results += chunk_results
                if backup is not None and backup.every is not None and step < steps:
                    _with_servers(coordinator, backup.save, epoch, step)
            logs = _epoch_logs(results, cbs)
            _with_servers(coordinator, job.log_staleness, epoch)
            _with_servers(coordinator, job.pull_into_model)
            if backup is not None:
                _with_servers(coordinator, backup.save, epoch + 1, 0)
        except ParameterServersRestored as restored:
            _log.warning("fit: %s", restored)
            epoch, step = job.checkpoint_position
            continue
        if validation_data is not None and (epoch + 1) % validation_freq == 0:
            val_logs = model._core.evaluate(validation_data[0], validation_data[1],
                                            check_batch_size(validation_batch_size, "fit", batch_size or 32), None,
                                            validation_data[2])
            logs.update({"val_" + k: v for k, v in val_logs.items()})
        epoch, step = epoch + 1, 0
        cbs.on_epoch_end(epoch - 1, logs)
    job.pull_into_model()
    cbs.on_train_end(logs)
    if backup is not None and backup.callback.delete_checkpoint and not model.stop_training:
        backup.delete()
    return model.history


def _with_servers(coordinator, fn, *args):
    """A call of the chief's to the servers between steps: a server that does not answer restarts
    them all from the last checkpoint, as a worker's failed step does."""
    try:
        return fn(*args)
    except TimeoutError as e:
        if not str(e).startswith("[ps] ps "):
            raise
        raise coordinator.restart_parameter_servers(e) from None


def _epoch_logs(results, cbs):
    """Row-weighted means of the steps' logs; batch callbacks see each step's own logs."""
    sums, rows = {}, 0
    for s, (n, logs) in enumerate(step for value in results for step in value.fetch()):
        rows += n
        for k, v in logs.items():
            sums[k] = sums.get(k, 0.0) + float(v) * n
        if cbs.needs_batch_hooks("train"):
            cbs.on_train_batch_begin(s)
            cbs.on_train_batch_end(s, dict(logs))
    if not math.isfinite(sums.get("loss", 0.0)):
        warnings.warn("fit: the loss became NaN or infinite", RuntimeWarning, stacklevel=3)
    return {k: v / rows for k, v in sums.items()}


class _PsBackup:
    """BackupAndRestore under ParameterServerStrategy: checkpoints the servers write (every server its
    piece, loadable with any server count), and where training stood."""

    _POSITION = "ps_position.json"

    def __init__(self, callback, job):
        self.callback, self.job = callback, job
        self.dir = callback.backup_dir
        self.every = None if callback.save_freq == "epoch" else int(callback.save_freq)
        os.makedirs(self.dir, exist_ok=True)

    def save(self, epoch, step):
        name = f"ps-epoch{epoch}-step{step}"
        target = os.path.join(self.dir, name)
        shutil.rmtree(target, ignore_errors=True)
        self.job.save(target)
        previous = self._read()
        with atomic_path(os.path.join(self.dir, self._POSITION)) as tmp, open(tmp, "w") as f:
            json.dump({"checkpoint": name, "epoch": epoch, "step": step}, f)
        self.job.checkpoint, self.job.checkpoint_position = os.path.abspath(target), (epoch, step)
        if previous and previous["checkpoint"] != name:
            shutil.rmtree(os.path.join(self.dir, previous["checkpoint"]), ignore_errors=True)

    def _read(self):
        try:
            with open(os.path.join(self.dir, self._POSITION)) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def restore(self):
        position = self._read()
        if position is None:
            self.save(0, 0)  # a failure before the first epoch ends restarts from the start
            return None
        target = os.path.abspath(os.path.join(self.dir, position["checkpoint"]))
        self.job.configure(load=target)
        self.job.checkpoint, self.job.checkpoint_position = target, (position["epoch"], position["step"])
        _log.warning("fit: resumed from %s (epoch %d, step %d)", target, position["epoch"] + 1, position["step"])
        return position["epoch"], position["step"]

    def delete(self):
        position = self._read()
        if position:
            shutil.rmtree(os.path.join(self.dir, position["checkpoint"]), ignore_errors=True)
        try:
            os.remove(os.path.join(self.dir, self._POSITION))
        except FileNotFoundError:
            pass
