"""mdtrain.data.Dataset: element sequences as tf.data documents them, shuffle semantics and
determinism, cardinality, the prefetching iterator (equal to plain iteration, never hangs),
map, the _array_plan contract the training loop reads, and argument errors."""
import collections
import gc
import os

import numpy as np
import pytest

import mdtrain as tf
from mdtrain import _core
from mdtrain import data as tfdata

Dataset = tf.data.Dataset


def elements(ds):
    """Elements as plain Python values (ints / lists / tuples) for exact comparison."""
    def plain(v):
        if isinstance(v, tuple):
            return tuple(plain(x) for x in v)
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return np.asarray(v).tolist()
    return [plain(v) for v in ds]


# ---- element sequences --------------------------------------------------------------------------

def test_range_and_slices():
    assert elements(Dataset.range(5)) == [0, 1, 2, 3, 4]
    assert elements(Dataset.range(2, 10, 3)) == [2, 5, 8]
    assert elements(Dataset.range(0)) == []
    first = next(iter(Dataset.range(3)))
    assert isinstance(first, np.int64)
    x = np.arange(24, dtype=np.float32).reshape(6, 2, 2)
    got = list(Dataset.from_tensor_slices(x))
    assert len(got) == 6
    for i, row in enumerate(got):
        assert row.dtype == np.float32 and row.shape == (2, 2)
        np.testing.assert_array_equal(row, x[i])
    assert elements(Dataset.from_tensor_slices([1, 2, 3])) == [1, 2, 3]


def test_shard_as_tf_documents():
    assert elements(Dataset.range(10).shard(3, 1)) == [1, 4, 7]
    assert elements(Dataset.range(10).shard(3, 0)) == [0, 3, 6, 9]
    assert elements(Dataset.range(10).shard(3, 2)) == [2, 5, 8]
    assert elements(Dataset.range(10).shard(1, 0)) == list(range(10))
    assert elements(Dataset.range(2).shard(5, 3)) == []


def test_batch_with_and_without_remainder():
    assert elements(Dataset.range(8).batch(3)) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert elements(Dataset.range(8).batch(3, drop_remainder=True)) == [[0, 1, 2], [3, 4, 5]]
    assert elements(Dataset.range(6).batch(3, drop_remainder=True)) == [[0, 1, 2], [3, 4, 5]]
    assert elements(Dataset.range(2).batch(3, drop_remainder=True)) == []
    assert elements(Dataset.range(2).batch(5)) == [[0, 1]]


def test_repeat_then_batch_crosses_the_epoch_boundary():
    assert elements(Dataset.range(5).repeat(2).batch(3)) == [[0, 1, 2], [3, 4, 0], [1, 2, 3], [4]]
    # batch then repeat keeps each epoch's short batch
    assert elements(Dataset.range(5).batch(3).repeat(2)) == [[0, 1, 2], [3, 4], [0, 1, 2], [3, 4]]
    assert elements(Dataset.range(3).repeat(0)) == []
    assert elements(Dataset.range(3).repeat().take(7)) == [0, 1, 2, 0, 1, 2, 0]
    assert elements(Dataset.range(3).repeat(-1).take(4)) == [0, 1, 2, 0]
    assert elements(Dataset.range(0).repeat()) == []  # as TF: ends instead of spinning


def test_take_and_skip():
    ds = Dataset.range(10)
    assert elements(ds.take(3)) == [0, 1, 2]
    assert elements(ds.take(0)) == []
    assert elements(ds.take(-1)) == list(range(10))
    assert elements(ds.take(20)) == list(range(10))
    assert elements(ds.skip(7)) == [7, 8, 9]
    assert elements(ds.skip(0)) == list(range(10))
    assert elements(ds.skip(-1)) == []
    assert elements(ds.skip(20)) == []
    assert elements(ds.skip(2).take(3)) == [2, 3, 4]
    assert elements(ds.take(5).skip(3)) == [3, 4]


def test_compositions():
    assert elements(Dataset.range(10).shard(2, 1).batch(2)) == [[1, 3], [5, 7], [9]]
    assert elements(Dataset.range(7).batch(2).shard(2, 0)) == [[0, 1], [4, 5]]
    assert elements(Dataset.range(10).batch(3).skip(1).take(2)) == [[3, 4, 5], [6, 7, 8]]
    assert elements(Dataset.range(4).repeat(3).shard(5, 1).batch(2)) == [[1, 2], [3]]
    assert elements(Dataset.range(5).skip(1).repeat(2).batch(3, drop_remainder=True)) == [[1, 2, 3], [4, 1, 2]]
    # nested batch stacks batches
    assert elements(Dataset.range(8).batch(2).batch(2)) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    assert elements(Dataset.from_tensors(np.array([1, 2])).repeat(2)) == [[1, 2], [1, 2]]
    assert elements(Dataset.range(3).batch(2).repeat().take(5)) == [[0, 1], [2], [0, 1], [2], [0, 1]]


def test_structures_and_dtypes():
    n = 11
    idx = np.arange(n)
    x = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3)
    comps = {
        "idx": idx,
        "x": x,
        "f64": np.linspace(0, 1, n),
        "i32": np.arange(n, dtype=np.int32) * 3,
        "u8": (np.arange(n) * 7 % 256).astype(np.uint8),
        "bool": np.arange(n) % 3 == 0,
        "f16": np.arange(n, dtype=np.float16) / 4,
        "i8": -np.arange(n, dtype=np.int8),
        "str": np.array([f"s{i}" for i in range(n)]),
        "empty_rows": np.zeros((n, 0), dtype=np.float32),
        "col_slice": np.arange(n * 4, dtype=np.int64).reshape(n, 4)[:, ::2],  # not contiguous
    }
    ds = Dataset.from_tensor_slices(comps).shuffle(5, seed=3).batch(4)
    seen = []
    for batch in ds:
        assert list(batch) == list(comps)  # the dict keeps its key order
        rows = batch["idx"]
        seen.extend(rows.tolist())
        for key, arr in comps.items():
            assert batch[key].dtype == arr.dtype, key
            np.testing.assert_array_equal(batch[key], arr[rows], err_msg=key)
    assert sorted(seen) == list(range(n))
    # unbatched elements of the same components
    for element in Dataset.from_tensor_slices(comps).take(3):
        i = int(element["idx"])
        for key, arr in comps.items():
            np.testing.assert_array_equal(element[key], arr[i], err_msg=key)
    # nested tuples and namedtuples keep their structure
    Pair = collections.namedtuple("Pair", "a b")
    got = list(Dataset.from_tensor_slices(((idx, Pair(x, idx * 2)), idx + 1)).batch(5).take(1))[0]
    (g_idx, g_pair), g_y = got
    assert isinstance(g_pair, Pair)
    np.testing.assert_array_equal(g_pair.a, x[:5])
    np.testing.assert_array_equal(g_pair.b, idx[:5] * 2)
    np.testing.assert_array_equal(g_y, idx[:5] + 1)
    # object arrays cannot go through the C++ gather; they are gathered in Python
    objs = np.empty(3, dtype=object)
    objs[:] = [{"a": 1}, None, "z"]
    assert [list(b) for b in Dataset.from_tensor_slices(objs).batch(2)] == [[{"a": 1}, None], ["z"]]


def test_batches_are_fresh_arrays():
    x = np.arange(10, dtype=np.float32)
    batch = next(iter(Dataset.from_tensor_slices(x).batch(4)))
    batch[:] = -1
    np.testing.assert_array_equal(x, np.arange(10, dtype=np.float32))


# ---- shuffle --------------------------------------------------------------------------------------

def test_shuffle_is_deterministic_given_a_seed():
    make = lambda: Dataset.range(100).shuffle(10, seed=42).batch(7)  # noqa: E731
    a, b = elements(make()), elements(make())
    assert a == b
    assert elements(Dataset.range(100).shuffle(10, seed=43).batch(7)) != a
    # seed=None draws from the process seed source, which set_random_seed fixes
    tf.keras.utils.set_random_seed(5)
    c = elements(Dataset.range(50).shuffle(50))
    tf.keras.utils.set_random_seed(5)
    assert elements(Dataset.range(50).shuffle(50)) == c


@pytest.mark.parametrize("buffer_size", [1, 2, 7, 100, 1000])
def test_each_element_once_per_epoch(buffer_size):
    out = elements(Dataset.range(100).shuffle(buffer_size, seed=1))
    assert sorted(out) == list(range(100))
    if buffer_size == 1:
        assert out == list(range(100))  # a buffer of one keeps the order
    else:
        assert out != list(range(100))
    # TF's buffer: output position p is drawn from the first p + buffer_size inputs
    assert all(v < p + buffer_size for p, v in enumerate(out))


def test_reshuffle_across_repeat_and_iterations():
    ds = Dataset.range(20).shuffle(20, seed=7)
    three = elements(ds.repeat(3))
    passes = [three[:20], three[20:40], three[40:]]
    for p in passes:
        assert sorted(p) == list(range(20))
    assert passes[0] != passes[1] and passes[1] != passes[2]
    # iterating the same dataset again is a new iteration too
    assert elements(ds) != elements(ds)
    fixed = Dataset.range(20).shuffle(20, seed=7, reshuffle_each_iteration=False)
    three = elements(fixed.repeat(3))
    assert three[:20] == three[20:40] == three[40:]
    assert elements(fixed) == elements(fixed)


def test_shuffle_after_repeat_mixes_epochs():
    out = elements(Dataset.range(5).repeat().shuffle(3, seed=0).take(1000))
    counts = np.bincount(out, minlength=5)
    assert all(abs(c - 200) <= 2 for c in counts), counts  # 1000 of the first 1002 inputs


def test_first_draw_is_uniform_over_the_buffer():
    firsts = [elements(Dataset.range(10).shuffle(4, seed=s).take(1))[0] for s in range(400)]
    counts = np.bincount(firsts, minlength=10)
    assert counts[4:].sum() == 0
    assert all(60 <= c <= 140 for c in counts[:4]), counts


def test_vectorised_shuffle_step_matches_the_sequential_algorithm():
    rng = np.random.default_rng(0)
    for size, n in [(1, 5), (3, 50), (8, 8), (16, 3), (5, 200)]:
        buf = rng.integers(0, 1000, size=size)
        rest = rng.integers(1000, 2000, size=n)
        draws = rng.integers(0, size, size=n)
        expected_buf, expected = buf.copy(), []
        for t in range(n):
            expected.append(expected_buf[draws[t]])
            expected_buf[draws[t]] = rest[t]
        got_buf = buf.copy()
        got = tfdata._shuffle_steady(got_buf, rest, draws)
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(got_buf, expected_buf)


# ---- cardinality ----------------------------------------------------------------------------------

def test_cardinality():
    INF, UNK = tf.data.INFINITE_CARDINALITY, tf.data.UNKNOWN_CARDINALITY
    assert (INF, UNK, tf.data.AUTOTUNE) == (-1, -2, -1)
    r = Dataset.range(10)
    cases = {
        r: 10, r.batch(3): 4, r.batch(3, drop_remainder=True): 3, r.batch(5): 2,
        r.repeat(): INF, r.repeat(3): 30, r.repeat(0): 0, Dataset.range(0).repeat(): 0,
        r.repeat().take(5): 5, r.repeat().skip(5): INF, r.repeat().batch(4): INF,
        r.take(-1): 10, r.take(20): 10, r.skip(3): 7, r.skip(-1): 0, r.skip(20): 0,
        r.shard(3, 0): 4, r.shard(3, 1): 3, r.shard(3, 2): 3, r.shuffle(4): 10, r.prefetch(2): 10,
        r.map(lambda v: v): 10, r.filter(lambda v: v > 3): UNK, r.filter(lambda v: v).batch(2): UNK,
        r.filter(lambda v: v).repeat(): INF, Dataset.from_tensors(np.zeros(3)): 1,
    }
    for ds, expected in cases.items():
        assert ds.cardinality() == expected, ds
        assert ds.cardinality().numpy() == expected
        assert tf.data.experimental.cardinality(ds) == expected
        if expected >= 0:
            assert len(ds) == expected
            assert len(list(ds)) == expected
    with pytest.raises(TypeError, match="infinite"):
        len(r.repeat())
    with pytest.raises(TypeError, match="unknown"):
        len(r.filter(lambda v: v > 3))
    assert bool(Dataset.range(0))


# ---- prefetching iterator -------------------------------------------------------------------------

@pytest.mark.parametrize("buffer_size", [0, 1, 5, tf.data.AUTOTUNE])
def test_prefetch_iteration_equals_plain_iteration(buffer_size):
    x = np.random.default_rng(1).normal(size=(103, 4)).astype(np.float32)
    y = np.arange(103)

    def make(prefetch):
        ds = Dataset.from_tensor_slices((x, y)).shuffle(17, seed=9).batch(8).repeat(2)
        return ds.prefetch(prefetch) if prefetch is not None else ds

    plain, fetched = list(make(None)), list(make(buffer_size))
    assert len(plain) == len(fetched) == 26
    for (px, py), (fx, fy) in zip(plain, fetched):
        np.testing.assert_array_equal(px, fx)
        np.testing.assert_array_equal(py, fy)
        np.testing.assert_array_equal(px, x[py])
    # the same order as the pure-Python path (a map forces it)
    through_python = list(make(None).map(lambda a, b: (a, b)))
    for (px, py), (qx, qy) in zip(plain, through_python):
        np.testing.assert_array_equal(py, qy)
    assert elements(Dataset.range(1000).prefetch(3)) == list(range(1000))


def _native_threads():
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc to count threads")
def test_breaking_out_early_never_hangs_and_joins_the_thread():
    x = np.zeros((4096, 16), dtype=np.float32)
    ds = Dataset.from_tensor_slices(x).batch(4).repeat().prefetch(3)
    gc.collect()
    baseline = _native_threads()
    for i in range(300):
        it = iter(ds)
        for _ in range(i % 4):
            next(it)
        del it
        for batch in ds.take(10):  # a for loop left by break
            if i % 2:
                break
    assert _native_threads() == baseline
    unbatched = iter(Dataset.range(100000))
    assert int(next(unbatched)) == 0
    del unbatched
    assert _native_threads() == baseline


# ---- map and filter --------------------------------------------------------------------------------

def test_map_on_elements_and_batches():
    assert elements(Dataset.range(5).map(lambda v: v * 2)) == [0, 2, 4, 6, 8]
    x, y = np.arange(6), np.arange(6) * 10
    assert elements(Dataset.from_tensor_slices((x, y)).map(lambda a, b: a + b)) == [0, 11, 22, 33, 44, 55]
    assert elements(Dataset.from_tensor_slices({"a": x}).map(lambda d: d["a"] + 1)) == [1, 2, 3, 4, 5, 6]
    assert elements(Dataset.range(7).batch(3).map(lambda b: b.sum())) == [3, 12, 6]
    assert elements(Dataset.range(4).map(lambda v: (v, [v, v])).batch(2)) == [([0, 1], [[0, 0], [1, 1]]),
                                                                                ([2, 3], [[2, 2], [3, 3]])]
    assert elements(Dataset.range(3).map(lambda v: [v, -v])) == [(0, 0), (1, -1), (2, -2)]
    assert elements(Dataset.range(6).map(lambda v: v + 1).shard(2, 1).repeat(2)) == [2, 4, 6, 2, 4, 6]
    shuffled = elements(Dataset.range(30).shuffle(8, seed=4))
    assert elements(Dataset.range(30).shuffle(8, seed=4).map(lambda v: v * 3)) == [v * 3 for v in shuffled]
    assert elements(Dataset.range(30).map(lambda v: v * 3).shuffle(8, seed=4)) == [v * 3 for v in shuffled]
    assert elements(Dataset.range(10).filter(lambda v: v % 3 == 0)) == [0, 3, 6, 9]
    assert elements(Dataset.range(10).batch(4).filter(lambda b: len(b) == 4)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # Python numbers come back as TF would give them: float32 / int32
    assert next(iter(Dataset.range(1).map(lambda v: 0.5))).dtype == np.float32


def test_map_is_lazy_and_its_exception_propagates():
    calls = []

    def f(v):
        calls.append(int(v))
        if v == 3:
            raise KeyError("boom at 3")
        return v

    assert elements(Dataset.range(10).map(f).take(3)) == [0, 1, 2]
    assert calls == [0, 1, 2]
    it = iter(Dataset.range(10).map(f))
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(KeyError, match="boom at 3"):
        next(it)
    with pytest.raises(KeyError):
        list(Dataset.range(10).batch(2).map(lambda b: f(b[1])))


def test_batching_mismatched_map_outputs_is_an_error():
    with pytest.raises(ValueError, match=r"component 0: \(1,\) and \(2,\)"):
        list(Dataset.range(3).map(lambda v: np.zeros(int(v) + 1)).batch(3))


# ---- the training loop's view -------------------------------------------------------------------------

def test_array_plan_contract():
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    y = np.arange(10, dtype=np.int32)
    ds = Dataset.from_tensor_slices((x, y)).shuffle(10, seed=2).batch(3).prefetch(2)
    assert ds._is_batched and ds._batch_size == 3 and not ds._drop_remainder
    arrays, batches = ds._array_plan()
    assert arrays[0] is x and arrays[1] is y  # C-contiguous inputs are used without a copy
    assert isinstance(batches, list) and [len(b) for b in batches] == [3, 3, 3, 1]
    assert all(b.dtype == np.int64 for b in batches)
    first = np.concatenate(batches)
    assert sorted(first.tolist()) == list(range(10))
    # the plan is what iteration yields, and each call is a new epoch (reshuffled)
    twin = Dataset.from_tensor_slices((x, y)).shuffle(10, seed=2).batch(3).prefetch(2)
    for b, (bx, by) in zip(batches, twin):
        np.testing.assert_array_equal(bx, x[b])
        np.testing.assert_array_equal(by, y[b])
    second = np.concatenate(ds._array_plan()[1])
    assert sorted(second.tolist()) == list(range(10)) and second.tolist() != first.tolist()
    # an infinite dataset gives an iterator that crosses epochs as iteration does
    arrays, batches = Dataset.from_tensor_slices(y).repeat().batch(4, drop_remainder=True)._array_plan()
    assert not isinstance(batches, list)
    assert [next(batches).tolist() for _ in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    assert arrays == (y,)
    # not expressible as row gathers of the sources
    r = Dataset.range(10)
    for ds in [r, r.shuffle(3), r.map(lambda v: v).batch(2), r.batch(2).map(lambda b: b), r.batch(2).batch(2),
               r.filter(lambda v: v).batch(2), Dataset.from_tensors(x).batch(1)]:
        assert ds._array_plan() is None, ds
    assert not r._is_batched and r._batch_size is None
    assert r.batch(2).map(lambda b: b)._is_batched
    assert Dataset.range(5).batch(2, drop_remainder=True).repeat()._drop_remainder


def test_core_prefetcher_binding():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    p = _core.Prefetcher([x], 2)
    p.add(np.array([5, 0, 9, 1]), np.array([0, 2, 3, 4]))
    assert p.unconsumed == 3
    np.testing.assert_array_equal(p.next()[0], x[[5, 0]])
    with pytest.raises(IndexError, match=r"\[gather_rows\] row 9"):
        p.next()
    q = _core.Prefetcher([x], 1)
    with pytest.raises(RuntimeError, match="wait forever"):
        q.next()
    q.close()
    assert q.next() is None
    with pytest.raises(ValueError, match="offsets"):
        _core.Prefetcher([x], 1).add(np.array([1, 2]), np.array([0, 1]))
    with pytest.raises(ValueError, match="first dimension"):
        _core.Prefetcher([x, np.zeros(5, dtype=np.float32)], 1)


# ---- argument errors --------------------------------------------------------------------------------

def test_bad_arguments():
    r = Dataset.range(10)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        r.batch(0)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got -3"):
        r.batch(-3)
    with pytest.raises(TypeError, match="batch_size must be an integer"):
        r.batch(2.5)
    with pytest.raises(ValueError, match="take: count must be >= 0 or -1, got -2"):
        r.take(-2)
    with pytest.raises(ValueError, match="skip: count must be >= 0 or -1, got -5"):
        r.skip(-5)
    with pytest.raises(ValueError, match="repeat: count must be >= 0 or -1, got -2"):
        r.repeat(-2)
    with pytest.raises(ValueError, match="num_shards must be >= 1, got 0"):
        r.shard(0, 0)
    with pytest.raises(ValueError, match=r"index=3 with num_shards=3"):
        r.shard(3, 3)
    with pytest.raises(ValueError, match="index must be >= 0, got -1"):
        r.shard(3, -1)
    with pytest.raises(ValueError, match="buffer_size must be >= 1, got 0"):
        r.shuffle(0)
    with pytest.raises(ValueError, match="prefetch: buffer_size must be >= 0 or -1, got -2"):
        r.prefetch(-2)
    with pytest.raises(TypeError, match="map_func must be callable"):
        r.map(3)
    with pytest.raises(ValueError, match=r"same size in the first dimension, got shapes \(5,\), \(4, 2\)"):
        Dataset.from_tensor_slices((np.zeros(5), np.zeros((4, 2))))
    with pytest.raises(ValueError, match=r"scalar"):
        Dataset.from_tensor_slices((np.zeros(5), np.float32(1)))
    with pytest.raises(ValueError, match="at least one array"):
        Dataset.from_tensor_slices(())
