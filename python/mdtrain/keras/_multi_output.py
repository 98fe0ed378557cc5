"""Training a model with several outputs, as Keras 3's compile does: a loss per output (a list in
output order, a dict by output name, or one loss for every output), loss_weights, metrics per
output, and labels given as a list or dict. The C++ side is one MultiOutputLoss over the packed
prediction (nn/multi_output_loss.h); the labels cross packed the same way, each output's flattened
side by side as float32 columns (a sparse class id is exact in float32 below 2**24)."""
import json

import numpy as np

from mdtrain import _core
from mdtrain.keras import losses as _losses
from mdtrain.keras import metrics as _metrics


class MultiOutputLoss:
    """What model.loss holds for a model with several outputs: the loss per output (Keras keeps
    the structure given to compile; mdtrain keeps it resolved, in output order) and its C++ loss."""

    reduction = "sum_over_batch_size"

    def __init__(self, names, losses, weights, core):
        self.output_names = list(names)
        self.losses = list(losses)
        self.loss_weights = list(weights)
        self._core = core
        self._config = {}
        self.name = core.name

    def __repr__(self):
        return f"MultiOutputLoss({dict(zip(self.output_names, (l.name for l in self.losses)))})"


class OutputLayout:
    """A model's outputs (names and shapes, batch axis excluded) and what compile made of them."""

    def __init__(self, names, shapes):
        self.names = list(names)
        self.shapes = [tuple(s) for s in shapes]
        self.loss = None

    def __len__(self):
        return len(self.names)

    # ---- compile --------------------------------------------------------------------------
    def _per_output(self, value, what, allow_single):
        """value (list/tuple in output order, dict by output name, or one value for every output
        when allow_single) as a list in output order."""
        n = len(self.names)
        if isinstance(value, dict):
            unknown = [k for k in value if k not in self.names]
            if unknown:
                raise ValueError(f"compile: {what} names {unknown}, which are not outputs of the model; its outputs "
                                 f"are {self.names}")
            return [value.get(name) for name in self.names]
        if isinstance(value, (list, tuple)):
            if len(value) != n:
                raise ValueError(f"compile: the model has {n} outputs {self.names}, so {what} must be a list of {n} "
                                 f"(one per output, in order) or a dict by output name; got a list of {len(value)}")
            return list(value)
        if allow_single:
            return [value] * n
        raise ValueError(f"compile: {what} must be a list of {n} or a dict by output name {self.names}, got "
                         f"{value!r}")

    def compile_loss(self, loss, loss_weights):
        """The MultiOutputLoss for compile(loss=..., loss_weights=...)."""
        per_output = self._per_output(loss, "loss", allow_single=True)
        missing = [name for name, l in zip(self.names, per_output) if l is None]
        if missing:
            raise ValueError(f"compile: no loss for outputs {missing}; mdtrain trains every output (give each one "
                             "a loss)")
        losses = [_losses.get(l) for l in per_output]
        for name, l in zip(self.names, losses):
            if l.reduction != "sum_over_batch_size":
                raise ValueError(f"compile: output '{name}': fit trains on the mean loss of each batch "
                                 f"(reduction='sum_over_batch_size'); {type(l).__name__} has "
                                 f"reduction={l.reduction!r}. Compile with the default reduction.")
        weights = [1.0] * len(self.names)
        if loss_weights is not None:
            weights = [1.0 if w is None else w for w in self._per_output(loss_weights, "loss_weights", False)]
            for name, w in zip(self.names, weights):
                if isinstance(w, bool) or not isinstance(w, (int, float, np.number)) or not np.isfinite(w):
                    raise ValueError(f"compile: loss_weights for output '{name}' must be a finite number, got {w!r}")
        outputs = [{"name": name, "weight": float(w), "shape": list(shape),
                    "loss": {"class_name": l._core.class_name, "config": json.loads(l._core.config_json())}}
                   for name, shape, l, w in zip(self.names, self.shapes, losses, weights)]
        config = {"class_name": "MultiOutputLoss", "config": {"name": "multi_output_loss",
                                                               "reduction": "sum_over_batch_size",
                                                               "outputs": outputs}}
        core = _core.loss_from_config(json.dumps(config))  # ignore_class and the like: ValueError
        self.loss = MultiOutputLoss(self.names, losses, weights, core)
        return self.loss

    def metric_identifiers(self, metrics):
        """(identifiers, output of each) for compile(metrics=...): a list with one entry per output
        (a metric or a list of them) or a dict by output name, as Keras 3 takes them; ordered by
        output, then as given (the order Keras 3 logs and evaluate returns them)."""
        if metrics is None:
            return [], []
        if isinstance(metrics, dict):
            per_output = self._per_output(metrics, "metrics", False)
        elif isinstance(metrics, (list, tuple)):
            if len(metrics) == 0:
                return [], []
            if len(metrics) != len(self.names):
                raise ValueError(f"compile: the model has {len(self.names)} outputs {self.names}, so metrics must be "
                                 f"a list with one entry per output (a metric or a list of metrics) or a dict by "
                                 f"output name, as in Keras 3; got {list(metrics)!r}")
            per_output = list(metrics)
        else:
            raise ValueError(f"compile: metrics must be a list or a dict, got {metrics!r}")
        identifiers, outputs = [], []
        for k, entry in enumerate(per_output):
            if entry is None:
                continue
            if isinstance(entry, str) or not isinstance(entry, (list, tuple)):
                entry = [entry]
            for m in entry:
                identifiers.append(_metrics._metric_identifier(m))
                outputs.append(k)
        return identifiers, outputs

    def log_names(self, identifiers, outputs):
        """The keys of the logs after "loss", in their order."""
        return [f"{n}_loss" for n in self.names] + [f"{self.names[k]}_{m}" for m, k in zip(identifiers, outputs)]

    # ---- labels ---------------------------------------------------------------------------
    def _label_shape(self, k):
        shape = self.shapes[k]
        sparse = self.loss is not None and self.loss.losses[k]._core.class_name == "SparseCategoricalCrossentropy"
        return shape[:-1] if sparse else shape, sparse

    def pack_labels(self, y, where):
        """y (a list/tuple in output order, or a dict by output name) as one float32 array
        (batch, sum of the labels' sizes): each output's labels flattened, side by side."""
        n = len(self.names)
        if y is None:
            raise ValueError(f"{where}: y is required: one array per output {self.names}")
        if isinstance(y, dict):
            unknown = [key for key in y if key not in self.names]
            missing = [name for name in self.names if name not in y]
            if unknown or missing:
                raise ValueError(f"{where}: y must have one array per output {self.names}; "
                                 + (f"missing {missing}" if missing else "")
                                 + ("; " if missing and unknown else "")
                                 + (f"unknown outputs {unknown}" if unknown else ""))
            y = [y[name] for name in self.names]
        if not isinstance(y, (list, tuple)) or len(y) != n:
            got = f"a list of {len(y)}" if isinstance(y, (list, tuple)) else f"{type(y).__name__}" + (
                f" of shape {np.shape(y)}" if hasattr(y, "shape") else "")
            raise ValueError(f"{where}: the model has {n} outputs {self.names}; y must be a list of {n} arrays (in "
                             f"output order) or a dict by output name, got {got}")
        columns = []
        for k, (name, labels) in enumerate(zip(self.names, y)):
            a = np.asarray(labels)
            if a.dtype == object or a.dtype.kind not in "biuf":
                raise TypeError(f"{where}: labels of output '{name}' must hold numbers, got dtype {a.dtype}")
            expected, sparse = self._label_shape(k)
            got = tuple(a.shape[1:]) if a.ndim >= 1 else None
            fits = got is not None and (got == expected or got == expected + (1,)
                                        or (len(expected) > 0 and expected[-1] == 1 and got == expected[:-1]))
            if not fits:
                kind = "one class id per sample" if sparse else "the output's shape"
                raise ValueError(f"{where}: output '{name}' has shape {(None, *self.shapes[k])}, so its labels must "
                                 f"have shape {(None, *expected)} ({kind}); got {a.shape}")
            if sparse and a.size:
                classes = self.shapes[k][-1]
                bad = (a < 0) | (a >= classes) | (~np.isfinite(a) if a.dtype.kind == "f" else False)
                if np.any(bad):
                    i = int(np.argmax(bad.reshape(-1)))
                    raise ValueError(f"{where}: output '{name}' (sparse_categorical_crossentropy): label "
                                     f"{a.reshape(-1)[i]} at index {i} is out of range for {classes} classes; labels "
                                     f"must be integers in [0, {classes})")
            columns.append(np.asarray(a, dtype=np.float32).reshape(len(a), -1))
        if len({len(c) for c in columns}) > 1:
            raise ValueError(f"{where}: every output's labels must have the same number of samples, got "
                             + ", ".join(f"'{nm}': {np.shape(v)}" for nm, v in zip(self.names, y)))
        return np.ascontiguousarray(np.concatenate(columns, axis=1))
