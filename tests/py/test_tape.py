"""GradientTape's semantics (persistent, nested, watched values, unconnected sources, errors) and
the eager tensor and variable API."""
import io

import numpy as np
import pytest

import mdtrain as tf


def test_non_persistent_tape_gives_one_set_of_gradients():
    x = tf.constant(3.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    assert float(tape.gradient(y, x)) == 6.0
    with pytest.raises(RuntimeError, match="non-persistent GradientTape can only be used to compute one set"):
        tape.gradient(y, x)


def test_persistent_tape_gives_many():
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
        z = y * y
    assert tape.gradient(z, x).numpy().tolist() == [4.0, 32.0]
    assert tape.gradient(y, x).numpy().tolist() == [2.0, 4.0]
    assert tape.gradient(z, y).numpy().tolist() == [2.0, 8.0]


def test_constants_need_watch_and_trainable_variables_do_not():
    c = tf.constant(2.0)
    v = tf.Variable(3.0)
    frozen = tf.Variable(4.0, trainable=False)
    with tf.GradientTape(persistent=True) as tape:
        y = c * v * frozen
    assert tape.gradient(y, c) is None and tape.gradient(y, frozen) is None
    assert float(tape.gradient(y, v)) == 8.0
    assert len(tape.watched_variables()) == 1 and tape.watched_variables()[0] is v


def test_watch_accessed_variables_false():
    v, w = tf.Variable(3.0), tf.Variable(5.0)
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(w)
        y = v * w
    gv, gw = tape.gradient(y, [v, w])
    assert gv is None and float(gw) == 3.0


def test_unconnected_gradients():
    x, unused = tf.Variable(1.0), tf.Variable([1.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        y = x * 2.0
    assert tape.gradient(y, unused) is None
    zero = tape.gradient(y, unused, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    assert zero.numpy().tolist() == [0.0, 0.0] and zero.dtype == tf.float32
    assert tape.gradient(y, unused, unconnected_gradients="zero").shape == (2,)
    with pytest.raises(ValueError, match="unconnected_gradients"):
        tape.gradient(y, x, unconnected_gradients="maybe")


def test_nested_structures_of_sources_and_targets():
    a, b, c = tf.Variable(1.0), tf.Variable(2.0), tf.Variable(3.0)
    with tf.GradientTape() as tape:
        y = [a * b, b * c]
    grads = tape.gradient(y, {"first": a, "rest": (b, [c])})
    assert set(grads) == {"first", "rest"} and isinstance(grads["rest"], tuple)
    assert float(grads["first"]) == 2.0 and float(grads["rest"][0]) == 4.0 and float(grads["rest"][1][0]) == 2.0


def test_output_gradients_weight_the_targets():
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    g = tape.gradient(y, x, output_gradients=tf.constant([1.0, 0.0, -1.0]))
    assert g.numpy().tolist() == [2.0, 0.0, -6.0]


def test_nested_tapes_give_second_derivatives_and_record_independently():
    x = tf.Variable(2.0)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = x ** 3
        dy = inner.gradient(y, x)
        z = dy * x
    assert float(dy) == 12.0
    assert float(outer.gradient(z, x)) == pytest.approx(12.0 + 2.0 * 12.0)  # d(3x^3)/dx = 9x^2 = 36


def test_stop_recording_and_reset():
    x = tf.Variable(2.0)
    with tf.GradientTape(persistent=True) as tape:
        y = x * x
        with tape.stop_recording():
            z = y * x  # not recorded: z depends on nothing the tape knows
        w = y * 3.0
    assert tape.gradient(z, x) is None
    assert float(tape.gradient(w, x)) == 12.0
    with tf.GradientTape() as tape:
        y = x * x
        tape.reset()
        y2 = x * 5.0
    assert float(tape.gradient(y2, x)) == 5.0
    with tf.GradientTape() as tape:
        pass
    with pytest.raises(ValueError, match="Tape must be recording"):
        with tape.stop_recording():
            pass


def test_gradient_of_a_target_that_is_a_source_is_one():
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
    assert tape.gradient(x, x).numpy().tolist() == [1.0, 1.0]


def test_variables_read_many_times_collect_every_use():
    v = tf.Variable(2.0)
    with tf.GradientTape() as tape:
        y = v * v + v.value() * 3.0 + tf.identity(v)
        v.assign_add(1.0)  # later reads see the new value; the gradient is still with respect to v
        y = y + v * 0.0
    assert float(tape.gradient(y, v)) == 2 * 2.0 + 3.0 + 1.0


def test_jacobian():
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.stack([x[0] * x[1], x[0] + 3.0 * x[1], x[1] * x[1]])
    j = tape.jacobian(y, x)
    assert j.numpy().tolist() == [[2.0, 1.0], [1.0, 3.0], [0.0, 4.0]]


def test_integer_values_get_no_gradient():
    i = tf.constant(3)
    with pytest.warns(UserWarning, match="floating"):
        with tf.GradientTape() as tape:
            tape.watch(i)
            y = i * 2
    assert tape.gradient(y, i) is None


def test_op_errors_name_the_op_and_shapes():
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Matrix size-incompatible: In\[0\]: \[2,3\], In\[1\]: \[4,5\] \[Op:MatMul\]"):
        tf.matmul(tf.ones([2, 3]), tf.ones([4, 5]))
    with pytest.raises(ValueError, match=r"Incompatible shapes: \[2,3\] vs. \[4\] \[Op:AddV2\]"):
        tf.ones([2, 3]) + tf.ones([4])
    with pytest.raises(ValueError, match=r"expected to be a float32 tensor but is a float64 tensor \[Op:Mul\]"):
        tf.ones([2]) * tf.constant(np.ones(2))
    with pytest.raises(ValueError, match=r"tensor with 6 values, but the requested shape has 4 \[Op:Reshape\]"):
        tf.reshape(tf.ones([2, 3]), [2, 2])
    with pytest.raises(ValueError, match=r"Dimension 0 in both shapes must be equal.*\[Op:ConcatV2\]"):
        tf.concat([tf.ones([2, 3]), tf.ones([3, 3])], axis=1)
    with pytest.raises(ValueError, match=r"indices\[1\] = 7 is not in \[0, 3\) \[Op:GatherV2\]"):
        tf.gather(tf.ones([3, 2]), [0, 7])
    with pytest.raises(ValueError, match=r"Invalid reduction dimension 2 for input with 2 dimensions"):
        tf.reduce_sum(tf.ones([2, 2]), axis=2)
    with pytest.raises(ValueError, match=r"received a label value of 3|Received a label value of 3"):
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=[0, 3], logits=tf.ones([2, 3]))
    with pytest.raises(TypeError, match="Cannot convert 1.5 to EagerTensor of dtype int32"):
        tf.constant([1, 2]) + 1.5
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[Op:Exp\]"):
        tf.exp(tf.constant([1, 2]))
    with pytest.raises(ValueError, match="must be tensors or variables"):
        with tf.GradientTape() as tape:
            y = tf.constant(1.0)
        tape.gradient(y, [1.0])


def test_tensor_api():
    t = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    assert t.shape == (2, 2) and t.shape.as_list() == [2, 2] and t.shape.rank == 2 and t.ndim == 2
    assert repr(t.shape) == "TensorShape([2, 2])" and str(tf.constant(1.0).shape) == "()"
    assert t.dtype == tf.float32 and t.dtype.as_numpy_dtype is np.float32 and t.dtype.name == "float32"
    assert t.dtype == np.float32 and t.dtype == "float32" and tf.as_dtype(np.float64) is tf.float64
    assert isinstance(t.numpy(), np.ndarray) and np.asarray(t).dtype == np.float32
    assert np.array_equal(np.asarray(t) * 2, (t * 2).numpy())
    assert isinstance(np.ones(2) + tf.constant([1.0, 2.0]), tf.Tensor)  # NumPy leaves the op to the tensor
    assert repr(tf.constant(1.5)) == "<tf.Tensor: shape=(), dtype=float32, numpy=1.5>"
    assert repr(tf.constant([1, 2])) == "<tf.Tensor: shape=(2,), dtype=int32, numpy=array([1, 2], dtype=int32)>"
    assert str(tf.constant([1.0, 2.0])) == "tf.Tensor([1. 2.], shape=(2,), dtype=float32)"
    assert float(tf.constant(2.5)) == 2.5 and int(tf.constant(3)) == 3 and f"{tf.constant(0.25):.1f}" == "0.2"
    assert len(t) == 2 and [row.numpy().tolist() for row in t] == [[1.0, 2.0], [3.0, 4.0]]
    assert t[1, 0].numpy() == 3.0 and t[:, 1].numpy().tolist() == [2.0, 4.0] and t[..., None].shape == (2, 2, 1)
    assert (t > 2).numpy().tolist() == [[False, False], [True, True]]
    assert (t == t).numpy().all() and (t == None) is False  # noqa: E711 - TF's semantics
    assert list(range(10))[tf.constant(3)] == 3
    with pytest.raises(TypeError, match="unhashable"):
        hash(t)
    assert {t.ref(): 1}[t.ref()] == 1
    with pytest.raises(TypeError, match="len"):
        len(tf.constant(1.0))
    assert tf.constant(np.float64(1)).dtype == tf.float64 and tf.constant(1).dtype == tf.int32
    assert tf.constant([True]).dtype == tf.bool and tf.constant(2**40).dtype == tf.int64
    assert tf.constant(1.0, shape=[2, 2]).numpy().tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert tf.constant("abc").dtype == tf.string and tf.constant(["a", "bc"]).numpy().tolist() == [b"a", b"bc"]
    assert tf.convert_to_tensor([1, 2], dtype=tf.float64).dtype == tf.float64
    with pytest.raises(ValueError, match="requested dtype float64"):
        tf.convert_to_tensor(t, dtype=tf.float64)
    array = np.ones(3)
    tf.constant(array).numpy()[0] = 5.0  # numpy() copies; the tensor never shares the caller's array
    assert array[0] == 1.0 and not tf.constant(array)._value.flags.writeable


def test_variable_api():
    v = tf.Variable([1.0, 2.0], name="w")
    assert v.name == "w:0" and v.trainable and v.dtype == tf.float32 and v.shape == (2,)
    assert repr(v) == "<tf.Variable 'w:0' shape=(2,) dtype=float32, numpy=array([1., 2.], dtype=float32)>"
    assert isinstance(v + 1.0, tf.Tensor) and (v * v).numpy().tolist() == [1.0, 4.0] and (2.0 - v)[0] == 1.0
    assert v.assign([3.0, 4.0]) is v and v.numpy().tolist() == [3.0, 4.0]
    v.assign_add([1.0, 1.0])
    v.assign_sub(tf.constant([0.5, 0.5]))
    assert v.read_value().numpy().tolist() == [3.5, 4.5] and isinstance(v.value(), tf.Tensor)
    assert tf.Variable(1, dtype=tf.float64).dtype == tf.float64 and tf.Variable(2).dtype == tf.int32
    assert tf.Variable(lambda: tf.zeros([2])).shape == (2,) and not tf.Variable(1.0, trainable=False).trainable
    with pytest.raises(ValueError, match="Shape mismatch"):
        v.assign([1.0])
    with pytest.raises(TypeError, match="unhashable"):
        {v: 1}


def test_print_writes_tensors_like_tf():
    stream = io.StringIO()
    tf.print("loss:", tf.constant(0.5), tf.range(10), output_stream=stream)
    assert stream.getvalue() == "loss: 0.5 [0 1 2 ... 7 8 9]\n"
    stream = io.StringIO()
    tf.print(tf.constant([[1, 2], [3, 4]]), summarize=-1, output_stream=stream, end="!")
    assert stream.getvalue() == "[[1 2]\n [3 4]]!"
