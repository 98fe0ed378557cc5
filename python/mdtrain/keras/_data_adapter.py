"""Turning what users pass to fit/evaluate/predict into the arrays the C++ loop reads.

Conversion happens once per call (never per epoch): float inputs become C-contiguous float32,
integer labels int32, as Keras casts them. Arrays already in that form are used without a copy.
A model whose first layer reads indices (Embedding) takes its x through as_indices instead.
"""
import numpy as np

_INT32 = np.iinfo(np.int32)


def to_int32(arr, argname):
    """An integer array as int32, refusing values int32 cannot hold: a silent wrap would turn
    label 2**32 + 3 into class 3. Checked before the cast, for every wider integer dtype."""
    arr = np.asarray(arr)
    wide = arr.dtype.itemsize > 4 or (arr.dtype.kind == "u" and arr.dtype.itemsize == 4)
    if wide and arr.size:
        outside = (arr < _INT32.min) | (arr > _INT32.max)
        if outside.any():
            bad = int(np.argmax(outside.reshape(-1)))
            raise ValueError(f"{argname}: value {arr.reshape(-1)[bad]} at index {bad} does not fit in int32 "
                             f"(integer labels and indices must lie in [{_INT32.min}, {_INT32.max}])")
    return np.ascontiguousarray(arr, dtype=np.int32)


def as_features(x, argname="x"):
    return np.ascontiguousarray(_numeric_array(x, argname), dtype=np.float32)


def as_indices(x, argname="x"):
    """x for a model whose first layer reads indices (Embedding): integers as int32, as Keras casts
    them (refusing values int32 cannot hold rather than wrapping them); floats keep float32 or
    float64, so the layer sees the exact values and refuses any that is not a whole number
    (float32 would round a float64 index above 2**24 to another row)."""
    arr = _numeric_array(x, argname)
    if arr.dtype.kind in "biu":
        return to_int32(arr, argname)
    return np.ascontiguousarray(arr, dtype=np.float64 if arr.dtype == np.float64 else np.float32)


def _numeric_array(x, argname):
    if x is None:
        raise ValueError(f"{argname} is required")
    if hasattr(x, "__next__") and not hasattr(x, "__array__"):  # a generator or other iterator
        raise TypeError(f"{argname} is a {type(x).__name__} (an iterator); pass arrays, or a dataset such as "
                        f"tf.data.Dataset.from_generator(...) yielding (x, y) batches")
    try:
        arr = np.asarray(x)
    except Exception as e:  # ragged lists and the like
        raise TypeError(f"{argname} must be array-like, got {type(x).__name__}: {e}") from None
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise TypeError(f"{argname} must hold numbers, got an array of dtype {arr.dtype}")
    if arr.ndim < 1:
        raise ValueError(f"{argname} must have a batch axis, got a scalar")
    return arr


def as_labels(y, argname="y"):
    if y is None:
        raise ValueError(f"{argname} is required")
    arr = np.asarray(y)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise TypeError(f"{argname} must hold numbers, got an array of dtype {arr.dtype}")
    if arr.ndim < 1:
        raise ValueError(f"{argname} must have a batch axis, got a scalar")
    if arr.dtype.kind in "biu":
        return to_int32(arr, argname)
    return np.ascontiguousarray(arr, dtype=np.float32)


def check_lengths(x, y, where):
    if y is not None and len(x) != len(y):
        raise ValueError(f"{where}: x and y must have the same number of samples, got x with shape {x.shape} "
                         f"and y with shape {y.shape}")


_INT64_MAX = np.iinfo(np.int64).max


def check_count(value, name, where, minimum=1):
    """An integer count argument (batch_size, steps, ...) as a Python int: a clear ValueError for
    bools, floats, values below `minimum` and values the C++ loop's int64 cannot hold."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{where}: {name} must be {kind}, got {value!r}")
    if value > _INT64_MAX:
        raise ValueError(f"{where}: {name} must be at most 2**63 - 1, got {value!r}")
    return int(value)


def check_batch_size(batch_size, where, default=32):
    if batch_size is None:
        return default
    return check_count(batch_size, "batch_size", where)


def train_validation_split(x, y, validation_split, w=None):
    """Keras takes the last fraction of the (unshuffled) data for validation, sample weights (w)
    included. Returns (x, y, w, validation (x, y, w) or None)."""
    if not isinstance(validation_split, (int, float)) or not 0 <= validation_split < 1:
        raise ValueError(f"validation_split must be a float in [0, 1), got {validation_split!r}")
    if validation_split == 0:
        return x, y, w, None
    split = int(len(x) * (1 - validation_split))
    if split == 0 or split == len(x):
        raise ValueError(f"validation_split={validation_split} leaves no data for training or validation "
                         f"with {len(x)} samples")
    if w is None:
        return x[:split], y[:split], None, (x[split:], y[split:], None)
    return x[:split], y[:split], w[:split], (x[split:], y[split:], w[split:])


def is_dataset(x):
    from mdtrain import data, distribute

    return isinstance(x, (data.Dataset, distribute.DistributedDataset))


def _unwrap(dataset):
    from mdtrain import distribute

    # A distributed dataset's global batches are what a compiled model's engine splits itself.
    return dataset._dataset if isinstance(dataset, distribute.DistributedDataset) else dataset


def _xy(element, where, batch=None):
    """(x, y, sample_weight or None) of a dataset element: (x, y) or Keras's (x, y, sample_weight)."""
    at = "" if batch is None else f" at batch {batch}"
    if isinstance(element, (tuple, list)) and len(element) > 3:
        raise ValueError(f"{where}: x (a dataset) yielded a {type(element).__name__} of {len(element)}{at}; each "
                         "element must be (x, y) or (x, y, sample_weight)")
    if not isinstance(element, (tuple, list)) or len(element) < 2:
        found = type(element).__name__ if not isinstance(element, (tuple, list)) else \
            f"a {type(element).__name__} of {len(element)}"
        raise ValueError(f"{where}: x (a dataset) yielded {found}{at}; each element must be an (x, y) pair")
    if element[0] is None or element[1] is None:
        raise ValueError(f"{where}: x (a dataset) yielded an element whose {'x' if element[0] is None else 'y'} is "
                         f"None{at}")
    return element[0], element[1], element[2] if len(element) == 3 else None


_END = object()


def _next_element(source, where, batch):
    """The next element of a dataset iterator (_END when exhausted; a None element is an element,
    not the end); an error raised while producing it names x and the batch."""
    try:
        return next(source, _END)
    except (ValueError, TypeError) as e:
        raise type(e)(f"{where}: x (a dataset) failed to produce batch {batch}: {e}") from e


def materialize(dataset, where, need_y=True, steps=None, ragged=False):
    """All of a finite dataset's (x, y) batches joined (only the first `steps` batches when given):
    for evaluate/predict, where the result does not depend on how the rows were batched. Returns
    (x, y or None, sample weights or None, batch size or None). Batches whose x differ beyond the
    batch axis (a variable-length model's, padded per batch) cannot be joined: with `ragged`, they
    come back as lists of batches (x, y and the weights each a list; batch size None)."""
    dataset = _unwrap(dataset)
    if steps is not None:
        dataset = dataset.take(steps)
    if dataset.cardinality() < 0 and dataset.cardinality() != -2:
        raise ValueError(f"{where}: the dataset is infinite (repeat()); take() a finite part of it")
    xs, ys, ws = [], [], []
    source = iter(dataset)
    while (element := _next_element(source, where, len(xs))) is not _END:
        if need_y:
            x, y, w = _xy(element, where, len(xs))
            if (w is None) != (not ws) and xs:
                raise ValueError(f"{where}: x (a dataset) yielded sample weights in some batches and not in others "
                                 f"(batch {len(xs)})")
            if w is not None:
                ws.append(np.asarray(w))
            ys.append(np.asarray(y))
            if ys[-1].ndim and np.ndim(x) and len(ys[-1]) != len(x):
                raise ValueError(f"{where}: x (a dataset) yielded batch {len(xs)} with {len(x)} inputs and "
                                 f"{len(ys[-1])} labels")
        else:
            x = element[0] if isinstance(element, (tuple, list)) else element
            if x is None:
                raise ValueError(f"{where}: x (a dataset) yielded None at batch {len(xs)}")
        xs.append(np.asarray(x))
    if not xs:
        raise ValueError(f"{where}: the dataset is empty")
    if len({a.shape[1:] for a in xs}) > 1:
        if not ragged:
            raise ValueError(f"{where}: x (a dataset) yielded batches of different shapes "
                             f"({sorted({a.shape[1:] for a in xs})} beyond the batch axis); pad them to one shape")
        return xs, (ys if need_y else None), (ws or None), None
    batch = getattr(dataset, "_batch_size", None)
    return (np.concatenate(xs), (np.concatenate(ys) if need_y else None), (np.concatenate(ws) if ws else None),
            batch)


class DatasetEpochs:
    """Feeds fit from a Dataset, one epoch at a time.

    When the pipeline is plain row gathers of its source arrays (no map), an epoch is handed to
    the C++ loop whole: the source arrays (converted once per fit, no per-epoch copy), the row
    order and the batch boundaries ("plan"). Otherwise batches are fed one by one ("batch").
    With steps_per_epoch the iteration carries on across epochs, as in Keras.
    """

    def __init__(self, dataset, steps_per_epoch, where="fit", features=as_features):
        from mdtrain import data

        self.dataset = _unwrap(dataset)
        self.steps = steps_per_epoch
        self.where = where
        self._features = features  # as_features, or as_indices for a model reading indices
        if self.dataset.cardinality() == data.INFINITE_CARDINALITY and steps_per_epoch is None:
            raise ValueError(f"{where}: the dataset is infinite (repeat()); pass steps_per_epoch")
        self._converted = {}
        self.class_weight = None  # fit's class_weight, applied to each batch's labels
        self._plan_batches = None  # persistent batch iterator of the plan path
        self._element_iter = None  # persistent element iterator of the batch path
        plan = self.dataset._array_plan()
        self.plan_arrays = None
        self._first_batches = None  # the first iteration's batches, used by the first epoch
        if plan is not None:
            arrays, self._first_batches = plan
            if len(arrays) not in (2, 3):
                raise ValueError(f"{where}: a dataset must yield (x, y) pairs or (x, y, sample_weight)")
            self.plan_arrays = (features(arrays[0]), as_labels(arrays[1]), arrays[2] if len(arrays) == 3 else None)

    def epoch(self):
        if self.plan_arrays is not None:
            yield ("plan", self._plan_epoch())
        else:
            yield from (("batch", b) for b in self._batch_epoch())

    def _next_plan_batches(self):
        if self._first_batches is not None:
            batches, self._first_batches = self._first_batches, None
        else:
            _, batches = self.dataset._array_plan()
        return iter(batches)

    def _plan_epoch(self):
        if self.steps is None:
            chosen = list(self._next_plan_batches())
        else:
            chosen = []
            if self._plan_batches is None:
                self._plan_batches = self._next_plan_batches()
            while len(chosen) < self.steps:
                b = next(self._plan_batches, None)
                if b is None:  # a finite dataset ran out: start another pass
                    self._plan_batches = self._next_plan_batches()
                    b = next(self._plan_batches, None)
                    if b is None:
                        break
                chosen.append(b)
        chosen = [np.asarray(b, dtype=np.int64) for b in chosen if len(b)]
        if not chosen:
            raise ValueError(f"{self.where}: the dataset yielded no batches")
        order = np.concatenate(chosen)
        offsets = np.concatenate([[0], np.cumsum([len(b) for b in chosen])]).astype(np.int64).tolist()
        return (*self.plan_arrays, order, offsets)

    def _batch_epoch(self):
        if self.steps is None:
            source = iter(self.dataset)
            limit = None
        else:
            if self._element_iter is None:
                self._element_iter = iter(self.dataset)
            source, limit = self._element_iter, self.steps
        count = 0
        while limit is None or count < limit:
            element = _next_element(source, self.where, count)
            if element is _END:
                if limit is None:
                    return
                self._element_iter = source = iter(self.dataset)
                element = _next_element(source, self.where, count)
                if element is _END:
                    return
            x, y, w = _xy(element, self.where, count)
            where = f"{self.where}: x (a dataset) batch {count}"
            features, labels = self._features(x, f"{where}: x"), as_labels(y, f"{where}: y")
            if len(features) != len(labels):
                raise ValueError(f"{where} has {len(features)} inputs (shape {features.shape}) and {len(labels)} "
                                 f"labels (shape {labels.shape}); they must match")
            count += 1
            yield features, labels, w
