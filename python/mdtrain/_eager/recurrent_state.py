"""Keras's ``initial_state=`` and ``return_state=True`` for eager calls of SimpleRNN / LSTM / GRU: the
C++ state API (nn/recurrent_layer.h: forward_from_state, backward_with_state) behind one tape node
whose inputs are x, the initial states and the weights and whose outputs are y and the final
states, so GradientTape differentiates through both (as keras_layers._run_layer does for x and y)."""
import numpy as np

from mdtrain import _core
from mdtrain._eager import tape as _tape
from mdtrain._eager.keras_layers import _as_input, _holding, _trainable_variables
from mdtrain._eager.tensor import wrap


def call_with_state(layer, inputs, initial_state, training):
    """[y, h] (SimpleRNN, GRU) or [y, h, c] (LSTM) with return_state, else y."""
    x = _as_input(inputs)
    model = layer._owner()
    if not layer._core.built:
        if model is not None:
            raise ValueError(f"Layer '{layer.name}' belongs to model '{model.name}', which is not built yet")
        from mdtrain import _random
        _core.tape_build_layer(layer._core, list(x.shape[1:]), _random.draw_seed())
    count = 2 if type(layer).__name__ == "LSTM" else 1
    if initial_state is None:
        states = []
    else:
        states = list(initial_state) if isinstance(initial_state, (list, tuple)) else [initial_state]
        if len(states) != count:
            raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}) expects {count} initial state "
                             f"tensor(s), got {len(states)}")
        states = [_as_input(s) for s in states]
    training = bool(training)
    step = layer.__dict__.get("_tape_training_calls", 0)
    weights = _trainable_variables(layer)
    for w in weights:
        _tape.variable_accessed(w)
    tapes = _tape.recording_tapes([x] + states + weights)
    x_array = np.ascontiguousarray(x._value, dtype=np.float32)
    state_arrays = [np.ascontiguousarray(s._value, dtype=np.float32) for s in states]
    with _holding(model, f"layer '{layer.name}'"):
        if model is not None:
            model._core.refresh_weights()
        y_array, final_arrays = _core.rnn_state_forward(layer._core, x_array, state_arrays, training, step)
    if training:
        layer._tape_training_calls = step + 1
    y, finals = wrap(y_array), [wrap(a) for a in final_arrays]
    outputs = [y] + finals
    if tapes:
        serial = layer.__dict__.get("_tape_serial", 0) + 1
        layer._tape_serial = serial
        need_dx = any(x._id in t._tracked for t in tapes)

        def backward(grads):
            with _holding(model, "gradient"):
                if layer.__dict__.get("_tape_serial") != serial:  # not the layer's last forward: redo it
                    _core.rnn_state_forward(layer._core, x_array, state_arrays, training, step)
                    layer._tape_serial = serial
                gy = grads[0]._value if grads[0] is not None else np.zeros_like(y_array)
                gs = [g._value if g is not None else np.zeros_like(a) for g, a in zip(grads[1:], final_arrays)]
                dx, dinit, dweights = _core.rnn_state_backward(
                    layer._core, np.ascontiguousarray(gy, dtype=np.float32),
                    [np.ascontiguousarray(g, dtype=np.float32) for g in gs], need_dx, bool(states))
            return ([wrap(dx) if dx is not None else None] + [wrap(d) for d in dinit] +
                    [wrap(d) for d in dweights[:len(weights)]])

        _tape.record(tapes, f"{type(layer).__name__}({layer.name})", [x] + states + weights, outputs, backward)
    return outputs if layer.return_state else y
