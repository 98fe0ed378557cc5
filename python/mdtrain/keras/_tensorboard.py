"""keras.callbacks.TensorBoard: event files TensorBoard reads, written with tensorboardX.

tensorboardX is the writer because it is a maintained, small, pure-Python package (numpy,
protobuf) whose SummaryWriter writes TensorBoard's event format, scalars and histograms
included, without TensorFlow; the `tensorboard` package's own writer is an internal module of a
much larger install (the web server and its dependencies). Keras's layout is kept: log_dir/train
and log_dir/validation, scalars "epoch_<metric>" (and "batch_<metric>" with update_freq), the
learning rate as "epoch_learning_rate", weight histograms named "<layer>/<weight>", plus mdtrain's
step time breakdown as "epoch_step_time/<part>" (seconds per step over the epoch).
"""
import os
import warnings

import numpy as np

from mdtrain.keras.callbacks import Callback, _is_chief

_BREAKDOWN = ("step", "compute", "communication", "update", "idle")


def _summary_writer():
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise ImportError("keras.callbacks.TensorBoard needs tensorboardX: pip install tensorboardX") from None
    return SummaryWriter


class TensorBoard(Callback):
    def __init__(self, log_dir="logs", histogram_freq=0, write_graph=False, write_images=False,
                 write_steps_per_second=False, update_freq="epoch", profile_batch=0, embeddings_freq=0,
                 embeddings_metadata=None):
        super().__init__()
        if not isinstance(histogram_freq, int) or histogram_freq < 0:
            raise ValueError(f"TensorBoard: histogram_freq must be a non-negative integer, got {histogram_freq!r}")
        if update_freq == "batch":
            update_freq = 1
        if update_freq != "epoch" and (not isinstance(update_freq, int) or isinstance(update_freq, bool)
                                       or update_freq < 1):
            raise ValueError(f"TensorBoard: update_freq must be 'epoch', 'batch' or a positive integer, "
                             f"got {update_freq!r}")
        unsupported = [name for name, value in (("write_graph", write_graph), ("write_images", write_images),
                                                ("profile_batch", profile_batch), ("embeddings_freq", embeddings_freq))
                       if value]
        if unsupported:
            warnings.warn(f"TensorBoard: {', '.join(unsupported)} are not written by mdtrain (no graph, images, "
                          "profiler trace or embeddings); the step time breakdown scalars stand in for the profile",
                          stacklevel=2)
        _summary_writer()  # a missing writer is reported when the callback is made, not mid-fit
        self.log_dir = os.fspath(log_dir)
        self.histogram_freq = histogram_freq
        self.update_freq = update_freq
        self.write_steps_per_second = write_steps_per_second
        self._writers = {}
        self._global_step = 0
        self._breakdown_seen = None

    def _implements_train_batch_hooks(self):
        return self.update_freq != "epoch"

    def _writer(self, kind):
        if kind not in self._writers:
            self._writers[kind] = _summary_writer()(os.path.join(self.log_dir, kind))
        return self._writers[kind]

    def _chief(self):
        return _is_chief(self.model)

    def on_train_begin(self, logs=None):
        self._global_step = 0
        self._breakdown_seen = self._breakdown_totals()

    def on_train_batch_end(self, batch, logs=None):
        self._global_step += 1
        if self.update_freq == "epoch" or self._global_step % self.update_freq or not self._chief():
            return
        writer = self._writer("train")
        for key, value in (logs or {}).items():
            if np.ndim(value) == 0:
                writer.add_scalar(f"batch_{key}", float(value), self._global_step)

    def on_epoch_end(self, epoch, logs=None):
        if not self._chief():
            return
        logs = dict(logs or {})
        train, validation = self._writer("train"), None
        for key, value in logs.items():
            if np.ndim(value) != 0:
                continue
            if key.startswith("val_"):
                validation = validation or self._writer("validation")
                validation.add_scalar(f"epoch_{key[4:]}", float(value), epoch)
            else:
                train.add_scalar(f"epoch_{key}", float(value), epoch)
        optimizer = getattr(self.model, "optimizer", None)
        if "learning_rate" not in logs and optimizer is not None:
            train.add_scalar("epoch_learning_rate", float(optimizer.learning_rate), epoch)
        self._write_breakdown(train, epoch)
        if self.histogram_freq and epoch % self.histogram_freq == 0:
            for layer in self.model.layers:
                for name, weight in zip(layer._core.weight_names(), layer.get_weights()):
                    train.add_histogram(name, np.asarray(weight), epoch)
        for writer in self._writers.values():
            writer.flush()

    def _breakdown_totals(self):
        try:
            b = self.model.step_time_breakdown()
        except RuntimeError:  # not trained yet
            return None
        return {"steps": b["steps"], **{k: b[k] * b["steps"] for k in _BREAKDOWN}}

    def _write_breakdown(self, writer, epoch):
        totals = self._breakdown_totals()
        seen, self._breakdown_seen = self._breakdown_seen, totals
        if totals is None:
            return
        if seen is None or seen["steps"] > totals["steps"]:  # first epoch, or reset by the user
            seen = {k: 0.0 for k in totals}
        steps = totals["steps"] - seen["steps"]
        if steps <= 0:
            return
        for part in _BREAKDOWN:
            writer.add_scalar(f"epoch_step_time/{part}", (totals[part] - seen[part]) / steps, epoch)
        step_time = (totals["step"] - seen["step"]) / steps
        if self.write_steps_per_second and step_time > 0:
            writer.add_scalar("epoch_steps_per_second", 1.0 / step_time, epoch)

    def on_test_end(self, logs=None):
        pass

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.close()
        self._writers = {}
