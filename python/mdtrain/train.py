"""tf.train: Checkpoint, CheckpointManager and latest_checkpoint, over Keras 3's weights file.

A checkpoint is one HDF5 file in Keras 3's weights layout (_keras_weights): a Checkpoint holding
model=... (and that model's optimizer) writes exactly what model.save_weights("x.weights.h5")
writes, so model.load_weights() and Keras read it too. Other tracked values (scalar variables
such as a step counter) go under /checkpoint/<name>. Unlike TensorFlow's two-file checkpoints
(prefix.index, prefix.data-*), the path save() returns names the file itself ("<prefix>-<n>.weights.h5").
The directory's "checkpoint" file lists the checkpoints in TensorFlow's text form.
"""
import collections
import json
import os
import re
import time

import numpy as np

from mdtrain import _safe_hdf5
from mdtrain._atomic import atomic_path
from mdtrain._cluster import ClusterSpec  # noqa: F401  (tf.train.ClusterSpec)

_SUFFIX = ".weights.h5"
_STATE = "checkpoint"


def _h5py():
    from mdtrain.keras._keras_weights import _h5py as get

    return get()


def _file(path):
    path = os.fspath(path)
    return path if path.endswith(_SUFFIX) else path + _SUFFIX


class Checkpoint:
    """Checkpoint(model=..., optimizer=..., step=<variable>, ...).

    The optimizer is the model's own (compiled with it: its state is stored with the model, as
    Keras does) or a custom loop's (never compiled; it updates the model's variables through
    apply_gradients; with a compiled model, only once it has updated them): its slots are stored under /checkpoint/optimizers/<name>, keyed by the
    variable's position in model.trainable_variables, so a new model of the same architecture
    (whose layers have other names) restores them."""

    def __init__(self, root=None, **kwargs):
        from mdtrain.keras.models import Sequential
        from mdtrain.keras.optimizers import Optimizer

        if root is not None:
            kwargs.setdefault("model", root)
        self._model, self._values = None, {}
        optimizers = []
        for name, obj in kwargs.items():
            if isinstance(obj, Sequential):
                if self._model is not None:
                    raise ValueError("tf.train.Checkpoint: mdtrain checkpoints hold one model")
                self._model = obj
            elif isinstance(obj, Optimizer):
                optimizers.append((name, obj))
            elif hasattr(obj, "numpy") and hasattr(obj, "assign"):
                self._values[name] = obj
            else:
                raise TypeError(f"tf.train.Checkpoint: {name}={obj!r} cannot be checkpointed (models, their "
                                "optimizer and variables can)")
        self._loop_optimizers = {}
        for name, opt in optimizers:
            if self._model is not None and self._model.optimizer is opt:
                continue
            applied = opt.__dict__.get("_tape_variable_ids")
            loop_optimizer = self._model is not None and opt._model_core is None and (
                self._model.optimizer is None or
                applied == [v._id for v in self._model.trainable_variables])
            if not loop_optimizer:
                raise ValueError(f"tf.train.Checkpoint: {name}= must be the optimizer of the checkpointed model "
                                 "(the one it was compiled with, or a custom loop's optimizer of its variables)")
            self._loop_optimizers[name] = opt
        self._include_optimizer = bool(optimizers) or self._model is not None
        self.save_counter = _Counter()

    # ---- writing -----------------------------------------------------------------------------
    def write(self, file_prefix):
        """Writes one checkpoint file (atomically) and returns its path."""
        from mdtrain.keras import _keras_weights

        path = _file(file_prefix)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with atomic_path(path) as tmp:
            if self._model is not None:
                _keras_weights.write(self._model, tmp, include_optimizer=self._include_optimizer)
            with _h5py().File(tmp, "a" if self._model is not None else "w") as f:
                group = f.require_group("checkpoint")
                group.attrs["save_counter"] = self.save_counter.value
                for name, var in self._values.items():
                    group.create_dataset(name, data=np.asarray(var.numpy()))
                for name, opt in self._loop_optimizers.items():
                    self._write_loop_optimizer(group.create_group(f"optimizers/{name}"), opt)
        return path

    def _write_loop_optimizer(self, group, optimizer):
        """A custom loop optimizer's state; slot names say the variable's trainable index."""
        paths = [v.path for v in self._model.trainable_variables]
        names = []
        for i, (state_name, value) in enumerate(optimizer._standalone.state()):
            var, _, kind = state_name.rpartition("/")
            names.append(f"{paths.index(var)}/{kind}" if var in paths else state_name)
            group.create_dataset(str(i), data=np.asarray(value))
        group.attrs["names"] = json.dumps(names)

    def _read_loop_optimizer(self, group, optimizer, path):
        variables = self._model.trainable_variables
        state = []
        try:
            saved_names = json.loads(group.attr("names") or "[]")
        except (TypeError, ValueError):
            saved_names = None
        if not isinstance(saved_names, list) or not all(isinstance(n, str) for n in saved_names):
            raise ValueError(f"tf.train.Checkpoint: {path}: {group.path} has no valid 'names' attribute (a JSON "
                             "list of slot names)")
        largest = 8 * max((int(np.prod(v.shape)) for v in variables), default=0) + 8
        for i, saved in enumerate(saved_names):
            index, _, kind = saved.partition("/")
            if index.isdigit():
                if int(index) >= len(variables):
                    raise ValueError(f"tf.train.Checkpoint: {path} holds optimizer slots for more variables than "
                                     f"the model's {len(variables)}")
                saved = f"{variables[int(index)].path}/{kind}"
            shape = tuple(variables[int(index)].shape) if index.isdigit() else None
            state.append((saved, group.read(str(i), shape=shape, max_bytes=largest)))
        optimizer._standalone.set_state(state)
        # The optimizer now holds slots for the model's variables: apply_gradients continues them.
        if optimizer.__dict__.get("_tape_variable_ids") is None and len(state) > 1:
            optimizer._tape_variable_ids = [v._id for v in variables]

    def save(self, file_prefix):
        """Writes "<file_prefix>-<n>.weights.h5" (n counts saves) and records it in the directory's
        "checkpoint" file, which tf.train.latest_checkpoint reads."""
        self.save_counter.value += 1
        path = self.write(f"{os.fspath(file_prefix)}-{self.save_counter.value}")
        _update_state(os.path.dirname(os.path.abspath(path)), os.path.abspath(path), None)
        return path

    # ---- reading -----------------------------------------------------------------------------
    def read(self, save_path):
        from mdtrain.keras import _keras_weights

        if save_path is None:
            return _InitializationOnlyStatus()
        path = _file(save_path) if not os.path.exists(os.fspath(save_path)) else os.fspath(save_path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"tf.train.Checkpoint: no checkpoint at {save_path}")
        if self._model is not None and not self._model.built:
            return self._defer(path)
        status = _LoadStatus(path)
        if self._model is not None:
            _keras_weights.read(self._model, path, "tf.train.Checkpoint", self._include_optimizer)
        # Through the safe reader: nothing outside the file, each dataset checked before it is read.
        with _safe_hdf5.File(path, "tf.train.Checkpoint") as f:
            group = f.root.group("checkpoint")
            for name, var in self._values.items():
                if group is None or name not in group:
                    # As TF: restore goes on; assert_consumed / assert_existing_objects_matched name it.
                    status._unmatched.append(f"{name!r} (no value in the file)")
                    continue
                var.assign(group.read(name, shape=np.shape(var.numpy())))
            for name, opt in self._loop_optimizers.items():
                loop_group = group.group(f"optimizers/{name}") if group is not None else None
                if loop_group is not None:
                    self._read_loop_optimizer(loop_group, opt, path)
                else:
                    status._unmatched.append(f"optimizer {name!r} (no slots in the file)")
            self._match(f, status)
            save_counter = group.attr("save_counter") if group is not None else None
            if save_counter is not None:
                self.save_counter.value = int(save_counter)
        return status

    restore = read

    def _match(self, f, status):
        """What assert_consumed checks, as TF: the datasets of the file no object of this
        checkpoint took (status._unused) and the objects the file has no value for (_unmatched)."""
        taken = {f"/checkpoint/{name}" for name in self._values}
        taken |= {f"/checkpoint/optimizers/{name}" for name in self._loop_optimizers}
        model = self._model
        if model is not None:
            taken |= {f"/layers/{key}" for key in _layer_groups(model, f.root.group("layers"))}
            if self._include_optimizer and model.optimizer is not None:
                stored = f.root.group("optimizer/vars")
                if stored is None or len(stored) == 0:
                    status._unmatched.append(f"the optimizer of model '{model.name}' (no optimizer variables in "
                                             "the file)")
                taken.add("/optimizer")
        status._matched = bool(model is not None or len(status._unmatched) < len(self._values) +
                               len(self._loop_optimizers))
        status._unused = [p for p in _dataset_paths(f)
                          if not any(p == t or p.startswith(t + "/") for t in taken)]

    def _defer(self, path):
        """TF restores into variables created later (deferred restoration): a model that is not
        built yet (no input shape) takes the checkpoint when it is built, by fit, predict, build
        or its first call, whichever comes first."""
        model, checkpoint = self._model, self
        build = model._maybe_build  # every way a Sequential gets built goes through it
        status = _LoadStatus(path)
        status._pending = f"model '{model.name}' is not built yet: its weights are restored when it is built"

        def build_then_restore():
            build()
            if model.built and model.__dict__.get("_maybe_build") is build_then_restore:
                del model._maybe_build
                status._take(checkpoint.read(path))

        model._maybe_build = build_then_restore
        return status


class _Counter:
    def __init__(self):
        self.value = 0

    def numpy(self):
        return np.int64(self.value)

    def __int__(self):
        return self.value


_MAX_OBJECTS = 100_000  # a checkpoint walk stops here (a hard-link cycle would never end)


def _dataset_paths(f):
    """Every dataset of the file, by path, walking hard links only (mdtrain._safe_hdf5 refuses
    the others)."""
    found, stack, seen = [], [f.root], 0
    while stack:
        group = stack.pop()
        for key in group.keys():
            seen += 1
            if seen > _MAX_OBJECTS:
                f.fail(group.path, f"is part of a tree of more than {_MAX_OBJECTS} objects; not a checkpoint")
            node = group.get(key)
            if isinstance(node, _safe_hdf5.Group):
                stack.append(node)
            elif node is not None:
                found.append(node.path)
    return sorted(found)


def _layer_groups(model, stored):
    """The /layers groups _keras_weights.read takes for the model's layers (by Keras's numbering,
    or, for a functional model whose groups name all its layers, by name)."""
    from mdtrain.keras import _keras_weights

    names = _keras_weights.layer_keys(model)
    if model._graph is not None and stored is not None:
        by_name = {}
        for key in stored.keys():
            vars_group = stored.group(f"{key}/vars") if isinstance(stored.get(key), type(stored)) else None
            name = vars_group.attr("name") if vars_group is not None else None
            if isinstance(name, str):
                by_name[name] = key
        if all(layer.name in by_name for layer in model._layers):
            names = [by_name[layer.name] for layer in model._layers]
    return names


def _listed(items, limit=10):
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


class _LoadStatus:
    """What restore() returns, with TF's checks: assert_consumed raises AssertionError when a value
    in the file was not taken by any object or an object got no value; assert_existing_objects_matched
    only for the latter; expect_partial silences nothing here (mdtrain warns of nothing unused)."""

    def __init__(self, path):
        self._path = path
        self._unused, self._unmatched = [], []
        self._matched = True
        self._pending = None  # why the restore is not done yet (deferred until the model is built)

    def _take(self, other):
        self._unused, self._unmatched, self._matched = other._unused, other._unmatched, other._matched
        self._pending = None

    def assert_consumed(self):
        problems = []
        if self._pending:
            problems.append(self._pending)
        if self._unmatched:
            problems.append(f"objects without a value: {_listed(self._unmatched)}")
        if self._unused:
            problems.append(f"{len(self._unused)} value(s) in the file not restored into any object: "
                            f"{_listed(self._unused)}")
        if problems:
            raise AssertionError(f"tf.train.Checkpoint: {self._path} was not fully consumed: " + "; ".join(problems))
        return self

    def assert_existing_objects_matched(self):
        if self._unmatched:
            raise AssertionError(f"tf.train.Checkpoint: {self._path} has no value for {_listed(self._unmatched)}")
        return self

    def assert_nontrivial_match(self):
        if not self._pending and not self._matched:
            raise AssertionError(f"tf.train.Checkpoint: nothing of {self._path} matched an object of the checkpoint")
        return self

    def expect_partial(self):
        return self

    def run_restore_ops(self, session=None):
        """TF 1's graph-mode hook; restoring ran already."""

    def initialize_or_restore(self, session=None):
        """TF 1's graph-mode hook; restoring ran already."""


class _InitializationOnlyStatus(_LoadStatus):
    """restore(None): nothing is restored; the assertions fail as TF's do."""

    def __init__(self):
        super().__init__(None)

    def _fail(self):
        raise AssertionError("No checkpoint specified (save_path=None); nothing is being restored.")

    def assert_consumed(self):
        self._fail()

    def assert_existing_objects_matched(self):
        self._fail()

    def assert_nontrivial_match(self):
        self._fail()


def _quote(path):
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unquote(text):
    return text.replace('\\"', '"').replace("\\\\", "\\")


_QUOTED = r'"((?:[^"\\]|\\.)*)"'


class _State:
    """A directory's "checkpoint" file (TF's CheckpointState in text form): the latest checkpoint,
    all recorded ones (oldest first) and, when a CheckpointManager wrote it, their timestamps and
    the last time keep_checkpoint_every_n_hours preserved one."""

    def __init__(self, latest, paths, timestamps, last_preserved):
        self.latest, self.paths, self.timestamps, self.last_preserved = latest, paths, timestamps, last_preserved


def _read_state_file(directory, filename=_STATE):
    path = os.path.join(directory, filename)
    if not os.path.isfile(path):
        return None
    with open(path, errors="replace") as f:
        text = f.read(1 << 24)  # a state file lists paths; 16 MB is thousands of times more than any

    def resolve(p):
        return p if os.path.isabs(p) else os.path.join(directory, p)

    paths = [resolve(_unquote(m.group(1))) for m in re.finditer(rf"^all_model_checkpoint_paths:\s*{_QUOTED}", text,
                                                                 re.M)]
    latest = re.search(rf"^model_checkpoint_path:\s*{_QUOTED}", text, re.M)
    latest = resolve(_unquote(latest.group(1))) if latest else None
    timestamps = []
    for m in re.finditer(r"^all_model_checkpoint_timestamps:\s*(\S+)", text, re.M):
        try:
            timestamps.append(float(m.group(1)))
        except ValueError:
            timestamps = []
            break
    if len(timestamps) != len(paths):
        timestamps = []
    preserved = re.search(r"^last_preserved_timestamp:\s*(\S+)", text, re.M)
    try:
        preserved = float(preserved.group(1)) if preserved else 0.0
    except ValueError:
        preserved = 0.0
    return _State(latest, paths, timestamps, preserved)


def _read_state(directory, filename=_STATE):
    """The checkpoint paths recorded in directory/checkpoint, oldest first (the latest last)."""
    state = _read_state_file(directory, filename)
    if state is None:
        return []
    paths = state.paths
    if state.latest:
        paths = [p for p in paths if p != state.latest] + [state.latest]
    return paths


def _write_state(directory, latest, paths, timestamps=None, last_preserved=None):
    """Replaces directory/checkpoint atomically (a reader sees the old list or the new one)."""
    def rel(p):
        return os.path.relpath(p, directory) if os.path.dirname(os.path.abspath(p)) == directory else p

    text = f"model_checkpoint_path: {_quote(rel(latest))}\n" + "".join(
        f"all_model_checkpoint_paths: {_quote(rel(p))}\n" for p in paths)
    if timestamps is not None:
        text += "".join(f"all_model_checkpoint_timestamps: {t!r}\n" for t in timestamps)
        text += f"last_preserved_timestamp: {last_preserved!r}\n"
    with atomic_path(os.path.join(directory, _STATE)) as tmp:
        with open(tmp, "w") as f:
            f.write(text)


def _update_state(directory, latest, keep):
    paths = [p for p in _read_state(directory) if p != latest] + [latest]
    if keep is not None:
        paths = paths[-keep:]
    _write_state(directory, latest, paths)
    return paths


def _natural_key(name):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """The newest checkpoint in checkpoint_dir, or None.

    The one its "checkpoint" file (or latest_filename, as TF) names (Checkpoint.save,
    CheckpointManager); without that file, the newest weights file (*.weights.h5, *.keras: what
    ModelCheckpoint writes), by modification time and then by the numbers in the name (ckpt_10
    after ckpt_9)."""
    if latest_filename is not None and (not isinstance(latest_filename, str) or not latest_filename
                                        or os.path.basename(latest_filename) != latest_filename):
        raise ValueError(f"latest_checkpoint: latest_filename must be a file name in checkpoint_dir, got "
                         f"{latest_filename!r}")
    directory = os.fspath(checkpoint_dir)
    if not os.path.isdir(directory):
        return None
    recorded = [p for p in _read_state(directory, latest_filename or _STATE) if os.path.exists(p)]
    if recorded:
        return recorded[-1]
    if latest_filename is not None:  # TF reads only the named state file
        return None
    files = [os.path.join(directory, n) for n in os.listdir(directory) if n.endswith((_SUFFIX, ".keras"))]
    if not files:
        return None
    return max(files, key=lambda p: (os.stat(p).st_mtime_ns, _natural_key(os.path.basename(p))))


def _step_value(counter, what):
    value = counter.numpy() if hasattr(counter, "numpy") else counter
    value = np.asarray(value)
    if value.shape != () or value.dtype.kind not in "iu":
        raise ValueError(f"CheckpointManager: {what} must be an integer scalar (a step counter variable), got "
                         f"{value!r}")
    return int(value)


class CheckpointManager:
    """Keeps the newest max_to_keep checkpoints of a Checkpoint in directory (None: all), as TF.

    A manager deletes only checkpoints it manages: those it saved, and those of its own name
    (<directory>/<checkpoint_name>-<n>) that the directory's "checkpoint" file recorded when it was
    created (a restarted job goes on cleaning up its predecessor's). Two managers of other names in
    one directory therefore keep each other's files; the "checkpoint" file lists the checkpoints of
    whichever saved last, as in TF."""

    def __init__(self, checkpoint, directory, max_to_keep, keep_checkpoint_every_n_hours=None,
                 checkpoint_name="ckpt", step_counter=None, checkpoint_interval=None, init_fn=None):
        if max_to_keep is not None and (isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int)
                                        or max_to_keep < 1):
            raise ValueError(f"CheckpointManager: max_to_keep must be a positive integer or None, got {max_to_keep!r}")
        if keep_checkpoint_every_n_hours is not None and (
                isinstance(keep_checkpoint_every_n_hours, bool)
                or not isinstance(keep_checkpoint_every_n_hours, (int, float))
                or not keep_checkpoint_every_n_hours > 0):
            raise ValueError("CheckpointManager: keep_checkpoint_every_n_hours must be a positive number or None, got "
                             f"{keep_checkpoint_every_n_hours!r}")
        if not isinstance(checkpoint_name, str) or not checkpoint_name:
            raise ValueError(f"CheckpointManager: checkpoint_name must be a non-empty string, got {checkpoint_name!r}")
        if checkpoint_interval is not None:
            if step_counter is None:
                raise ValueError("CheckpointManager: `step_counter` should be passed if `checkpoint_interval` is not "
                                 "None.")
            if isinstance(checkpoint_interval, bool) or not isinstance(checkpoint_interval, (int, np.integer)) \
                    or checkpoint_interval < 1:
                raise ValueError("CheckpointManager: checkpoint_interval must be a positive integer, got "
                                 f"{checkpoint_interval!r}")
        if step_counter is not None:
            _step_value(step_counter, "step_counter")
        if init_fn is not None and not callable(init_fn):
            raise TypeError(f"CheckpointManager: init_fn must be callable, got {init_fn!r}")
        self._checkpoint = checkpoint
        self._directory = os.fspath(directory)
        self._max_to_keep = max_to_keep
        self._keep_every = keep_checkpoint_every_n_hours
        self._prefix = os.path.join(self._directory, checkpoint_name)
        self._step_counter = step_counter
        self._checkpoint_interval = checkpoint_interval
        self._last_checkpoint_step = None
        self._init_fn = init_fn
        os.makedirs(self._directory, exist_ok=True)
        # TF's bookkeeping: the checkpoints this manager may delete (path -> save time), oldest first.
        self._maybe_delete = collections.OrderedDict()
        now = time.time()
        state = _read_state_file(os.path.abspath(self._directory))
        if state is None:
            self._latest_checkpoint = None
            self._last_preserved_timestamp = now - 1.0  # as TF: a manager re-created at once keeps its first
            return
        self._last_preserved_timestamp = min(state.last_preserved, now)
        timestamps = state.timestamps or [self._last_preserved_timestamp] * len(state.paths)
        for path, stamp in zip(state.paths, timestamps):
            stamp = min(stamp, now)
            if self._owns(path) and stamp > self._last_preserved_timestamp:
                self._maybe_delete[path] = stamp
        mine = [p for p in state.paths if self._owns(p)]
        latest = state.latest if state.latest is not None and self._owns(state.latest) else None
        self._latest_checkpoint = latest or (mine[-1] if mine else None)

    def _owns(self, path):
        """A checkpoint file of this manager's name: <directory>/<checkpoint_name>-<n>.weights.h5."""
        prefix = os.path.abspath(self._prefix) + "-"
        path = os.path.abspath(path)
        return path.startswith(prefix) and path.endswith(_SUFFIX) and path[len(prefix):-len(_SUFFIX)].isdigit()

    @property
    def directory(self):
        return self._directory

    @property
    def checkpoint(self):
        return self._checkpoint

    @property
    def checkpoint_interval(self):
        return self._checkpoint_interval

    @property
    def checkpoints(self):
        """This manager's checkpoints, oldest first (those kept by keep_checkpoint_every_n_hours are
        no longer listed, as in TF)."""
        return list(self._maybe_delete)

    @property
    def latest_checkpoint(self):
        return self._latest_checkpoint

    def _record_state(self):
        if self._latest_checkpoint is None:
            return
        _write_state(os.path.abspath(self._directory), self._latest_checkpoint, list(self._maybe_delete),
                     list(self._maybe_delete.values()), self._last_preserved_timestamp)

    def _sweep(self):
        """Deletes this manager's oldest checkpoints beyond max_to_keep, except one per
        keep_checkpoint_every_n_hours (TF's rule: the first older than that since the last kept)."""
        if not self._max_to_keep:
            return
        while len(self._maybe_delete) > self._max_to_keep:
            path, stamp = self._maybe_delete.popitem(last=False)
            if self._keep_every and stamp - self._keep_every * 3600.0 >= self._last_preserved_timestamp:
                self._last_preserved_timestamp = stamp
                continue
            try:
                os.remove(path)
            except FileNotFoundError:
                pass  # removed by someone else meanwhile: gone either way

    def save(self, checkpoint_number=None, check_interval=True, options=None):
        """Writes <checkpoint_name>-<n>.weights.h5 (n: checkpoint_number, else the checkpoint's
        save counter), records it and deletes this manager's checkpoints beyond max_to_keep. With
        checkpoint_interval, returns None without saving until step_counter advanced that far."""
        if options is not None:
            raise NotImplementedError("CheckpointManager.save: options (tf.train.CheckpointOptions) are not supported")
        if self._checkpoint_interval is not None:
            step = _step_value(self._step_counter, "step_counter")
            if self._last_checkpoint_step is not None:
                if step == self._last_checkpoint_step:  # as TF: never twice at one step
                    return None
                if check_interval and step < self._last_checkpoint_step + self._checkpoint_interval:
                    return None
            self._last_checkpoint_step = step
        ckpt = self._checkpoint
        ckpt.save_counter.value += 1  # as TF: every save counts, numbered or not
        if checkpoint_number is None:
            number = ckpt.save_counter.value
        else:
            number = _step_value(checkpoint_number, "checkpoint_number")
        path = os.path.abspath(ckpt.write(f"{self._prefix}-{number}"))
        self._maybe_delete.pop(path, None)  # saved again: the newest now
        self._maybe_delete[path] = time.time()
        self._latest_checkpoint = path
        # As TF: the new checkpoint is recorded before anything is deleted (a crash while deleting
        # still finds it), then the list is recorded again without the deleted ones.
        self._record_state()
        self._sweep()
        self._record_state()
        return path

    def restore_or_initialize(self):
        """Restores the latest checkpoint and returns its path; without one, calls init_fn (if
        given) and returns None."""
        latest = self._latest_checkpoint
        if latest is not None:
            self._checkpoint.restore(latest)
            return latest
        if self._init_fn is not None:
            self._init_fn()
        return None
