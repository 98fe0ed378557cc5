"""tf.train: Checkpoint, CheckpointManager and latest_checkpoint, over Keras 3's weights file.

A checkpoint is one HDF5 file in Keras 3's weights layout (_keras_weights): a Checkpoint holding
model=... (and that model's optimizer) writes exactly what model.save_weights("x.weights.h5")
writes, so model.load_weights() and Keras read it too. Other tracked values (scalar variables
such as a step counter) go under /checkpoint/<name>. Unlike TensorFlow's two-file checkpoints
(prefix.index, prefix.data-*), the path save() returns names the file itself ("<prefix>-<n>.weights.h5").
The directory's "checkpoint" file lists the checkpoints in TensorFlow's text form.
"""
import json
import os
import re

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
            return _LoadStatus()
        path = _file(save_path) if not os.path.exists(os.fspath(save_path)) else os.fspath(save_path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"tf.train.Checkpoint: no checkpoint at {save_path}")
        if self._model is not None and not self._model.built:
            return self._defer(path)
        if self._model is not None:
            _keras_weights.read(self._model, path, "tf.train.Checkpoint", self._include_optimizer)
        # Through the safe reader: nothing outside the file, each dataset checked before it is read.
        with _safe_hdf5.File(path, "tf.train.Checkpoint") as f:
            group = f.root.group("checkpoint")
            for name, var in self._values.items():
                if group is None or name not in group:
                    raise ValueError(f"tf.train.Checkpoint: {path} holds no value for {name!r}")
                var.assign(group.read(name, shape=np.shape(var.numpy())))
            for name, opt in self._loop_optimizers.items():
                loop_group = group.group(f"optimizers/{name}") if group is not None else None
                if loop_group is not None:
                    self._read_loop_optimizer(loop_group, opt, path)
            save_counter = group.attr("save_counter") if group is not None else None
            if save_counter is not None:
                self.save_counter.value = int(save_counter)
        return _LoadStatus()

    restore = read

    def _defer(self, path):
        """TF restores into variables created later (deferred restoration): a model that is not
        built yet (no input shape) takes the checkpoint when it is built, by fit, predict, build
        or its first call, whichever comes first."""
        model, checkpoint = self._model, self
        build = model._maybe_build  # every way a Sequential gets built goes through it

        def build_then_restore():
            build()
            if model.built and model.__dict__.get("_maybe_build") is build_then_restore:
                del model._maybe_build
                checkpoint.read(path)

        model._maybe_build = build_then_restore
        return _LoadStatus()


class _Counter:
    def __init__(self):
        self.value = 0

    def numpy(self):
        return np.int64(self.value)

    def __int__(self):
        return self.value


class _LoadStatus:
    """What restore() returns in TensorFlow; the checks pass once restore returned."""

    def assert_consumed(self):
        return self

    def assert_existing_objects_matched(self):
        return self

    def expect_partial(self):
        return self


def _quote(path):
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _read_state(directory):
    """The checkpoint paths recorded in directory/checkpoint, oldest first."""
    path = os.path.join(directory, _STATE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        text = f.read()
    paths = [m.group(1).replace('\\"', '"').replace("\\\\", "\\")
             for m in re.finditer(r'^all_model_checkpoint_paths:\s*"((?:[^"\\]|\\.)*)"', text, re.M)]
    latest = re.search(r'^model_checkpoint_path:\s*"((?:[^"\\]|\\.)*)"', text, re.M)
    if latest:
        latest = latest.group(1).replace('\\"', '"').replace("\\\\", "\\")
        paths = [p for p in paths if p != latest] + [latest]
    return [p if os.path.isabs(p) else os.path.join(directory, p) for p in paths]


def _update_state(directory, latest, keep):
    paths = [p for p in _read_state(directory) if p != latest] + [latest]
    if keep is not None:
        paths = paths[-keep:]
    rel = [os.path.relpath(p, directory) if os.path.dirname(os.path.abspath(p)) == directory else p for p in paths]
    text = f"model_checkpoint_path: {_quote(rel[-1])}\n" + "".join(
        f"all_model_checkpoint_paths: {_quote(p)}\n" for p in rel)
    with atomic_path(os.path.join(directory, _STATE)) as tmp:
        with open(tmp, "w") as f:
            f.write(text)
    return paths


def _natural_key(name):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """The newest checkpoint in checkpoint_dir, or None.

    The one its "checkpoint" file names (Checkpoint.save, CheckpointManager); without that file,
    the newest weights file (*.weights.h5, *.keras: what ModelCheckpoint writes), by modification
    time and then by the numbers in the name (ckpt_10 after ckpt_9)."""
    directory = os.fspath(checkpoint_dir)
    if not os.path.isdir(directory):
        return None
    recorded = [p for p in _read_state(directory) if os.path.exists(p)]
    if recorded:
        return recorded[-1]
    files = [os.path.join(directory, n) for n in os.listdir(directory) if n.endswith((_SUFFIX, ".keras"))]
    if not files:
        return None
    return max(files, key=lambda p: (os.stat(p).st_mtime_ns, _natural_key(os.path.basename(p))))


class CheckpointManager:
    """Keeps the newest max_to_keep checkpoints of a Checkpoint in directory (None: all)."""

    def __init__(self, checkpoint, directory, max_to_keep, checkpoint_name="ckpt", step_counter=None,
                 checkpoint_interval=None):
        if max_to_keep is not None and (not isinstance(max_to_keep, int) or max_to_keep < 1):
            raise ValueError(f"CheckpointManager: max_to_keep must be a positive integer or None, got {max_to_keep!r}")
        self._checkpoint = checkpoint
        self.directory = os.fspath(directory)
        self._max_to_keep = max_to_keep
        self._prefix = os.path.join(self.directory, checkpoint_name)
        os.makedirs(self.directory, exist_ok=True)

    @property
    def checkpoints(self):
        return [p for p in _read_state(os.path.abspath(self.directory)) if os.path.exists(p)]

    @property
    def latest_checkpoint(self):
        found = self.checkpoints
        return found[-1] if found else None

    def save(self, checkpoint_number=None):
        ckpt = self._checkpoint
        if checkpoint_number is None:
            ckpt.save_counter.value += 1
            number = ckpt.save_counter.value
        else:
            number = int(checkpoint_number)
        path = ckpt.write(f"{self._prefix}-{number}")
        directory = os.path.abspath(self.directory)
        before = _read_state(directory)
        kept = _update_state(directory, os.path.abspath(path), self._max_to_keep)
        for old in before:
            if old not in kept and os.path.exists(old):
                os.remove(old)
        return path

    def restore_or_initialize(self):
        latest = self.latest_checkpoint
        if latest is not None:
            self._checkpoint.restore(latest)
        return latest
