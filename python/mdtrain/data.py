"""tf.data: input pipelines over in-memory arrays (a subset of tf.data.Dataset).

A Dataset is lazy: ``from_tensor_slices`` keeps its arrays (C-contiguous NumPy arrays, converted
once, not copied when already so) and each transformation only describes an *index plan* over
their rows. Iterating runs the plan: for pipelines of row selections (shuffle, batch, repeat,
take, skip, shard, prefetch) a C++ thread (``_core.Prefetcher``) gathers the rows of the next
batches while the caller works on the current one; pipelines with ``map`` or ``filter`` run
element by element in Python on the calling thread.

Elements are NumPy values: a row (NumPy scalar for 1-D sources) or a batch of rows, in the
structure given to ``from_tensor_slices`` (one array, a tuple, or a dict of arrays).

See docs/data.md for the semantics and where they differ from TensorFlow.
"""
import itertools
import types

import numpy as np

from mdtrain import _core, _random
from mdtrain._data_options import (AutoShardPolicy, DistributeOptions, OptimizationOptions, Options,
                                   ThreadingOptions)
from mdtrain._tensor_spec import TensorSpec, flatten_like as _flatten_like, map_structure as _map_structure, \
    spec_of as _spec_of

AUTOTUNE = -1
INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2

# Kinds of element stream. A stream is an iterator of 1-D NumPy "chunks" of elements:
_ROWS = "rows"        # int64 chunks: each element is one row number of the source arrays
_BATCHES = "batches"  # object chunks: each element is an int64 array of row numbers (one batch)
_VALUES = "values"    # object chunks of length 1: each element is a Python value (after map)

_SOURCE_CHUNK = 1 << 16      # rows per chunk the source emits (bounds memory of infinite plans)
_ROWS_PER_GATHER = 256       # unbatched elements are gathered by the C++ thread this many at a time
_GROUP_BATCHES = 64          # batches handed to the prefetcher per add() ...
_GROUP_ROWS = 1 << 16        # ... or fewer when they hold this many rows
_DEFAULT_DEPTH = 2           # batches kept ready when no prefetch() says otherwise (and for AUTOTUNE)
# dtypes the C++ gather handles natively; any other fixed-size dtype travels as raw bytes.
_NATIVE_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64, np.uint8))


class _Cardinality(int):
    """An int with TF's ``.numpy()``, so ``ds.cardinality().numpy()`` keeps working."""

    def numpy(self):
        return np.int64(self)


# ---- element structure: tuples, namedtuples and dicts nest; anything else is a leaf ---------------

def _flatten(structure):
    if isinstance(structure, tuple):
        return [leaf for item in structure for leaf in _flatten(item)]
    if isinstance(structure, dict):
        return [leaf for key in sorted(structure) for leaf in _flatten(structure[key])]
    return [structure]


def _pack(template, leaves):
    """`leaves` in the structure of `template` (a bare leaf, e.g. None, takes the first leaf)."""
    it = iter(leaves)

    def build(t):
        if isinstance(t, tuple):
            items = [build(s) for s in t]
            return type(t)(*items) if hasattr(t, "_fields") else tuple(items)
        if isinstance(t, dict):
            built = {key: build(t[key]) for key in sorted(t)}
            return {key: built[key] for key in t}
        return next(it)

    return build(template)


def _signature(structure):
    """The structure with leaves blanked, to compare elements' structures."""
    return _pack(structure, [None] * len(_flatten(structure)))


def _leaf_to_numpy(leaf):
    # TF converts Python numbers and lists to int32 / float32 tensors; NumPy inputs keep their dtype.
    if isinstance(leaf, (list, int, float, bool)) and not isinstance(leaf, np.ndarray):
        arr = np.asarray(leaf)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        elif arr.dtype == np.int64 and (arr.size == 0 or (arr.min() >= -2**31 and arr.max() < 2**31)):
            arr = arr.astype(np.int32)  # as TF: int32 when it fits, int64 otherwise (never a wrap)
        return arr
    return np.asarray(leaf)


def _numpy_value(leaf):
    arr = _leaf_to_numpy(leaf)
    return arr[()] if arr.ndim == 0 else arr


def _objects(values):
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _flat_elements(values, where):
    """The leaves of each of `values`, Python elements that must share one structure."""
    sig = _signature(values[0])
    flat = []
    for v in values:
        if _signature(v) != sig:
            raise ValueError(f"{where}: cannot batch elements of different structures: {sig!r} and {_signature(v)!r}")
        flat.append(_flatten(v))
    return flat


def _stack(values, where):
    """Batches Python elements of one structure into one element of stacked leaves."""
    flat = _flat_elements(values, where)
    leaves = []
    for k in range(len(flat[0])):
        parts = [np.asarray(f[k]) for f in flat]
        for p in parts[1:]:
            if p.shape != parts[0].shape:
                raise ValueError(f"{where}: cannot batch elements of different shapes in component {k}: "
                                 f"{parts[0].shape} and {p.shape}")
        leaves.append(np.stack(parts))
    return _pack(values[0], leaves)


def _check_int(value, where, name, minimum, allow=()):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{where}: {name} must be an integer, got {value!r}")
    value = int(value)
    if value < minimum and value not in allow:
        extra = "".join(f" or {a}" for a in allow)
        raise ValueError(f"{where}: {name} must be >= {minimum}{extra}, got {value}")
    return value


def _shuffle_steady(buf, rest, draws):
    """TF's shuffle step for each element t of `rest` in turn: emit buf[draws[t]], then put
    rest[t] in that slot. Vectorised: an emitted slot holds the element written by the latest
    earlier step that drew the same slot, or its content before the chunk if none did."""
    order = np.argsort(draws, kind="stable")
    sorted_draws = draws[order]
    repeats = np.zeros(len(draws), dtype=bool)
    repeats[1:] = sorted_draws[1:] == sorted_draws[:-1]
    previous = np.full(len(draws), -1, dtype=np.int64)
    previous[order[repeats]] = order[np.flatnonzero(repeats) - 1]
    out = buf[draws]
    overwritten = previous >= 0
    out[overwritten] = rest[previous[overwritten]]
    last = np.ones(len(draws), dtype=bool)
    last[:-1] = sorted_draws[1:] != sorted_draws[:-1]
    buf[sorted_draws[last]] = rest[order[last]]
    return out


class Dataset:
    """A lazy pipeline of elements (tf.data.Dataset subset); build one with ``from_tensor_slices``,
    ``from_tensors`` or ``range``.

    For the training loop, ``_array_plan()`` exposes a pipeline that is pure row gathers of the
    source arrays: it returns None when the pipeline is not (it has a ``map``/``filter``, its
    elements are not batches, or its source is not ``from_tensor_slices``/``range``), else
    ``(arrays, batches)``: ``arrays`` is the tuple of source arrays (the leaves of the element
    structure, dict keys sorted) and ``batches`` yields one int64 array of row numbers per batch,
    for one pass over the dataset (one epoch: each call starts a new iteration, so shuffles
    reshuffle as they would for ``iter(ds)``). ``batches`` is a list when the cardinality is
    finite, an iterator otherwise (``repeat()``). ``_is_batched`` and ``_batch_size`` describe
    the last ``batch()`` (None when there is none), ``_drop_remainder`` its flag.
    """

    _kind = _VALUES
    _source = None          # the _TensorSlices node whose arrays the row numbers index
    _batch_size = None
    _drop_remainder = False
    _depth = None           # largest prefetch() depth in the pipeline
    _options = None         # tf.data.Options from with_options()

    def __init__(self, input_dataset=None):
        self._input = input_dataset
        if input_dataset is not None:
            self._kind = input_dataset._kind
            self._source = input_dataset._source
            self._batch_size = input_dataset._batch_size
            self._drop_remainder = input_dataset._drop_remainder
            self._depth = input_dataset._depth
            self._options = input_dataset._options

    # ---- sources ---------------------------------------------------------------------------------

    @staticmethod
    def from_tensor_slices(tensors, name=None):
        """Elements are the rows (slices along the first axis) of each array in `tensors`."""
        return _TensorSlices(tensors, "from_tensor_slices")

    @staticmethod
    def from_tensors(tensors, name=None):
        """One element: `tensors` itself."""
        return _TensorsValue(tensors)

    @staticmethod
    def range(*args, dtype=np.int64, name=None):
        """range(stop), range(start, stop[, step]) as int64 scalars (the values are materialised)."""
        if not 1 <= len(args) <= 3:
            raise TypeError(f"range: expected 1 to 3 arguments (start, stop, step), got {len(args)}")
        for a in args:
            _check_int(a, "range", "argument", -(2**63))
        if len(args) == 3 and args[2] == 0:
            raise ValueError("range: step must not be 0")
        return _TensorSlices(np.arange(*args, dtype=np.dtype(dtype)), "range")

    # ---- transformations -------------------------------------------------------------------------

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True, name=None):
        """TF's buffered shuffle: keep `buffer_size` elements, emit one drawn uniformly, refill."""
        return _Shuffle(self, buffer_size, seed, reshuffle_each_iteration)

    def batch(self, batch_size, drop_remainder=False, num_parallel_calls=None, deterministic=None, name=None):
        """Consecutive elements stacked into batches of `batch_size` (the last may be smaller)."""
        return _Batch(self, batch_size, drop_remainder)

    def padded_batch(self, batch_size, padded_shapes=None, padding_values=None, drop_remainder=False, name=None):
        """batch() for elements of different shapes (sequences of different lengths), as TF's:
        each component padded at the end of every axis to `padded_shapes` (None, or None along an
        axis: the longest in the batch) with `padding_values` (default 0; b"" for strings)."""
        return _PaddedBatch(self, batch_size, padded_shapes, padding_values, drop_remainder)

    def repeat(self, count=None, name=None):
        """The dataset `count` times (None or -1: forever); each pass is a new iteration."""
        return _Repeat(self, count)

    def take(self, count, name=None):
        """The first `count` elements (-1: all)."""
        return _Take(self, count)

    def skip(self, count, name=None):
        """All but the first `count` elements (-1: skips everything)."""
        return _Skip(self, count)

    def shard(self, num_shards, index, name=None):
        """Every `num_shards`-th element, starting with element `index`."""
        return _Shard(self, num_shards, index)

    def prefetch(self, buffer_size, name=None):
        """Keep up to `buffer_size` batches ready (AUTOTUNE: 2). Order and values are unchanged."""
        return _Prefetch(self, buffer_size)

    def map(self, map_func, num_parallel_calls=None, deterministic=None, name=None):
        """`map_func` applied to each element (tuples are unpacked into arguments), in order, on the
        iterating thread; num_parallel_calls is accepted and ignored."""
        return _Map(self, map_func)

    def filter(self, predicate, name=None):
        """The elements for which `predicate` returns True."""
        return _Filter(self, predicate)

    def cache(self, filename="", name=None):
        """The elements of the first complete iteration, kept in memory and replayed by every later
        one (a shuffle before the cache is frozen, as in TF). An iteration stopped early leaves
        nothing cached. On-disk caches (a filename) are not supported: NotImplementedError."""
        return _Cache(self, filename)

    def enumerate(self, start=0, name=None):
        """(index, element) pairs, the index an int64 counting from `start`."""
        return _Enumerate(self, start)

    @staticmethod
    def from_generator(generator, output_types=None, output_shapes=None, args=None, output_signature=None,
                       name=None):
        """Elements are what `generator(*args)` yields, as NumPy values of the declared dtypes
        (`output_signature`: a structure of TensorSpec; or the older `output_types`/`output_shapes`).
        Each iteration calls the generator again. Cardinality is unknown."""
        return _FromGenerator(generator, output_types, output_shapes, args, output_signature)

    def with_options(self, options, name=None):
        """The same dataset with `options` (a tf.data.Options) merged over its own."""
        return _WithOptions(self, options)

    def options(self):
        """The tf.data.Options of this dataset (merged along the pipeline)."""
        return self._options if self._options is not None else Options()

    @property
    def element_spec(self):
        """The structure of TensorSpec describing one element (the batch dimension None unless
        drop_remainder fixes it). For pipelines with map/filter it comes from the first element
        of a fresh iteration."""
        return self._element_spec()

    # ---- inspection and iteration -----------------------------------------------------------------

    def cardinality(self):
        """The number of elements, INFINITE_CARDINALITY or UNKNOWN_CARDINALITY."""
        return _Cardinality(self._cardinality())

    def __len__(self):
        n = self._cardinality()
        if n == INFINITE_CARDINALITY:
            raise TypeError("The dataset is infinite.")
        if n == UNKNOWN_CARDINALITY:
            raise TypeError("The dataset length is unknown.")
        return n

    def __bool__(self):
        return True  # as TF: a dataset is an object, not a container

    def __iter__(self):
        return self._elements()

    def as_numpy_iterator(self):
        """An iterator over the elements (already NumPy values)."""
        return self._elements()

    @property
    def _is_batched(self):
        return self._batch_size is not None

    def _array_plan(self):
        """None, or (source arrays, one int64 row-number array per batch for one epoch): see the
        class docstring. Each call starts a new iteration."""
        if self._kind != _BATCHES or self._source is None:
            return None
        batches = (b for chunk in self._chunks() for b in chunk)
        if self._cardinality() >= 0:
            batches = list(batches)
        return self._source._arrays, batches

    def __repr__(self):
        n = self._cardinality()
        card = {INFINITE_CARDINALITY: "infinite", UNKNOWN_CARDINALITY: "unknown"}.get(n, n)
        return f"<{type(self).__name__.lstrip('_')}Dataset cardinality={card}>"

    # ---- subclasses define -------------------------------------------------------------------------

    def _chunks(self):
        """A new iteration: chunks of elements of this node's kind."""
        raise NotImplementedError

    def _cardinality(self):
        raise NotImplementedError

    def _element_spec(self):
        """Default: from the first element of a fresh iteration (map, filter, enumerate...)."""
        first = next(iter(self), None)
        if first is None:
            raise ValueError(f"element_spec: {self!r} has no element to describe")
        spec = _spec_of(first)
        if self._is_batched:  # the batch dimension varies unless drop_remainder fixes it
            spec = _map_structure(lambda t: TensorSpec((self._batch_size if self._drop_remainder else None,)
                                                       + t.shape[1:], t.dtype), spec)
        return spec

    # ---- running the plan ----------------------------------------------------------------------------

    def _values(self, chunk):
        """A chunk of this node's kind as a list of element values (gathering rows in NumPy)."""
        if self._kind == _VALUES:
            return list(chunk)
        src = self._source
        return [_pack(src._structure, [a[i] for a in src._arrays]) for i in chunk]

    def _elements(self):
        if self._kind == _VALUES or not self._source._gatherable:
            return (v for chunk in self._chunks() for v in self._values(chunk))
        return self._prefetched()

    def _gather_groups(self):
        """(indices, offsets) pieces of work for the prefetcher."""
        if self._kind == _ROWS:
            for chunk in self._chunks():
                if len(chunk):
                    offsets = np.append(np.arange(0, len(chunk), _ROWS_PER_GATHER, dtype=np.int64), len(chunk))
                    yield chunk, offsets
            return
        pending, rows = [], 0
        for chunk in self._chunks():
            for b in chunk:
                pending.append(b)
                rows += len(b)
                if len(pending) >= _GROUP_BATCHES or rows >= _GROUP_ROWS:
                    yield self._group(pending)
                    pending, rows = [], 0
        if pending:
            yield self._group(pending)

    @staticmethod
    def _group(batches):
        offsets = np.zeros(len(batches) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in batches], out=offsets[1:])
        return np.concatenate(batches).astype(np.int64, copy=False), offsets

    def _prefetched(self):
        src = self._source
        depth = _DEFAULT_DEPTH if self._depth is None else self._depth
        element = src._element_from_gathered()
        prefetcher = _core.Prefetcher(list(src._gather_arrays), depth)
        try:
            groups = self._gather_groups()
            added = returned = 0
            more = True
            while True:
                # Keep the background thread fed at least one group ahead of the queue.
                while more and added - returned <= depth:
                    group = next(groups, None)
                    if group is None:
                        prefetcher.close()
                        more = False
                    else:
                        prefetcher.add(*group)
                        added += len(group[1]) - 1
                gathered = prefetcher.next()
                if gathered is None:
                    return
                returned += 1
                if self._kind == _BATCHES:
                    yield element(gathered)
                else:
                    leaves = element(gathered, unpack=False)
                    structure = src._structure
                    for i in range(len(leaves[0])):
                        yield _pack(structure, [leaf[i] for leaf in leaves])
        finally:
            prefetcher.cancel()


class _TensorSlices(Dataset):
    _kind = _ROWS

    def __init__(self, tensors, where):
        super().__init__()
        leaves = [_leaf_to_numpy(leaf) for leaf in _flatten(tensors)]
        if not leaves:
            raise ValueError(f"{where}: expected at least one array, got {tensors!r}")
        for k, a in enumerate(leaves):
            if a.ndim == 0:
                raise ValueError(f"{where}: component {k} is a scalar (shape ()); slicing needs at least one axis")
        if any(len(a) != len(leaves[0]) for a in leaves):
            shapes = ", ".join(str(a.shape) for a in leaves)
            raise ValueError(f"{where}: all arrays must have the same size in the first dimension, got shapes {shapes}")
        self._arrays = tuple(np.ascontiguousarray(a) for a in leaves)
        self._structure = _signature(tensors)  # None for a bare array: elements are its rows
        self._source = self
        self._gatherable = all(a.dtype != object for a in self._arrays)
        self._gather_arrays = tuple(self._for_gather(a) for a in self._arrays) if self._gatherable else None

    @staticmethod
    def _for_gather(a):
        if a.dtype in _NATIVE_DTYPES:
            return a
        # Any other fixed-size dtype (bool, float16, int8, strings...) is gathered as raw row bytes.
        return a.reshape(len(a), int(np.prod(a.shape[1:], dtype=np.int64))).view(np.uint8)

    def _element_from_gathered(self):
        """A function turning the prefetcher's tuple of gathered arrays into a batch element
        (or, with unpack=False, into the list of leaves), undoing the raw-bytes view."""
        views = [None if a.dtype in _NATIVE_DTYPES else (a.dtype, a.shape[1:]) for a in self._arrays]
        structure = self._structure
        plain_tuple = type(structure) is tuple and all(s is None for s in structure)

        def element(gathered, unpack=True):
            if any(views):
                gathered = [g if v is None else g.view(v[0]).reshape((len(g),) + v[1]) for g, v in zip(gathered, views)]
            if not unpack:
                return gathered
            if structure is None:
                return gathered[0]
            return tuple(gathered) if plain_tuple else _pack(structure, gathered)

        return element

    def _chunks(self):
        n = len(self._arrays[0])
        for start in range(0, n, _SOURCE_CHUNK):
            yield np.arange(start, min(n, start + _SOURCE_CHUNK), dtype=np.int64)

    def _cardinality(self):
        return len(self._arrays[0])

    def _element_spec(self):
        specs = [TensorSpec(a.shape[1:], a.dtype) for a in self._arrays]
        return specs[0] if self._structure is None else _pack(self._structure, specs)


class _TensorsValue(Dataset):
    def __init__(self, tensors):
        super().__init__()
        leaves = [_numpy_value(leaf) for leaf in _flatten(tensors)]
        self._value = _pack(tensors, leaves)

    def _chunks(self):
        yield _objects([self._value])

    def _cardinality(self):
        return 1


class _Take(Dataset):
    def __init__(self, input_dataset, count):
        super().__init__(input_dataset)
        self._count = _check_int(count, "take", "count", 0, allow=(-1,))

    def _chunks(self):
        if self._count == -1:
            yield from self._input._chunks()
            return
        left = self._count
        if left == 0:
            return
        for chunk in self._input._chunks():
            if len(chunk) >= left:
                yield chunk[:left]
                return
            left -= len(chunk)
            yield chunk

    def _cardinality(self):
        n = self._input._cardinality()
        if n == UNKNOWN_CARDINALITY or self._count == -1:
            return n
        if n == INFINITE_CARDINALITY:
            return self._count
        return min(n, self._count)


class _Skip(Dataset):
    def __init__(self, input_dataset, count):
        super().__init__(input_dataset)
        self._count = _check_int(count, "skip", "count", 0, allow=(-1,))

    def _chunks(self):
        if self._count == -1:
            return
        left = self._count
        for chunk in self._input._chunks():
            if left >= len(chunk):
                left -= len(chunk)
                continue
            yield chunk[left:]
            left = 0

    def _cardinality(self):
        n = self._input._cardinality()
        if n < 0:
            return n
        return 0 if self._count == -1 else max(0, n - self._count)


class _Shard(Dataset):
    def __init__(self, input_dataset, num_shards, index):
        super().__init__(input_dataset)
        self._num_shards = _check_int(num_shards, "shard", "num_shards", 1)
        index = _check_int(index, "shard", "index", 0)
        if index >= self._num_shards:
            raise ValueError(f"shard: index must be in [0, num_shards), got index={index} with num_shards={num_shards}")
        self._index = index

    def _chunks(self):
        position = 0
        for chunk in self._input._chunks():
            first = (self._index - position) % self._num_shards
            position += len(chunk)
            selected = chunk[first::self._num_shards]
            if len(selected):
                yield selected

    def _cardinality(self):
        n = self._input._cardinality()
        if n < 0:
            return n
        return n // self._num_shards + (1 if self._index < n % self._num_shards else 0)


class _Repeat(Dataset):
    def __init__(self, input_dataset, count):
        super().__init__(input_dataset)
        self._count = -1 if count is None else _check_int(count, "repeat", "count", 0, allow=(-1,))

    def _chunks(self):
        passes = itertools.count() if self._count == -1 else range(self._count)
        for _ in passes:
            produced = False
            for chunk in self._input._chunks():
                if len(chunk):
                    produced = True
                    yield chunk
            if not produced:  # as TF: repeating an empty dataset ends instead of spinning forever
                return

    def _cardinality(self):
        n = self._input._cardinality()
        if self._count == -1:
            return 0 if n == 0 else INFINITE_CARDINALITY
        if self._count == 0:
            return 0
        return n if n < 0 else n * self._count


class _Shuffle(Dataset):
    def __init__(self, input_dataset, buffer_size, seed, reshuffle_each_iteration):
        super().__init__(input_dataset)
        self._buffer_size = _check_int(buffer_size, "shuffle", "buffer_size", 1)
        if seed is None:
            seed = _random.draw_seed()
        self._seed = _check_int(seed, "shuffle", "seed", -(2**63)) % 2**64
        self._reshuffle = bool(reshuffle_each_iteration)
        self._iterations = itertools.count()

    def _chunks(self):
        # Each iteration (each pass of an enclosing repeat, each iter()) draws from its own stream.
        iteration = next(self._iterations) if self._reshuffle else 0
        rng = np.random.default_rng([self._seed, iteration])
        size = self._buffer_size
        filling, filled, buf = [], 0, None
        for chunk in self._input._chunks():
            if buf is None:
                take = min(size - filled, len(chunk))
                filling.append(chunk[:take])
                filled += take
                chunk = chunk[take:]
                if filled == size:
                    buf = np.concatenate(filling)
                    filling = None
            if buf is not None and len(chunk):
                yield _shuffle_steady(buf, chunk, rng.integers(0, size, size=len(chunk)))
        if buf is None:
            buf = np.concatenate(filling) if filling else np.empty(0, dtype=np.int64)
        # Once the input ends, drawing uniformly from what remains is a uniform permutation of it.
        if len(buf):
            yield buf[rng.permutation(len(buf))]

    def _cardinality(self):
        return self._input._cardinality()


class _Batch(Dataset):
    def __init__(self, input_dataset, batch_size, drop_remainder):
        super().__init__(input_dataset)
        self._size = _check_int(batch_size, "batch", "batch_size", 1)
        self._drop = bool(drop_remainder)
        self._batch_size = self._size
        self._drop_remainder = self._drop
        self._kind = _BATCHES if input_dataset._kind == _ROWS else _VALUES
        if self._kind == _VALUES:
            self._source = None

    def _chunks(self):
        b = self._size
        if self._kind == _BATCHES:
            pending = np.empty(0, dtype=np.int64)
            for chunk in self._input._chunks():
                rows = np.concatenate([pending, chunk]) if len(pending) else chunk
                full = len(rows) // b
                if full:
                    yield _objects(np.split(rows[:full * b], full))
                pending = rows[full * b:]
            if len(pending) and not self._drop:
                yield _objects([pending])
            return
        pending = []
        for chunk in self._input._chunks():
            for value in self._input._values(chunk):
                pending.append(value)
                if len(pending) == b:
                    yield _objects([self._batch(pending)])
                    pending = []
        if pending and not self._drop:
            yield _objects([self._batch(pending)])

    def _batch(self, values):
        """One batch of Python elements."""
        return _stack(values, "batch")

    def _cardinality(self):
        n = self._input._cardinality()
        if n < 0:
            return n
        return n // self._size + (0 if self._drop or n % self._size == 0 else 1)


def _padding_leaves(template, structure, argname):
    """`structure` (padded_shapes or padding_values) as one leaf per leaf of the element `template`:
    a tuple (dict) of the element's length (keys) goes component by component; None, or a single
    padding value, applies to every component."""
    if isinstance(template, tuple) and isinstance(structure, (tuple, list)) and len(structure) == len(template):
        return [leaf for t, s in zip(template, structure) for leaf in _padding_leaves(t, s, argname)]
    if isinstance(template, dict) and isinstance(structure, dict):
        return [leaf for key in sorted(template) for leaf in _padding_leaves(template[key], structure.get(key), argname)]
    if isinstance(template, (tuple, dict)):
        if structure is None or (argname == "padding_values" and not isinstance(structure, (tuple, list, dict))):
            return [structure] * len(_flatten(template))
        raise ValueError(f"padded_batch: {argname}={structure!r} does not match the element's structure")
    return [structure]


def _pad_stack(parts, shape, value, where, k):
    """Component k's values of one padded batch, each padded at the end to `shape` (None along
    an axis: the batch's largest), stacked."""
    rank = parts[0].ndim
    if any(p.ndim != rank for p in parts):
        raise ValueError(f"{where}: component {k} has elements of different ranks "
                         f"({sorted({p.ndim for p in parts})}); padding keeps the rank")
    if shape is None:
        shape = (None,) * rank
    shape = tuple(shape)
    if len(shape) != rank:
        raise ValueError(f"{where}: padded_shapes for component {k} is {shape}, of rank {len(shape)}, but its "
                         f"elements have rank {rank}")
    longest = [max(p.shape[a] for p in parts) for a in range(rank)]
    target = []
    for a, d in enumerate(shape):
        if d is None or d == -1:
            target.append(longest[a])
        elif longest[a] > d:
            raise ValueError(f"{where}: component {k} has an element of size {longest[a]} along axis {a}, longer "
                             f"than its padded shape {shape}")
        else:
            target.append(int(d))
    out = np.full((len(parts), *target), value if value is not None else parts[0].dtype.type(0),
                  dtype=parts[0].dtype)
    for i, p in enumerate(parts):
        out[(i, *(slice(0, n) for n in p.shape))] = p
    return out


class _PaddedBatch(_Batch):
    """batch() of Python elements (never row gathers), each component padded by _pad_stack."""

    def __init__(self, input_dataset, batch_size, padded_shapes, padding_values, drop_remainder):
        super().__init__(input_dataset, _check_int(batch_size, "padded_batch", "batch_size", 1), drop_remainder)
        self._padded_shapes = padded_shapes
        self._padding_values = padding_values
        self._kind = _VALUES
        self._source = None

    def _batch(self, values):
        where = "padded_batch"
        flat = _flat_elements(values, where)
        shapes = _padding_leaves(values[0], self._padded_shapes, "padded_shapes")
        fill = _padding_leaves(values[0], self._padding_values, "padding_values")
        leaves = [_pad_stack([np.asarray(f[k]) for f in flat], shapes[k], fill[k], where, k)
                  for k in range(len(flat[0]))]
        return _pack(values[0], leaves)


class _Prefetch(Dataset):
    def __init__(self, input_dataset, buffer_size):
        super().__init__(input_dataset)
        size = _check_int(buffer_size, "prefetch", "buffer_size", 0, allow=(AUTOTUNE,))
        size = _DEFAULT_DEPTH if size == AUTOTUNE else max(1, size)
        self._depth = size if self._depth is None else max(self._depth, size)

    def _chunks(self):
        return self._input._chunks()

    def _cardinality(self):
        return self._input._cardinality()


def _call(fn, value):
    # As TF: a plain tuple element is unpacked into positional arguments.
    return fn(*value) if type(value) is tuple else fn(value)


class _Map(Dataset):
    def __init__(self, input_dataset, map_func):
        super().__init__(input_dataset)
        if not callable(map_func):
            raise TypeError(f"map: map_func must be callable, got {type(map_func).__name__}")
        self._fn = map_func
        self._kind = _VALUES
        self._source = None

    def _chunks(self):
        for chunk in self._input._chunks():
            for value in self._input._values(chunk):
                out = _call(self._fn, value)
                if isinstance(out, list):  # TF turns a returned list into a tuple
                    out = tuple(out)
                leaves = [_numpy_value(leaf) for leaf in _flatten(out)]
                yield _objects([_pack(out, leaves)])

    def _cardinality(self):
        return self._input._cardinality()


class _Filter(Dataset):
    def __init__(self, input_dataset, predicate):
        super().__init__(input_dataset)
        if not callable(predicate):
            raise TypeError(f"filter: predicate must be callable, got {type(predicate).__name__}")
        self._predicate = predicate
        self._kind = _VALUES
        self._source = None

    def _chunks(self):
        for chunk in self._input._chunks():
            for value in self._input._values(chunk):
                if bool(_call(self._predicate, value)):
                    yield _objects([value])

    def _cardinality(self):
        n = self._input._cardinality()
        return n if n in (0, INFINITE_CARDINALITY) else UNKNOWN_CARDINALITY


class _Cache(Dataset):
    def __init__(self, input_dataset, filename):
        super().__init__(input_dataset)
        if not isinstance(filename, str):
            raise TypeError(f"cache: filename must be a string, got {filename!r}")
        if filename:
            raise NotImplementedError(f"cache(filename={filename!r}): on-disk caches are not supported; cache() "
                                      "keeps the elements in memory")
        self._kept = None  # the chunks of the first complete iteration

    def _chunks(self):
        if self._kept is not None:
            yield from self._kept
            return
        if self._input._cardinality() == INFINITE_CARDINALITY:
            yield from self._input._chunks()  # never completes: nothing to keep (TF would grow forever)
            return
        recorded = []
        for chunk in self._input._chunks():
            recorded.append(chunk)
            yield chunk
        self._kept = recorded  # reached only when the iteration ran to its end

    def _cardinality(self):
        return self._input._cardinality()

    def _element_spec(self):
        return self._input._element_spec()


class _Enumerate(Dataset):
    def __init__(self, input_dataset, start):
        super().__init__(input_dataset)
        self._start = _check_int(start, "enumerate", "start", -(2**63))
        self._kind = _VALUES
        self._source = None
        self._batch_size = None

    def _chunks(self):
        index = self._start
        for chunk in self._input._chunks():
            for value in self._input._values(chunk):
                yield _objects([(np.int64(index), value)])
                index += 1

    def _cardinality(self):
        return self._input._cardinality()

    def _element_spec(self):
        return TensorSpec((), np.int64), self._input._element_spec()


class _FromGenerator(Dataset):
    _kind = _VALUES

    def __init__(self, generator, output_types, output_shapes, args, output_signature):
        super().__init__()
        if not callable(generator):
            raise TypeError(f"from_generator: generator must be a callable returning an iterator, got "
                            f"{type(generator).__name__}")
        if output_signature is not None:
            if output_types is not None or output_shapes is not None:
                raise TypeError("from_generator: give output_signature, or output_types (and output_shapes), "
                                "not both")
            for spec in _flatten(output_signature):
                if not isinstance(spec, TensorSpec):
                    raise TypeError(f"from_generator: output_signature must be a structure of tf.TensorSpec, got "
                                    f"{spec!r}")
            self._signature = output_signature
        elif output_types is not None:
            shapes = _flatten_like(output_types, output_shapes)
            self._signature = _pack(output_types, [TensorSpec(shape, dtype) for dtype, shape in
                                                   zip(_flatten(output_types), shapes)])
        else:
            raise TypeError("from_generator: output_signature (or output_types) is required, as in TF")
        self._generator = generator
        self._args = tuple(args) if args is not None else ()

    def _chunks(self):
        specs = _flatten(self._signature)
        for value in self._generator(*self._args):
            leaves = _flatten(value)
            if len(leaves) != len(specs):
                raise ValueError(f"from_generator: the generator yielded {value!r}, which does not match the "
                                 f"declared structure {self._signature!r}")
            out = []
            for leaf, spec in zip(leaves, specs):
                array = np.asarray(leaf, dtype=spec.dtype)
                if not spec.is_compatible_with(array.shape):
                    raise ValueError(f"from_generator: the generator yielded a value of shape {array.shape}, "
                                     f"which is not compatible with {spec!r}")
                out.append(array[()] if array.ndim == 0 else array)
            yield _objects([_pack(self._signature, out)])

    def _cardinality(self):
        return UNKNOWN_CARDINALITY

    def _element_spec(self):
        return self._signature


class _WithOptions(Dataset):
    def __init__(self, input_dataset, options):
        super().__init__(input_dataset)
        if not isinstance(options, Options):
            raise TypeError(f"with_options: expected a tf.data.Options, got {options!r}")
        self._options = options if input_dataset._options is None else input_dataset._options.merge(options)

    def _chunks(self):
        return self._input._chunks()

    def _values(self, chunk):
        return self._input._values(chunk)

    def _cardinality(self):
        return self._input._cardinality()

    def _element_spec(self):
        return self._input._element_spec()


def _cardinality_of(dataset):
    return dataset.cardinality()


experimental = types.SimpleNamespace(AUTOTUNE=AUTOTUNE, INFINITE_CARDINALITY=INFINITE_CARDINALITY,
                                     UNKNOWN_CARDINALITY=UNKNOWN_CARDINALITY, cardinality=_cardinality_of,
                                     AutoShardPolicy=AutoShardPolicy, DistributeOptions=DistributeOptions,
                                     ThreadingOptions=ThreadingOptions, OptimizationOptions=OptimizationOptions)

__all__ = ["AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "Dataset", "Options", "TensorSpec",
           "experimental"]
