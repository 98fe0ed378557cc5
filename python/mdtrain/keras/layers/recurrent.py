"""keras.layers' recurrent layers (C++: nn/recurrent_layer, nn/lstm, nn/gru, nn/bidirectional, ops/recurrent)."""
import json

import numpy as np

from mdtrain import _random
from mdtrain.keras import _keras_tensor
from mdtrain.keras._serialization import to_config
from mdtrain.keras.layers._arguments import _copy_config_attributes, _no_constraints
from mdtrain.keras.layers.base_layer import _CLASSES, Layer, _activation_name, _core_layer, _refuse_call_kwargs


class _Recurrent(Layer):
    """Keras's recurrent layers on (batch, timesteps, features), with Keras's weights (kernel,
    recurrent_kernel, bias) so Keras weights load unchanged. Return the last output (batch, u), or
    (batch, timesteps, u) with return_sequences; go_backwards, dropout and recurrent_dropout as Keras.
    return_state / initial_state in eager calls (not in functional models yet).
    Not yet supported (NotImplementedError): stateful, constraints (docs/layers.md).
    C++: nn/recurrent_layer.h."""

    _GATES = True  # has recurrent_activation
    _would_read_mask = True  # skips masked steps (mask_after; C++ nn/recurrent_layer.h)
    _ONLY_ACTIVATION = "tanh"
    _ONLY_RECURRENT_ACTIVATION = "sigmoid"
    _EXTRA = ()  # (argument, config key) the subclass adds

    def _make(self, units, activation, recurrent_activation, use_bias, kernel_initializer, recurrent_initializer,
              bias_initializer, kernel_regularizer, recurrent_regularizer, bias_regularizer, activity_regularizer,
              kernel_constraint, recurrent_constraint, bias_constraint, dropout, recurrent_dropout, seed,
              return_sequences, return_state, go_backwards, stateful, unroll, extra):
        name = self._name
        cls_name = type(self).__name__
        if isinstance(units, bool) or not isinstance(units, (int, np.integer)) or units <= 0:
            raise ValueError(f"Received an invalid value for argument `units`, expected a positive integer, "
                             f"got {units!r}.")
        _no_constraints(name, cls_name, kernel_constraint=kernel_constraint,
                        recurrent_constraint=recurrent_constraint, bias_constraint=bias_constraint,
                        activity_regularizer=activity_regularizer)
        for arg, value, fine in (("stateful", stateful, False),):
            if value != fine:
                raise NotImplementedError(f'{cls_name} "{name}": {arg}={value!r} is not supported yet')
        for arg, value in (("dropout", dropout), ("recurrent_dropout", recurrent_dropout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f'{cls_name} "{name}": {arg} must be a float in [0, 1), got {value!r}')
        activation = _activation_name(activation, f'{cls_name} "{name}"')
        checks = [("activation", activation, self._ONLY_ACTIVATION)]
        config = {"name": name, "units": int(units), "activation": activation, "use_bias": bool(use_bias),
                  "kernel_initializer": to_config(kernel_initializer, "initializer"),
                  "recurrent_initializer": to_config(recurrent_initializer, "initializer"),
                  "bias_initializer": to_config(bias_initializer, "initializer"),
                  "kernel_regularizer": to_config(kernel_regularizer, "regularizer"),
                  "recurrent_regularizer": to_config(recurrent_regularizer, "regularizer"),
                  "bias_regularizer": to_config(bias_regularizer, "regularizer"),
                  "return_sequences": bool(return_sequences), "go_backwards": bool(go_backwards),
                  "dropout": float(dropout), "recurrent_dropout": float(recurrent_dropout),
                  # The masks' seed: drawn from the global seed when not given, as Dropout's.
                  "seed": _random.draw_seed() if seed is None else int(seed), **extra}
        if self._GATES:
            config["recurrent_activation"] = _activation_name(recurrent_activation, f'{cls_name} "{name}"')
            checks.append(("recurrent_activation", config["recurrent_activation"], self._ONLY_RECURRENT_ACTIVATION))
        for arg in ("activation", "recurrent_activation"):
            if config.get(arg) in ("softmax", "gelu"):
                raise NotImplementedError(f'{cls_name} "{name}": {arg}={config[arg]!r} is not supported (linear, relu, '
                                          "sigmoid or tanh)")
        for arg, value, only in checks:
            if only is not None and value != only:
                raise NotImplementedError(f'{cls_name} "{name}": {arg}={value!r} is not supported yet '
                                          f'(only "{only}")')
        self._core = _core_layer(cls_name, config)
        self.unroll = bool(unroll)
        self.return_state = bool(return_state)
        _copy_config_attributes(self, self._attributes())

    @classmethod
    def _attributes(cls):
        base = ("units", "activation", "use_bias", "return_sequences", "go_backwards", "dropout",
                "recurrent_dropout", "seed")
        return base + (("recurrent_activation",) if cls._GATES else ()) + tuple(k for _, k in cls._EXTRA)

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        layer.unroll = False
        layer.return_state = False
        _copy_config_attributes(layer, cls._attributes())
        return layer

    def get_config(self):
        config = super().get_config()
        config["unroll"] = self.unroll
        config["return_state"] = self.return_state
        return config

    def __call__(self, inputs, training=None, initial_state=None, **kwargs):
        # initial_state / return_state: eager calls only (_eager/recurrent_state.py, C++ state API).
        _refuse_call_kwargs(self, kwargs)
        if initial_state is None and not self.return_state:
            return super().__call__(inputs, training, **kwargs)
        symbolic = [_keras_tensor.is_symbolic(t) for t in [inputs] + list(
            initial_state if isinstance(initial_state, (list, tuple)) else [initial_state])]
        if any(symbolic):
            raise NotImplementedError(
                f'{type(self).__name__} "{self.name}": return_state=True / initial_state in a functional model are '
                "not supported yet: mdtrain's layer graph (nn/layer_graph.h) gives each node one output tensor and "
                "its layers one input, so a layer returning [y, h, c] or taking states cannot be a node; call the "
                "layer eagerly (it works there, with GradientTape)")
        from mdtrain._eager.recurrent_state import call_with_state
        return call_with_state(self, inputs, initial_state, training)


def _wrapped_config(config):
    """A recurrent layer's config inside a Bidirectional's, without the zero_output_for_mask Keras
    sets there: a Bidirectional zeros the outputs at masked steps itself (with return_sequences;
    without, there are none)."""
    config = dict(config)
    zero = config.pop("zero_output_for_mask", None)
    if zero not in (None, False, bool(config.get("return_sequences"))):
        raise NotImplementedError(f"Bidirectional: a wrapped layer with zero_output_for_mask={zero!r} and "
                                  f"return_sequences={config.get('return_sequences')!r} is not supported")
    return config


def _check_use_cudnn(use_cudnn, cls_name):
    """Keras raises when use_cudnn=True cannot be honoured; mdtrain has no cuDNN kernels (its own
    recurrent kernels give the same results), so only "auto" and False are accepted."""
    if use_cudnn is True:
        raise ValueError(f"{cls_name}: use_cudnn=True was specified, but mdtrain has no cuDNN kernels; use 'auto' or "
                         "False")
    if use_cudnn not in ("auto", False):
        raise ValueError(f"{cls_name}: use_cudnn must be 'auto', True or False, got {use_cudnn!r}")


class SimpleRNN(_Recurrent):
    """keras.layers.SimpleRNN: h = activation(x @ kernel + h_prev @ recurrent_kernel + bias);
    activation tanh (default), relu, sigmoid or linear."""

    _GATES = False
    _ONLY_ACTIVATION = None

    def __init__(self, units, activation="tanh", use_bias=True, kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", bias_initializer="zeros", kernel_regularizer=None,
                 recurrent_regularizer=None, bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                 recurrent_constraint=None, bias_constraint=None, dropout=0.0, recurrent_dropout=0.0,
                 return_sequences=False, return_state=False, go_backwards=False, stateful=False, unroll=False,
                 seed=None, **kwargs):
        super().__init__(**kwargs)
        self._make(units, activation, None, use_bias, kernel_initializer, recurrent_initializer, bias_initializer,
                   kernel_regularizer, recurrent_regularizer, bias_regularizer, activity_regularizer,
                   kernel_constraint, recurrent_constraint, bias_constraint, dropout, recurrent_dropout, seed,
                   return_sequences, return_state, go_backwards, stateful, unroll, {})


class LSTM(_Recurrent):
    """keras.layers.LSTM: kernel (features, 4u), recurrent_kernel (u, 4u), bias (4u), gates i, f, c, o;
    unit_forget_bias starts the forget gate's bias at 1. activation and recurrent_activation: linear,
    relu, sigmoid or tanh."""

    _ONLY_ACTIVATION = None
    _ONLY_RECURRENT_ACTIVATION = None

    _EXTRA = (("unit_forget_bias", "unit_forget_bias"),)

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal", bias_initializer="zeros",
                 unit_forget_bias=True, kernel_regularizer=None, recurrent_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, recurrent_constraint=None, bias_constraint=None,
                 dropout=0.0, recurrent_dropout=0.0, seed=None, return_sequences=False, return_state=False,
                 go_backwards=False, stateful=False, unroll=False, use_cudnn="auto", **kwargs):
        _check_use_cudnn(use_cudnn, type(self).__name__)
        super().__init__(**kwargs)
        self._make(units, activation, recurrent_activation, use_bias, kernel_initializer, recurrent_initializer,
                   bias_initializer, kernel_regularizer, recurrent_regularizer, bias_regularizer,
                   activity_regularizer, kernel_constraint, recurrent_constraint, bias_constraint, dropout,
                   recurrent_dropout, seed, return_sequences, return_state, go_backwards, stateful, unroll,
                   {"unit_forget_bias": bool(unit_forget_bias)})


class GRU(_Recurrent):
    """keras.layers.GRU: kernel (features, 3u), recurrent_kernel (u, 3u), gates z, r, h; bias (2, 3u)
    with reset_after=True (Keras's default), (3u,) with reset_after=False."""

    _EXTRA = (("reset_after", "reset_after"),)

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal", bias_initializer="zeros",
                 kernel_regularizer=None, recurrent_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, recurrent_constraint=None, bias_constraint=None, dropout=0.0,
                 recurrent_dropout=0.0, seed=None, return_sequences=False, return_state=False, go_backwards=False,
                 stateful=False, unroll=False, reset_after=True, use_cudnn="auto", **kwargs):
        _check_use_cudnn(use_cudnn, type(self).__name__)
        super().__init__(**kwargs)
        self._make(units, activation, recurrent_activation, use_bias, kernel_initializer, recurrent_initializer,
                   bias_initializer, kernel_regularizer, recurrent_regularizer, bias_regularizer,
                   activity_regularizer, kernel_constraint, recurrent_constraint, bias_constraint, dropout,
                   recurrent_dropout, seed, return_sequences, return_state, go_backwards, stateful, unroll,
                   {"reset_after": bool(reset_after)})


class Bidirectional(Layer):
    """keras.layers.Bidirectional(layer, merge_mode="concat", backward_layer=None): a forward and a
    backward copy of a SimpleRNN/LSTM/GRU ("forward_<name>", "backward_<name>"), or the given
    backward_layer (which must have go_backwards opposite to layer's, and the same units and
    return_sequences); the backward output flipped back in time with return_sequences, then merged:
    "concat" on the last axis, "sum", "mul" or "ave". merge_mode=None (Keras: a list of two outputs)
    is NotImplementedError: mdtrain layers have one output. With a mask and return_sequences the
    outputs at masked steps are zeros (Keras's zero_output_for_mask). Weights: forward's, then
    backward's."""

    _would_read_mask = True
    _MERGE_MODES = ("concat", "sum", "mul", "ave")

    def __init__(self, layer, merge_mode="concat", weights=None, backward_layer=None, **kwargs):
        if isinstance(layer, dict):  # from_config
            layer = _CLASSES[layer["class_name"]].from_config(_wrapped_config(layer["config"]))
        if isinstance(backward_layer, dict):
            backward_layer = dict(backward_layer, config=_wrapped_config(backward_layer["config"]))
        super().__init__(**kwargs)
        if not isinstance(layer, _Recurrent):
            raise ValueError(f'Bidirectional "{self._name}": layer must be a SimpleRNN, LSTM or GRU instance, '
                             f"got {layer!r}")
        if merge_mode is None:
            raise NotImplementedError(f'Bidirectional "{self._name}": merge_mode=None (a list of the two outputs) is '
                                      'not supported: an mdtrain layer has one output; use "concat", "sum", "mul" '
                                      'or "ave"')
        if merge_mode not in self._MERGE_MODES:
            raise ValueError(f'Invalid merge mode. Received: {merge_mode!r}. Merge mode should be one of '
                             f'{{"sum", "mul", "ave", "concat", None}}')
        if weights is not None:
            raise NotImplementedError(f'Bidirectional "{self._name}": weights= is not supported yet')
        inner = {"class_name": type(layer).__name__, "config": json.loads(layer._core.config_json())}
        config = {"name": self._name, "layer": inner, "merge_mode": merge_mode}
        if isinstance(backward_layer, dict):  # from_config
            config["backward_layer"] = backward_layer
        elif backward_layer is not None:
            if not isinstance(backward_layer, _Recurrent):
                raise ValueError(f'Bidirectional "{self._name}": backward_layer must be a SimpleRNN, LSTM or GRU '
                                 f"instance, got {backward_layer!r}")
            back = json.loads(backward_layer._core.config_json())
            for key in ("return_sequences", "units"):
                if back.get(key) != inner["config"].get(key):
                    raise ValueError(f'Bidirectional "{self._name}": backward_layer {key}={back.get(key)!r} differs '
                                     f"from the forward layer's {inner['config'].get(key)!r}")
            if bool(back.get("go_backwards")) == bool(inner["config"].get("go_backwards")):
                raise ValueError(f'Bidirectional "{self._name}": backward_layer must have go_backwards opposite to '
                                 "the forward layer's")
            config["backward_layer"] = {"class_name": type(backward_layer).__name__, "config": back}
        self._core = _core_layer("Bidirectional", config)
        self.merge_mode = merge_mode

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        layer.merge_mode = json.loads(core_layer.config_json())["merge_mode"]
        return layer


_CLASSES.update({"SimpleRNN": SimpleRNN, "LSTM": LSTM, "GRU": GRU, "Bidirectional": Bidirectional})
