"""tf.keras.distribution's TensorLayout, LayoutMap (strict), DataParallel and set_distribution: Keras 3's
names and semantics, with the strictness mdtrain adds (a key matching nothing, a wrong rank, an indivisible
dimension or an unknown axis is a ValueError instead of a silently replicated weight)."""
import numpy as np
import pytest

import mdtrain as tf

distribution = tf.keras.distribution


@pytest.fixture
def mesh(logical_cpus):
    logical_cpus(4)
    return distribution.DeviceMesh((2, 2), ("batch", "model"))


def _mlp(hidden=8, name=None):
    return tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(hidden, activation="relu"),
                                tf.keras.layers.Dense(4)], name=name)


def test_tensor_layout_checks_axes_against_its_mesh(mesh):
    layout = distribution.TensorLayout((None, "model"))
    assert layout.axes == (None, "model") and layout.device_mesh is None
    layout.device_mesh = mesh
    assert layout.device_mesh is mesh
    with pytest.raises(ValueError, match="Cannot override device mesh"):
        layout.device_mesh = mesh
    with pytest.raises(ValueError, match="Invalid axis names.*'pipe'"):
        distribution.TensorLayout(("pipe", None), mesh)
    with pytest.raises(ValueError, match="one mesh axis for two dimensions"):
        distribution.TensorLayout(("model", "model"))
    with pytest.raises(ValueError, match="string"):
        distribution.TensorLayout("model")


def test_layout_map_lookup_is_exact_then_regex_like_keras(mesh):
    layout_map = distribution.LayoutMap(mesh)
    layout_map[".*dense.*kernel"] = (None, "model")
    layout_map["dense/bias"] = ("model",)
    layout_map[".*bias"] = (None,)
    layout_map["dense_1/b.*"] = (None,)
    assert isinstance(layout_map[".*dense.*kernel"], distribution.TensorLayout)
    assert layout_map["dense_7/kernel"].axes == (None, "model")
    assert layout_map["dense_7/kernel"].device_mesh is mesh  # the map's mesh fills the tuple's layout
    assert layout_map["dense/bias"].axes == ("model",)  # exact key wins over the regexes it also matches
    assert layout_map["conv2d/kernel"] is None
    with pytest.raises(ValueError, match="matches multiple layout specification keys"):
        layout_map["dense_1/bias"]
    with pytest.raises(ValueError, match="already exist"):
        layout_map["dense/bias"] = ("model",)
    with pytest.raises(ValueError, match="Invalid axis names"):
        layout_map["x"] = ("pipe",)
    with pytest.raises(ValueError, match="TensorLayout type"):
        layout_map["y"] = "model"
    assert list(layout_map) == [".*dense.*kernel", "dense/bias", ".*bias", "dense_1/b.*"] and len(layout_map) == 4
    del layout_map[".*bias"]
    assert len(layout_map) == 3 and layout_map["dense_1/bias"].axes == (None,)


def test_resolve_lays_out_every_weight_and_counts_shard_bytes(mesh):
    model = tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(8, name="hidden"),
                                 tf.keras.layers.Dense(4, name="out")], name="mlp")
    layout_map = distribution.LayoutMap(mesh)
    layout_map["hidden/kernel"] = (None, "model")
    layout_map["hidden/bias"] = ("model",)
    layout_map["mlp/out/kern.*"] = ("model", None)  # keys written with the model's name (newer Keras) match too
    rows = layout_map.resolve(model)
    assert [r.path for r in rows] == ["hidden/kernel", "hidden/bias", "out/kernel", "out/bias"]
    assert [r.axes for r in rows] == [(None, "model"), ("model",), ("model", None), (None,)]
    assert [r.shard_shape for r in rows] == [(6, 4), (4,), (4, 4), (4,)]
    assert [r.shard_bytes for r in rows] == [6 * 4 * 4, 4 * 4, 4 * 4 * 4, 4 * 4]
    assert [r.key for r in rows] == ["hidden/kernel", "hidden/bias", "mlp/out/kern.*", None]


def test_strict_layout_map_errors_name_the_key_weight_and_shapes(mesh):
    model = _mlp(hidden=9)
    path = model.weights[0].path
    cases = [
        ({"nothing_like_this/kernel": (None, "model")}, "match no weight"),
        ({path: ("model",)}, r"has 1 entries, but weight .* has shape \(6, 9\)"),
        ({path: (None, "model")}, r"dimension 1 of weight .*\(6, 9\).*9 entries, not divisible by the 2 devices"),
        ({".*kernel": (None, None), path: (None, None)}, None),  # exact key beats the regex: no error
        ({".*kernel": (None, None), ".*dense.*": (None, None)}, "matches multiple layout specification keys"),
    ]
    for entries, error in cases:
        layout_map = distribution.LayoutMap(mesh)
        for k, v in entries.items():
            layout_map[k] = v
        if error is None:
            layout_map.resolve(model)
        else:
            with pytest.raises(ValueError, match=error):
                layout_map.resolve(model)
    unbuilt = tf.keras.Sequential([tf.keras.layers.Dense(4)])
    with pytest.raises(ValueError, match="not built"):
        distribution.LayoutMap(mesh).resolve(unbuilt)


def test_summary_prints_each_weight_and_bytes_per_device(mesh):
    model = _mlp()
    layout_map = distribution.LayoutMap(mesh)
    layout_map[model.weights[0].path] = (None, "model")
    lines = []
    layout_map.summary(model, print_fn=lines.append)
    text = "\n".join(lines)
    assert f"{model.weights[0].path}" in text and "(None, 'model')" in text and "(6, 4)" in text
    assert "replicated" in text
    per_device = (6 * 4 + 8 + 8 * 4 + 4) * 4
    unsharded = (6 * 8 + 8 + 8 * 4 + 4) * 4
    assert f"Weights per device: {per_device:,} bytes (unsharded model: {unsharded:,} bytes" in text
    lines.clear()
    layout_map.summary(print_fn=lines.append)  # the model last resolved
    assert "Weights per device" in lines[0]
    fresh = distribution.LayoutMap(mesh)
    fresh[".*"] = (None,)
    lines.clear()
    fresh.summary(print_fn=lines.append)
    assert "no model resolved yet" in lines[0]


def test_data_parallel_trains_like_mirrored(logical_cpus):
    logical_cpus(2)
    x = np.random.default_rng(0).normal(size=(32, 6)).astype("float32")
    y = np.random.default_rng(1).normal(size=(32, 4)).astype("float32")

    def train(strategy):
        tf.keras.utils.set_random_seed(3)
        with strategy.scope():
            model = _mlp()
            model.compile(optimizer="sgd", loss="mse")
        model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        return model.get_weights()

    dp = distribution.DataParallel()
    assert dp.batch_dim_name == "batch" and dp.num_model_replicas == 2 and dp.num_replicas_in_sync == 2
    assert dp.device_mesh.devices.tolist() == ["cpu:0", "cpu:1"]
    for a, b in zip(train(dp), train(tf.distribute.MirroredStrategy())):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="not both"):
        distribution.DataParallel(device_mesh=dp.device_mesh, devices=["cpu:0"])
    mesh2d = distribution.DeviceMesh((2, 1), ("batch", "model"), devices=["cpu:0", "cpu:1"])
    with pytest.warns(UserWarning, match="first axis will be used"):
        assert distribution.DataParallel(device_mesh=mesh2d).batch_dim_name == "batch"


def test_set_distribution_makes_it_every_compiles_strategy(logical_cpus):
    logical_cpus(2)
    dp = distribution.DataParallel(devices=["cpu:0", "cpu:1"])
    assert distribution.distribution() is None
    distribution.set_distribution(dp)
    try:
        assert distribution.distribution() is dp
        assert tf.distribute.get_strategy() is dp
        model = _mlp()
        model.compile(optimizer="sgd", loss="mse")
        assert model.distribute_strategy is dp
    finally:
        distribution.set_distribution(None)
    assert distribution.distribution() is None
    assert tf.distribute.get_strategy() is not dp
    with pytest.raises(ValueError, match="Distribution"):
        distribution.set_distribution(tf.distribute.MirroredStrategy(["/cpu:0"]))


def test_model_parallel_arguments_like_keras(mesh):
    layout_map = distribution.LayoutMap(mesh)
    with pytest.raises(ValueError, match="layout_map"):
        distribution.ModelParallel()
    with pytest.raises(ValueError, match="LayoutMap"):
        distribution.ModelParallel(layout_map={"a": (None,)})
    mp = distribution.ModelParallel(layout_map=layout_map)
    assert mp.batch_dim_name == "batch" and mp.num_model_replicas == 2 and mp.device_mesh is mesh
    mp = distribution.ModelParallel(layout_map=layout_map, batch_dim_name="model")
    assert mp.batch_dim_name == "model"
    with pytest.raises(ValueError, match="batch_dim_name='data' is not an axis"):
        distribution.ModelParallel(layout_map=layout_map, batch_dim_name="data")
