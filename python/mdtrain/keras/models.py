"""keras.Model (functional and subclassed), keras.Sequential and load_model. The loops (fit's
epochs, evaluate, predict) run in C++ with the GIL released; Python callbacks run on the calling
thread between steps."""
import functools
import hashlib
import inspect
import json
import math
import os
import threading
import warnings
import weakref

import numpy as np

from mdtrain import _core, _random
from mdtrain import distribute as _distribute
from mdtrain.keras import _custom_objects, _keras_archive, _keras_config, _keras_tensor, _keras_weights, _multi_output
from mdtrain.keras import _naming, _summary
from mdtrain.keras import callbacks as _callbacks
from mdtrain.keras import export as _export
from mdtrain.keras import losses as _losses
from mdtrain.keras import metrics as _metrics
from mdtrain.keras import optimizers as _optimizers
from mdtrain.keras._data_adapter import (DatasetEpochs, as_features, as_indices, as_labels, check_batch_size,
                                         check_count, check_lengths, is_dataset, materialize, train_validation_split)
from mdtrain.keras._keras_tensor import KerasTensor
from mdtrain.keras._sample_weights import per_sample_weights
from mdtrain.keras.layers import InputLayer, Layer, _wrap_core_layer, mask_after
from mdtrain.keras.layers.base_layer import _trainable_flag
from mdtrain.keras.layers.preprocessing.preprocessing_layer import PreprocessingLayer, not_in_a_model


def _exclusive(method):
    """Runs `method` while holding the model: a second fit/evaluate/predict/... on the same model
    from another thread raises instead of interleaving with the first (which corrupted the
    weights or crashed). The same thread may re-enter (a callback that evaluates inside fit)."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        if not self._busy.acquire(blocking=False):
            raise RuntimeError(f"{method.__name__}: model '{self.name}' is busy: another thread is running "
                               f"fit/evaluate/predict/train_on_batch on it. A model runs one of them at a time; "
                               f"wait for the other call to return, or give each thread its own model.")
        try:
            return method(self, *args, **kwargs)
        finally:
            self._busy.release()

    return run


class _WorkersDisagree(ValueError):
    """Raised on every worker at the same point: no other worker waits, nothing to release."""


def _releases_workers_on_error(method):
    """In a multi-worker job, a loop left on an exception (a callback's, bad data on this worker,
    Ctrl-C) fails the collectives of every worker naming this worker and the exception, so peers
    stop at once instead of waiting for it until their timeout and then blaming a lost rank."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except BaseException as e:
            strategy = self._strategy
            if strategy is not None and strategy._num_workers > 1 and not isinstance(e, _WorkersDisagree):
                rank = strategy._core.worker_index
                self._core.abort_collectives(f"worker {rank} left {method.__name__}() on {type(e).__name__}: {e}")
            raise

    return run


class Model:
    """keras.Model: a graph of layers trained as one model. Three ways to make one, as in Keras:
    Model(inputs, outputs) on keras.Input tensors (the Functional API); a subclass defining
    __init__ (layers as attributes) and call(inputs, training=None), traced into the same graph
    the first time it is built, called or trained; and Sequential, a subclass of its own. The
    loops (fit, evaluate, predict), saving and the weights are this class's for all three."""

    def __init__(self, *args, **kwargs):
        inputs = kwargs.pop("inputs", args[0] if len(args) > 0 else None)
        outputs = kwargs.pop("outputs", args[1] if len(args) > 1 else None)
        name = kwargs.pop("name", None)
        trainable = _trainable_flag(kwargs.pop("trainable", True), name or "keras.Model")
        if len(args) > 2 or kwargs:
            raise TypeError(f"keras.Model: unexpected arguments {list(args[2:]) + sorted(kwargs)}")
        if inputs is None and outputs is None:
            if type(self).call is Model.call:
                raise TypeError("keras.Model() needs inputs and outputs (the Functional API: "
                                "keras.Model(inputs, outputs)), or subclass it and define call()")
            self._init_state(None, name or _naming.unique_name(_naming.to_snake_case(type(self).__name__)))
            self._trainable = trainable
            return
        if inputs is None or outputs is None:
            raise ValueError("keras.Model: give both inputs and outputs (keras.Model(inputs, outputs))")
        self._init_state(None, name or _naming.unique_name("functional"))
        self._trainable = trainable
        self._attach_graph(inputs, outputs)

    def _init_state(self, core, name=None):
        """The Python state of a model around its C++ core (a new one, or one load_model read; None
        for a subclassed model until call() is traced)."""
        self._busy = threading.RLock()  # held by the thread running a loop on this model
        self.name = core.name if core is not None else name
        self._core = core
        self._layers = []
        self._trainable = True  # model.trainable (False: no layer of it trains)
        self._input_shape = None
        self._graph = None  # a functional model's structure (_FunctionalGraph)
        self._symbolic = None  # (inputs, outputs) KerasTensors: model.inputs / model.outputs
        self._pending_compile = None  # compile() of a subclassed model not traced yet
        # The strategy whose scope the model was created in (None: created outside any scope).
        self._creation_strategy = _distribute._current_scope()
        self._strategy = None
        self.optimizer = None
        self.loss = None
        self._metric_identifiers = []
        self._outputs = None  # an _multi_output.OutputLayout when compiled with several outputs
        self._metric_outputs = []  # with several outputs: the output each metric reads
        self.stop_training = False
        self.history = None
        self._shuffle_seed = None  # set from a backup or worker 0 (None: the model's own seed)
        self._resume_at = None  # (epoch, step) to continue from, set by BackupAndRestore
        self._workers_synced = False
        self._fit_batch_size = self._fit_steps = None  # of the running fit, for BackupAndRestore

    # ---- structure: the functional graph, and tracing a subclassed model into one ---------------
    def _attach_graph(self, inputs, outputs):
        """Makes the C++ functional model of the graph between inputs and outputs (KerasTensors)."""
        single_output = not isinstance(outputs, (list, tuple))
        inputs = _keras_tensor.as_tensor_list(inputs, "inputs")
        outputs = _keras_tensor.as_tensor_list(outputs, "outputs")
        nodes, output_values = _keras_tensor.collect_graph(inputs, outputs, self.name)
        if not nodes:
            raise ValueError(f"keras.Model '{self.name}': the outputs are the inputs; a model needs at least one "
                             "layer between them")
        layers = _unique_layers(layer for layer, _ in nodes)
        for owner in _unique_layers(layer._owner() for layer in layers if layer._owner() is not None):
            owner._core.refresh_weights()  # the layers of another model: its latest weights (replicas')
        kept = _built_weights(layers)
        core = _core.Model.functional(self.name, _random.draw_seed(), [list(t.shape[1:]) for t in inputs],
                                      [t.name for t in inputs], [(layer._core, ids) for layer, ids in nodes],
                                      output_values)
        _restore_weights(kept)
        self._layers = layers
        self._symbolic = (inputs, outputs)
        self._mask_source = next((t._mask_source for t in outputs if getattr(t, "_mask_source", None)), None)
        self._mask_readers = [layer.name for layer in self._layers if getattr(layer, "_reads_mask_in_graph", False)]
        self._adopt_core(core, single_output)

    def _adopt_core(self, core, single_output=True):
        """Takes a functional C++ model (new, or read by load_model) and its layers."""
        structure = core.graph_structure()
        if not self._layers:
            self._layers = [_wrap_core_layer(c) for c in _unique_layers(c for c, _ in structure["nodes"])]
        for layer in self._layers:
            layer._model = weakref.ref(self)
        self._core = core
        self._graph = _FunctionalGraph(structure, self._layers, single_output)
        self._input_shape = tuple(core.input_shape)
        if self._pending_compile is not None:
            pending, self._pending_compile = self._pending_compile, None
            self._compile_core(*pending)

    def _trace(self, input_shapes):
        """A subclassed model's call() run once on keras.Input tensors of these shapes (batch axis
        excluded; a list of them for several inputs): the graph it records is the model."""
        several = isinstance(input_shapes, list)
        inputs = [_keras_tensor.Input(shape=s) for s in (input_shapes if several else [input_shapes])]
        args = [inputs if several else inputs[0]]
        takes_training = "training" in inspect.signature(self.call).parameters
        try:
            with _keras_tensor.tracing():
                outputs = self.call(*args, training=None) if takes_training else self.call(*args)
                for out in outputs if isinstance(outputs, (list, tuple)) else [outputs]:
                    if not isinstance(out, _keras_tensor.KerasTensor):
                        raise TypeError(f"Model '{self.name}' ({type(self).__name__}): call() returned "
                                        f"{type(out).__name__} instead of layer outputs, so it cannot be traced into "
                                        "a graph of layers (mdtrain runs subclassed models as that graph; call() may "
                                        "only call layers)")
                self._attach_graph(inputs, outputs)
        except _keras_tensor.TracingError as e:
            raise TypeError(f"Model '{self.name}' ({type(self).__name__}): call() cannot be traced into a graph of "
                            f"layers: {e}. mdtrain runs subclassed models (fit, predict, model(x)) as that graph; "
                            "call() may only call layers (and +, * between their outputs).") from None

    def call(self, inputs, training=None):
        """The model on inputs (a subclass defines it; a functional model runs its graph)."""
        if self._graph is None:
            raise NotImplementedError(f"Model '{self.name}': a subclass of keras.Model must define call()")
        from mdtrain._eager import keras_layers

        return keras_layers.call_model(self, inputs, training)

    def _maybe_build(self):
        if self._core is None and self._input_shape is not None:
            self._trace(self._input_shape)

    @_exclusive
    def build(self, input_shape=None):
        """input_shape includes the batch axis, as in Keras: build((None, 784)); a list of such
        shapes for several inputs. A subclassed model traces call() here."""
        if input_shape is None:
            if self._core is None:
                raise ValueError(f"build: model '{self.name}' needs an input_shape")
            return
        several = isinstance(input_shape, list) and input_shape and isinstance(input_shape[0], (list, tuple))
        shape = [tuple(s)[1:] for s in input_shape] if several else tuple(input_shape)[1:]
        if self._core is not None:
            return
        self._input_shape = shape
        self._maybe_build()

    @property
    def layers(self):
        return list(self._layers)

    def get_layer(self, name=None, index=None):
        """A layer by its name or its index in model.layers (Keras's get_layer; index wins)."""
        if index is not None and name is not None:
            raise ValueError(f"Provide only a layer name or a layer index. Received: index={index}, name={name}.")
        if index is not None:
            if len(self.layers) <= index:
                raise ValueError(f"Was asked to retrieve layer at index {index} but model only has "
                                 f"{len(self.layers)} layers.")
            return self.layers[index]
        if name is not None:
            for layer in self.layers:
                if layer.name == name:
                    return layer
            raise ValueError(f"No such layer: {name}. Existing layers are: {[layer.name for layer in self.layers]}.")
        raise ValueError("Provide either a layer name or layer index at `get_layer`.")

    @property
    def built(self):
        return self._core is not None and self._core.built

    # ---- the symbolic graph: Keras's model.inputs / outputs, and layer.input / output -----------
    def _symbolic_io(self):
        """(input KerasTensors, output KerasTensors): those the functional model was made from, or
        replayed from the built model's graph (a Sequential's chain, a loaded model's nodes)."""
        if self._symbolic is None:
            if not self.built:
                raise AttributeError(f"The layer {self.name} has never been called and thus has no defined input.")
            reads = "int32" if self._reads_indices() else "float32"
            shapes, names, nodes, outputs = self._layer_calls()
            self._symbolic = _keras_tensor.replay([(shape, reads, name) for shape, name in zip(shapes, names)],
                                                  nodes, outputs)
        return self._symbolic

    def _layer_calls(self):
        """The built model as layer calls: (input shapes, input names, [(layer, value numbers)],
        output value numbers), values 0..inputs-1 being the inputs (a Sequential: a chain)."""
        if self._graph is not None:
            g = self._graph
            return g.input_shapes, g.input_names, g.nodes, g.outputs
        chain = [(layer, [k]) for k, layer in enumerate(self._layers)]
        return [tuple(self._core.input_shape)], [f"{self.name}_input"], chain, [len(chain)]

    def _call_symbolic(self, inputs, training):
        """The model used as a layer of another (transfer learning, an encoder in an autoencoder, a
        model called twice): its layers are called on `inputs` as its graph calls them, so the
        outer model holds the same layers, and their weights, once per call."""
        tensors = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if not self.built:
            shapes = [tuple(t.shape) for t in tensors]
            self.build(shapes if len(shapes) > 1 else shapes[0])
        shapes, names, nodes, outputs = self._layer_calls()
        moded = [layer.name for layer in self._layers if type(layer).__name__ in _TRAINING_MODE_LAYERS]
        if training is False and moded:
            warnings.warn(f"Model '{self.name}' called with training=False inside another model: mdtrain runs its "
                          f"layers {moded} as the step does (in training when trainable; a frozen "
                          "BatchNormalization is in inference mode); freeze them with trainable=False instead",
                          stacklevel=3)
        given = [tuple(t.shape[1:]) for t in tensors]
        if given != [tuple(s) for s in shapes]:
            raise ValueError(f"Model '{self.name}' takes inputs of shape {[(None, *s) for s in shapes]}, but was "
                             f"called on {[(None, *s) for s in given]}")
        values = list(tensors)
        for layer, ids in nodes:
            args = [values[i] for i in ids]
            values.append(layer(args if len(args) > 1 else args[0]))
        out = [values[i] for i in outputs]
        return out[0] if len(out) == 1 else out

    @property
    def inputs(self):
        return list(self._symbolic_io()[0])

    @property
    def outputs(self):
        return list(self._symbolic_io()[1])

    @property
    def input(self):
        inputs = self.inputs
        return inputs[0] if len(inputs) == 1 else inputs

    @property
    def output(self):
        outputs = self.outputs
        return outputs[0] if len(outputs) == 1 else outputs

    @property
    def input_shape(self):
        if not self.built:
            return None
        if self._graph is not None and len(self._graph.input_shapes) > 1:
            return [(None, *s) for s in self._graph.input_shapes]
        return (None, *self._core.input_shape)

    @property
    def output_shape(self):
        if not self.built:
            return None
        if self._graph is not None and not self._graph.single_output:
            return [(None, *s) for s in self._graph.output_shapes]
        return (None, *self._core.output_shape)

    def count_params(self):
        if not self.built:
            raise ValueError(f"You tried to call `count_params` on model '{self.name}', but the model isn't built.")
        return sum(layer.count_params() for layer in self._layers)

    def get_weights(self):
        self._refresh_from_strategy()
        return list(self._core.get_weights())

    def _refresh_from_strategy(self):
        """Strategies that keep the weights elsewhere (parameter servers) copy them into the model."""
        refresh = getattr(self._strategy, "_refresh_model", None)
        if refresh is not None:
            refresh(self)

    @_exclusive
    def set_weights(self, weights):
        self._core.set_weights([np.ascontiguousarray(w, dtype=np.float32) for w in weights])

    # Weights as variables (views of the C++ weights), layer by layer: the order of get_weights(),
    # and for the trainable ones the order the optimizer updates them in (docs/eager.md).
    @property
    def variables(self):
        return [w for layer in self._layers for w in layer.variables]

    weights = variables

    @property
    def trainable(self):
        """Keras's model.trainable: setting it sets every layer's (freezing or unfreezing them all);
        a model made with trainable=False trains none of its layers. Applied when compiled."""
        return self._trainable

    @trainable.setter
    def trainable(self, value):
        self._trainable = _trainable_flag(value, self.name)
        for layer in self._layers:
            layer.trainable = self._trainable

    @property
    def trainable_variables(self):
        if not self._trainable:
            return []
        return [w for layer in self._layers for w in layer.trainable_variables]

    trainable_weights = trainable_variables

    @property
    def non_trainable_variables(self):
        """Weights no optimizer updates (BatchNormalization's moving statistics, frozen layers')."""
        if not self._trainable:
            return list(self.variables)
        return [w for layer in self._layers for w in layer.non_trainable_variables]

    non_trainable_weights = non_trainable_variables

    @property
    def losses(self):
        """The layers' weight penalties, one scalar tensor per regularized layer (differentiable)."""
        return [loss for layer in self._layers for loss in layer.losses]

    def summary(self, line_length=None, positions=None, print_fn=None, expand_nested=False, show_trainable=False,
                layer_range=None, **kwargs):
        """The layers, their output shapes and parameter counts laid out as Keras 3 prints them
        (_summary.py); line_length, positions and show_trainable as in Keras. expand_nested and
        layer_range other than their defaults are refused (not drawn yet), never ignored."""
        if kwargs:
            raise TypeError(f"summary() got unexpected keyword arguments {sorted(kwargs)}")
        for arg, value, default in (("expand_nested", expand_nested, False), ("layer_range", layer_range, None)):
            if value != default:
                raise NotImplementedError(f"summary: {arg}={value!r} is not supported yet (only its default "
                                          f"{default!r})")
        if line_length is not None and (isinstance(line_length, bool) or not isinstance(line_length, (int, np.integer))
                                        or line_length < 40):
            raise ValueError(f"summary: line_length must be an integer of at least 40, got {line_length!r}")
        self._maybe_build()
        _summary.print_summary(self, line_length=None if line_length is None else int(line_length),
                               positions=None if positions is None else list(positions), print_fn=print_fn,
                               show_trainable=bool(show_trainable))

    def get_config(self):
        """Keras 3's config of the model: a Sequential model's layers (with its input shape once
        built), a functional model's layers with their inbound nodes and its input and output
        layers; the same dict as config.json's "config" in a .keras file."""
        return _keras_config.model_to_keras(self)["config"]

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """The model get_config describes, with new weights (a functional config: keras.Model;
        a Sequential one: keras.Sequential). custom_objects name the registered classes it uses."""
        if not isinstance(config, dict):
            raise TypeError(f"from_config: config must be a dict (what get_config returns), got {type(config).__name__}")
        functional = all(key in config for key in ("layers", "input_layers", "output_layers"))
        if issubclass(cls, Sequential) or not functional:
            if not issubclass(cls, Sequential) and cls is not Model:
                raise NotImplementedError(f"{cls.__name__}.from_config: subclassed models are made by their own "
                                          "from_config (define it on the subclass)")
            entry = {"class_name": "Sequential", "config": config}
        else:
            entry = {"class_name": "Functional", "config": config}
        with _custom_objects.custom_object_scope({**_custom_objects._scope_objects(), **(custom_objects or {})}):
            return _keras_config.model_from_config_entry(entry, compile=False)

    def to_json(self, **kwargs):
        """The model as Keras 3's JSON (serialize_keras_object of the model; kwargs go to
        json.dumps), which keras.models.model_from_json reads, here and in Keras."""
        return json.dumps(_keras_config.model_to_keras(self), **kwargs)

    # ---- compile ---------------------------------------------------------------------------
    @_exclusive
    def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None, weighted_metrics=None,
                run_eagerly=False, steps_per_execution=1, jit_compile="auto", auto_scale_loss=True):
        if loss is None:
            raise ValueError("compile: a loss is required, e.g. loss='sparse_categorical_crossentropy'")
        if weighted_metrics is not None:
            raise NotImplementedError("compile: weighted_metrics is not supported yet")
        if run_eagerly:
            # Keras would run call() / train_step in Python at every step; mdtrain traces call() once
            # and runs the steps in C++, so a run that relies on eager execution would differ.
            raise NotImplementedError("compile: run_eagerly=True is not supported (mdtrain runs every step in C++; "
                                      "use a GradientTape loop to step through Python code)")
        if jit_compile not in ("auto", True, False):
            raise ValueError(f"compile: jit_compile must be True, False or 'auto', got {jit_compile!r}")
        if not isinstance(auto_scale_loss, bool):
            raise ValueError(f"compile: auto_scale_loss must be True or False, got {auto_scale_loss!r}")
        if isinstance(steps_per_execution, bool) or not isinstance(steps_per_execution, (int, np.integer)) \
                or steps_per_execution < 1:
            raise ValueError(f"compile: steps_per_execution must be a positive integer, got {steps_per_execution!r}")
        # The C++ loop runs every step without returning to Python already; ParameterServerStrategy
        # sends this many steps to a worker per closure.
        self._steps_per_execution = int(steps_per_execution)
        strategy = self._compile_strategy()
        optimizer = _optimizers.get(optimizer)
        created = getattr(optimizer, "_creation_strategy", None)
        if created is not None and created is not strategy:
            raise ValueError(f"compile: the optimizer {optimizer!r} was created in the scope of {created!r}, but "
                             f"model '{self.name}' is compiled for {strategy!r}: an optimizer belongs to the "
                             "strategy it was created under. Create it in the same scope as the model.")
        if isinstance(metrics, str):
            # Keras 3 refuses it too; iterating the string would ask for metrics "a", "c", ...
            raise ValueError(f"compile: metrics must be a list, tuple or dict, got the string {metrics!r}; "
                             f"write metrics=[{metrics!r}]")
        spec = (loss, metrics, loss_weights)
        if self._core is None:  # a subclassed model: compiled once call() is traced
            structured = isinstance(loss, (list, tuple, dict)) or loss_weights is not None \
                or isinstance(metrics, dict) or any(isinstance(m, (list, tuple)) for m in metrics or [])
            # How many outputs call() returns is known once traced; a plain loss is checked now.
            resolved = (None, None, []) if structured else self._resolve_compile(*spec)
            self._pending_compile = (strategy, optimizer, spec)
            # Until then model.loss is what compile was given (as Keras keeps it).
            self.optimizer, self.loss, self._metric_identifiers = optimizer, resolved[0] or loss, resolved[1] or []
            self._strategy = strategy
            return
        self._compile_core(strategy, optimizer, spec)

    def _output_layout(self):
        """The outputs of a model with several (names: their layers' names), else None."""
        graph = self._graph
        if graph is None or len(graph.outputs) < 2:
            return None
        first_node = len(graph.input_shapes)
        names = [graph.nodes[v - first_node][0].name if v >= first_node else graph.input_names[v]
                 for v in graph.outputs]
        return _multi_output.OutputLayout(names, graph.output_shapes)

    def _resolve_compile(self, loss, metrics, loss_weights):
        """(loss, metric identifiers, the output each metric reads ([] for one output), output layout)."""
        layout = self._output_layout()
        if layout is not None:
            loss = layout.compile_loss(loss, loss_weights)
            identifiers, outputs = layout.metric_identifiers(metrics)
            return loss, identifiers, outputs, layout
        if isinstance(loss, (list, tuple)) and len(loss) == 1:  # one output: [loss] as Keras takes it
            loss = loss[0]
        if isinstance(loss, dict):
            raise ValueError(f"compile: model '{self.name}' has one output; give one loss, not a dict {loss!r}")
        if loss_weights is not None:
            raise NotImplementedError("compile: loss_weights on a model with one output are not supported yet")
        loss = _losses.get(loss)
        if loss.reduction != "sum_over_batch_size":
            raise ValueError(f"compile: fit trains on the mean loss of each batch (reduction='sum_over_batch_size'); "
                             f"{type(loss).__name__} has reduction={loss.reduction!r}, which is for calling the loss "
                             "directly (custom training loops). Compile with the default reduction.")
        if isinstance(metrics, dict):
            raise NotImplementedError("compile: per-output metric dicts are for models with several outputs")
        metrics = list(metrics or [])
        identifiers = [_metrics._metric_identifier(m) for m in metrics]
        self._warn_softmax_with_logits(loss)
        return loss, identifiers, [], None

    def _compile_core(self, strategy, optimizer, spec):
        loss, identifiers, metric_outputs, layout = self._resolve_compile(*spec)
        # A strategy whose layout depends on the model (keras.distribution.ModelParallel) makes its
        # C++ strategy for this model; the others have one for every model.
        readers = getattr(self, "_mask_readers", [])
        if hasattr(strategy, "_core_for") and readers:
            # Their executors run the layers stage by stage without handing masks on (only
            # nn/layer_stack.cpp does): the padding would silently go through the recurrence.
            raise NotImplementedError(f"compile: layer \"{readers[0]}\" of model '{self.name}' reads a mask, which "
                                      f"{type(strategy).__name__} does not pass between layers yet (Mirrored, "
                                      "MultiWorkerMirrored, CentralStorage and OneDevice do)")
        source = getattr(self, "_mask_source", None)
        if hasattr(strategy, "_core_for") and source is not None:
            # Nor do they leave the masked steps out of the loss (strategy/replicated_executor.cpp does).
            raise NotImplementedError(f"compile: the output of model '{self.name}' carries the mask of layer "
                                      f'"{source}", which {type(strategy).__name__} does not leave out of the loss '
                                      "and metrics yet (Mirrored, MultiWorkerMirrored, CentralStorage and OneDevice "
                                      "do)")
        core_strategy = strategy._core_for(self) if hasattr(strategy, "_core_for") else strategy._core
        for layer in self._layers:  # the trainable flags as they are now (Keras applies them at compile)
            layer._core.trainable = layer.trainable and self._trainable
        self._core.compile(loss._core, optimizer._make_core(), identifiers, core_strategy, metric_outputs)
        self._outputs = layout
        self._metric_outputs = metric_outputs
        optimizer._attach(self._core)
        place = getattr(strategy, "_compiled", None)
        if place is not None:
            place(self)
        self.optimizer, self.loss, self._metric_identifiers = optimizer, loss, identifiers
        self._strategy = strategy
        self._workers_synced = False

    def _compile_strategy(self):
        scope = _distribute._current_scope()
        created = self._creation_strategy
        if scope is not None and created is not None and scope is not created:
            raise ValueError(f"Model '{self.name}' was created in the scope of {created!r} and is being compiled in "
                             f"the scope of {scope!r}: a model belongs to the strategy it was created under.")
        # Built outside any scope and compiled inside one: mirrored by that strategy (see docs).
        return scope or created or _distribute.get_strategy()

    def _warn_softmax_with_logits(self, loss):
        cfg = getattr(loss, "_config", {}) or {}
        last = self._layers[-1] if self._layers else None
        if cfg.get("from_logits") and last is not None:
            act = json.loads(last._core.config_json()).get("activation")
            if act in ("softmax", "sigmoid"):
                warnings.warn(f'"`{type(loss).__name__}` received `from_logits=True`, but the `output` argument was '
                              f"produced by a {act} activation and thus does not represent logits. Was this "
                              "intended?", UserWarning, stacklevel=3)

    def _check_compiled(self, where):
        if self.loss is None:
            raise RuntimeError(f"You must call `compile()` before using the model ({where}).")
        source = getattr(self, "_mask_source", None)
        if source is not None and self._graph is not None and not self._graph.single_output:
            # Keras would leave the masked steps out of each output's loss and metrics; the packed
            # outputs of several (nn/multi_output_loss.h) carry no masks yet, and counting the padding
            # would silently train another model. (One output's loss and metrics leave them out:
            # nn/masked_steps.h.)
            raise NotImplementedError(f"{where}: an output of functional model '{self.name}' carries the mask of "
                                      f'layer "{source}"; mdtrain weights the loss and metrics by masks for models '
                                      "with one output only for now (predict works)")

    def _check_strategy(self, where):
        scope = _distribute._current_scope()
        if scope is not None and self._strategy is not None and scope is not self._strategy:
            raise ValueError(f"{where}: model '{self.name}' was compiled for {self._strategy!r} but is used in the "
                             f"scope of {scope!r}. Compile it again under this scope, or leave the scope.")

    @property
    def distribute_strategy(self):
        return self._strategy or _distribute.get_strategy()

    @property
    def metrics_names(self):
        if self._outputs is not None:
            return ["loss"] + self._outputs.log_names(self._metric_identifiers, self._metric_outputs)
        return ["loss"] + list(self._metric_identifiers)

    # ---- data checks -----------------------------------------------------------------------
    def _reads_indices(self):
        """True when the first layer takes integer indices (Embedding) rather than features."""
        return bool(self._layers) and self._layers[0]._reads_indices

    def _features(self, x, argname="x"):
        """x converted for the first layer: indices (as_indices) or float32 features (as_features);
        the inputs of a model with several, packed into one array (_FunctionalGraph.pack_inputs)."""
        if self._graph is not None and len(self._graph.input_shapes) > 1:
            return self._graph.pack_inputs(x, argname)
        return as_indices(x, argname) if self._reads_indices() else as_features(x, argname)

    def _prepare_x(self, x, where):
        """x as float32 (int32 or exact floats for indices); an unbuilt model is built for it here, as
        Keras builds on the first data. Indices are checked here, all of them, before any step runs."""
        if self._core is None and _several_arrays(x):  # a subclassed model with several inputs
            self._input_shape = [tuple(np.shape(a)[1:]) for a in x]
            self._maybe_build()
        x = self._features(x)
        if not self._layers and self._core is not None:
            raise ValueError(f"{where}: the model has no layers")
        if not self.built:
            self._input_shape = tuple(x.shape[1:])
            self._maybe_build()
            self._check_indices(x)
            return x
        expected = tuple(self._core.input_shape)  # None: any size (a variable-length input)
        if not _fits_declared(x.shape[1:], expected):
            first = self._layers[0].name
            if len(x.shape) - 1 == len(expected):
                axis = next(i for i, (a, b) in enumerate(zip(x.shape[1:], expected)) if b is not None and a != b) \
                    + 1 - len(x.shape)
                raise ValueError(f'Input 0 of layer "{first}" is incompatible with the layer: expected axis {axis} '
                                 f"of input shape to have value {expected[axis]}, but received input with shape "
                                 f"{x.shape}")
            raise ValueError(f'Input 0 of layer "{first}" is incompatible with the layer: expected shape='
                             f"{(None, *expected)}, found shape={x.shape}")
        self._check_indices(x)
        return x

    def _check_indices(self, x):
        # The layer's own check over the whole array: the position it names is x's, not a batch's.
        if self._reads_indices():
            self._layers[0]._core.check_indices(x)

    def _prepare_xy(self, x, y, where):
        x = self._prepare_x(x, where)
        y = self._outputs.pack_labels(y, where) if self._outputs is not None else as_labels(y)
        check_lengths(x, y, where)
        self._check_labels(y)
        return x, y

    def _check_labels(self, y):
        """Sparse labels out of range are reported before training starts, naming the culprit."""
        if self.loss is None or self.loss._core.class_name != "SparseCategoricalCrossentropy" or not self.built:
            return
        classes = self._core.output_shape[-1]
        if y.size == 0:
            return
        lo, hi = y.min(), y.max()
        if lo < 0 or hi >= classes or (y.dtype.kind == "f" and not np.all(np.isfinite(y))):
            bad = int(np.argmax((y < 0) | (y >= classes) | ~np.isfinite(y)))
            raise ValueError(f"sparse_categorical_crossentropy: label {y.flat[bad]} at index {bad} is out of range "
                             f"for {classes} classes (model output shape {self.output_shape}); labels must be "
                             f"integers in [0, {classes})")

    # ---- training --------------------------------------------------------------------------
    @_exclusive
    @_releases_workers_on_error
    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, validation_batch_size=None, validation_freq=1):
        self._check_compiled("fit")
        self._check_strategy("fit")
        if validation_steps is not None:
            validation_steps = check_count(validation_steps, "validation_steps", "fit")
        scheduled_fit = getattr(self._strategy, "_fit", None)
        if scheduled_fit is not None and (validation_split or validation_steps is not None):
            raise NotImplementedError("fit under ParameterServerStrategy: validation_split and validation_steps are "
                                      "not supported yet (pass validation_data)")
        if scheduled_fit is not None and self._outputs is not None:
            raise NotImplementedError(f"fit: model '{self.name}' has several outputs; ParameterServerStrategy does "
                                      "not train such models yet (every other strategy does)")
        if scheduled_fit is not None:  # ParameterServerStrategy: the steps run on its workers
            return scheduled_fit(self, x=x, y=y, batch_size=batch_size, epochs=epochs, verbose=verbose,
                                 callbacks=callbacks, validation_data=validation_data, shuffle=shuffle,
                                 initial_epoch=initial_epoch, steps_per_epoch=steps_per_epoch,
                                 validation_batch_size=validation_batch_size, validation_freq=validation_freq,
                                 sample_weight=sample_weight, class_weight=class_weight)
        batch_size = check_batch_size(batch_size, "fit")
        if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
            raise ValueError(f"fit: epochs must be a non-negative integer, got {epochs!r}")
        if isinstance(initial_epoch, bool) or not isinstance(initial_epoch, (int, np.integer)) or initial_epoch < 0:
            raise ValueError(f"fit: initial_epoch must be a non-negative integer, got {initial_epoch!r}")
        verbose = self._check_verbose(verbose, "fit")
        dataset = None
        w = None  # the per-sample weights of array data (_sample_weights.py)
        if is_dataset(x):
            if y is not None:
                raise ValueError("fit: when x is a dataset it yields (x, y); y must not be given")
            if sample_weight is not None:
                raise ValueError("fit: when x is a dataset it yields (x, y, sample_weight); sample_weight must not be "
                                 "given")
            if self._outputs is not None:
                raise NotImplementedError(f"fit: model '{self.name}' has several outputs; fit it on arrays (a list "
                                          "or dict of label arrays), datasets are not supported for it yet")
            if validation_split:
                raise ValueError("fit: validation_split is not supported with a dataset; pass validation_data")
            dataset = DatasetEpochs(x, steps_per_epoch, features=self._features)
            steps = steps_per_epoch
            dataset.class_weight = class_weight
            if dataset.plan_arrays is not None:
                x, y, plan_w = dataset.plan_arrays
                x = self._prepare_x(x, "fit")
                self._check_labels(y)
                w = per_sample_weights(plan_w, class_weight, y, "fit")
            if steps is None:
                card = dataset.dataset.cardinality()
                steps = int(card) if card >= 0 else None
            val = None
        else:
            x, y = self._prepare_xy(x, y, "fit")
            w = per_sample_weights(sample_weight, class_weight, y, "fit", self._outputs is not None)
            x, y, w, val = train_validation_split(x, y, validation_split, w)
        if validation_data is not None:
            if is_dataset(validation_data):
                # validation_steps: the first that many batches of the dataset, as Keras
                vx, vy, vw, _ = materialize(validation_data, "fit (validation_data)", steps=validation_steps)
                val = (vx, vy, vw)
                validation_steps = None
            elif not isinstance(validation_data, (tuple, list)) or len(validation_data) not in (2, 3):
                raise ValueError("validation_data must be a tuple (x_val, y_val), (x_val, y_val, val_sample_weight) "
                                 "or a dataset")
            else:
                val = (*validation_data[:2], validation_data[2] if len(validation_data) == 3 else None)
        if dataset is None:
            if len(x) == 0:
                raise ValueError("fit: the training data is empty (x has 0 samples)")
        if val is not None:
            vx, vy = self._prepare_xy(val[0], val[1], "fit (validation_data)")
            vw = per_sample_weights(val[2], None, vy, "fit (validation_data)", self._outputs is not None)
            val = (vx, vy, vw)
            if validation_steps is not None:  # the first validation_steps batches, as evaluate(steps=...)
                rows = validation_steps * check_batch_size(validation_batch_size, "fit", batch_size)
                val = (vx[:rows], vy[:rows], None if vw is None else vw[:rows])
        if dataset is None:
            n = len(x)
            steps = math.ceil(n / batch_size)
            if steps_per_epoch is not None:
                steps = check_count(steps_per_epoch, "steps_per_epoch", "fit")

        self._sync_workers()
        agreement = getattr(self._strategy, "_fit_agreement", None)
        self._check_workers_agree("fit", batch_size=batch_size, epochs=epochs, initial_epoch=initial_epoch,
                                  steps_per_epoch=-1 if steps is None else steps,
                                  samples=len(x) if dataset is None else -1,
                                  **({} if agreement is None else agreement(self, callbacks)))
        self._gather_stages()  # whole before on_train_begin (after a fit that failed mid-epoch too)
        self._fit_batch_size, self._fit_steps = batch_size, steps
        cbs = _callbacks.CallbackList(callbacks, add_history=True, add_progbar=verbose != 0 and self._is_chief(),
                                      model=self, verbose=verbose, epochs=epochs, steps=steps)
        self.stop_training = False
        self._resume_at = None
        cbs.on_train_begin()
        # A backup restored in on_train_begin says where the interrupted run stopped.
        resume_epoch, resume_step = self._resume_at or (initial_epoch, 0)
        self._resume_at = None
        if resume_epoch < initial_epoch:
            resume_epoch, resume_step = initial_epoch, 0
        logs = {}
        batch_hook = self._batch_hook(cbs, "train") if cbs.needs_batch_hooks("train") else None
        warned_nonfinite = False
        for epoch in range(resume_epoch, epochs):
            skip = resume_step if epoch == resume_epoch else 0
            cbs.on_epoch_begin(epoch)
            if dataset is None:
                order = self._epoch_order(n, epoch, shuffle)
                if batch_hook is not None:
                    cbs.on_train_batch_begin(skip)
                if skip:
                    # The rest of an interrupted epoch: the batches train_epoch would have run
                    # (batch s starts at row s * batch_size of the order, wrapping around).
                    begins = [(s * batch_size) % n for s in range(skip, steps)]
                    chunks = [order[b:b + min(batch_size, n - b)] for b in begins]
                    offsets = np.cumsum([0] + [len(c) for c in chunks]).tolist()
                    result = self._core.train_batches(x, y, np.concatenate(chunks), offsets, batch_hook, True, skip,
                                                      sample_weight=w)
                else:
                    result = self._core.train_epoch(x, y, order, batch_size, steps, batch_hook, sample_weight=w)
            else:
                result = self._fit_dataset_epoch(dataset, cbs, batch_hook, skip)
            self._gather_stages()  # every worker ends the epoch here: the epoch-end callbacks see whole weights
            logs = dict(result["logs"])
            bad_step = result["first_nonfinite_step"]
            if bad_step >= 0 and not warned_nonfinite:
                warned_nonfinite = True
                warnings.warn(f"fit: the loss became NaN or infinite at epoch {epoch + 1}, step {bad_step + 1} "
                              "(check the data for NaN/inf and the learning rate; TerminateOnNaN stops training "
                              "there)", RuntimeWarning, stacklevel=2)
            if val is not None and not self.stop_training and (epoch + 1) % validation_freq == 0:
                val_logs = self._core.evaluate(val[0], val[1], check_batch_size(validation_batch_size, "fit",
                                                                                  batch_size), None, val[2])
                logs.update({"val_" + k: v for k, v in val_logs.items()})
            cbs.on_epoch_end(epoch, logs)
            if self.stop_training:
                break
        cbs.on_train_end(logs)
        return self.history

    def _fit_dataset_epoch(self, dataset, cbs, batch_hook, skip=0):
        """One epoch over a dataset; the first `skip` batches are drawn but not trained on (resume)."""
        result, done = None, skip
        for kind, payload in dataset.epoch():
            if kind == "plan":
                x, y, w, order, offsets = payload
                w = per_sample_weights(w, dataset.class_weight, y, "fit")
                if skip >= len(offsets) - 1:
                    skip -= len(offsets) - 1
                    continue
                offsets, skip = offsets[skip:], 0
            else:
                if skip > 0:
                    skip -= 1
                    continue
                x, y, w = payload
                x = self._prepare_x(x, "fit")
                self._check_labels(y)
                check_lengths(x, y, "fit")
                w = per_sample_weights(w, dataset.class_weight, y, "fit")
                order, offsets = np.arange(len(x), dtype=np.int64), [0, len(x)]
            if batch_hook is not None and result is None:
                cbs.on_train_batch_begin(done)  # later begins come from the hook, after each end
            result = self._core.train_batches(x, y, order, offsets, batch_hook, result is None, done, sample_weight=w)
            done += result["steps"]
            if result["stopped"]:
                break
        if result is None:
            raise ValueError("fit: the dataset yielded no batches")
        return result

    def _epoch_order(self, n, epoch, shuffle):
        if shuffle == "batch":
            shuffle = True
        if not shuffle:
            return np.arange(n, dtype=np.int64)
        # A pure function of (model seed, epoch): two runs with one seed see the same batches.
        return np.random.default_rng([self._epoch_seed(), epoch]).permutation(n).astype(np.int64)

    def _epoch_seed(self):
        return self._core.seed if self._shuffle_seed is None else self._shuffle_seed

    def _is_chief(self):
        return self.distribute_strategy.should_checkpoint

    def _gather_stages(self):
        """PipelineParallel with the pipe axis across workers: the other workers' stages into this
        model (PipelineParallel.gather_stages). Collective: called only where every worker is."""
        gather = getattr(self._strategy, "gather_stages", None)
        if gather is not None:
            gather(self)

    def _sync_workers(self):
        """In a multi-worker job, start every worker from worker 0's weights and shuffling seed
        (TF broadcasts the initial variables the same way)."""
        strategy = self._strategy
        if self._workers_synced or strategy is None or strategy._num_workers == 1:
            return
        weights = [np.ascontiguousarray(w) for w in self.get_weights()]
        seed = np.array([self._epoch_seed()], dtype=np.uint64)
        strategy._sync_workers(weights + [seed])
        self.set_weights(weights)
        self._shuffle_seed = int(seed[0])
        self._workers_synced = True

    def _architecture_fingerprint(self):
        """A number naming the architecture (layer classes and configs, names left out: workers
        may have created other models before, which shifts the automatic names)."""
        def strip(value):
            if isinstance(value, dict):
                return {k: strip(v) for k, v in value.items() if k != "name"}
            if isinstance(value, list):
                return [strip(v) for v in value]
            return value

        text = json.dumps(strip(json.loads(self._core.config_json())), sort_keys=True)
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "little")  # exact in a float64

    def _check_workers_agree(self, where, **fields):
        """Every worker of a multi-worker job must run the same loop: workers that disagree on the
        batch size or the number of steps would pair up unrelated collectives and return mixed
        weights "successfully". Compares cheap fingerprints across workers before any step and
        raises on every worker, naming the worker and the differing value."""
        strategy = self._strategy
        if strategy is None or strategy._num_workers == 1:
            return
        fields = dict(architecture=self._architecture_fingerprint(), **fields)
        names = list(fields)
        workers, me = strategy._num_workers, strategy._core.worker_index
        table = np.zeros((workers, len(names)), dtype=np.float64)
        table[me] = [float(v) for v in fields.values()]  # each worker fills its own row; the sum
        flat = table.reshape(-1)                          # over workers gathers every row
        strategy._core.sum_across_workers(flat)
        table = flat.reshape(workers, len(names))
        for j, name in enumerate(names):
            for w in range(1, workers):
                if table[w, j] != table[0, j]:
                    what = "the model architecture" if name == "architecture" else name
                    shown = "" if name == "architecture" else f": worker 0 has {int(table[0, j])}, worker {w} " \
                                                             f"has {int(table[w, j])}"
                    raise _WorkersDisagree(f"{where}: the workers disagree on {what}{shown} (-1: unknown). Every worker "
                                     "must build the same model and call fit with the same data size and "
                                     "arguments.")

    def _batch_hook(self, cbs, mode):
        end = getattr(cbs, f"on_{mode}_batch_end")
        begin = getattr(cbs, f"on_{mode}_batch_begin")

        def hook(batch, logs):
            end(batch, logs)
            if self.stop_training:
                return True
            begin(batch + 1)
            return False

        return hook

    @_exclusive
    @_releases_workers_on_error
    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                 callbacks=None, return_dict=False):
        self._check_compiled("evaluate")
        self._check_strategy("evaluate")
        self._gather_stages()
        self._refresh_from_strategy()
        batch_size = check_batch_size(batch_size, "evaluate")
        steps = None if steps is None else check_count(steps, "steps", "evaluate")
        verbose = self._check_verbose(verbose, "evaluate")
        if is_dataset(x):
            if y is not None:
                raise ValueError("evaluate: when x is a dataset it yields (x, y); y must not be given")
            if sample_weight is not None:
                raise ValueError("evaluate: when x is a dataset it yields (x, y, sample_weight); sample_weight must "
                                 "not be given")
            x, y, sample_weight, dataset_batch = materialize(x, "evaluate", steps=steps, ragged=True)
            if isinstance(x, list):  # batches of different lengths (a variable-length input)
                return self._evaluate_batches(x, y, sample_weight, verbose, callbacks, return_dict)
            batch_size = dataset_batch or batch_size
        x, y = self._prepare_xy(x, y, "evaluate")
        w = per_sample_weights(sample_weight, None, y, "evaluate", self._outputs is not None)
        if steps is not None:  # the first `steps` batches, as Keras (fewer if the data runs out)
            x, y = x[:steps * batch_size], y[:steps * batch_size]
            w = None if w is None else w[:steps * batch_size]
        if len(x) == 0:
            raise ValueError("evaluate: the data is empty (x has 0 samples)")
        nsteps = math.ceil(len(x) / batch_size)
        self._check_workers_agree("evaluate", batch_size=batch_size, samples=len(x))
        cbs = _callbacks.CallbackList(callbacks, add_progbar=verbose != 0 and self._is_chief(), model=self,
                                      verbose=verbose, epochs=1, steps=nsteps)
        cbs.on_test_begin()
        hook = self._batch_hook(cbs, "test") if cbs.needs_batch_hooks("test") else None
        if hook is not None:
            cbs.on_test_batch_begin(0)
        logs = dict(self._core.evaluate(x, y, batch_size, hook, w))
        cbs.on_test_end(logs)
        return _evaluate_result(logs, return_dict)

    def _evaluate_batches(self, xs, ys, ws, verbose, callbacks, return_dict):
        """evaluate over batches that cannot be joined (their variable-length axes differ): one
        C++ evaluation per batch, the metrics accumulated over all of them as over one array."""
        batches = []
        for k, (x, y) in enumerate(zip(xs, ys)):
            x, y = self._prepare_xy(x, y, f"evaluate (batch {k})")
            w = per_sample_weights(None if ws is None else ws[k], None, y, "evaluate", self._outputs is not None)
            batches.append((x, y, w))
        self._check_workers_agree("evaluate", batch_size=len(batches[0][0]), samples=sum(len(b[0]) for b in batches))
        cbs = _callbacks.CallbackList(callbacks, add_progbar=verbose != 0 and self._is_chief(), model=self,
                                      verbose=verbose, epochs=1, steps=len(batches))
        cbs.on_test_begin()
        logs = {}
        for k, (x, y, w) in enumerate(batches):
            cbs.on_test_batch_begin(k)
            logs = dict(self._core.evaluate(x, y, len(x), None, w, reset_metrics=k == 0))
            cbs.on_test_batch_end(k, logs)
        cbs.on_test_end(logs)
        return _evaluate_result(logs, return_dict)

    @staticmethod
    def _check_verbose(verbose, where):
        verbose = 1 if verbose == "auto" else verbose
        if verbose not in (0, 1, 2):
            raise ValueError(f"{where}: verbose must be 0, 1, 2 or 'auto', got {verbose!r}")
        return verbose

    @_exclusive
    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """Outputs for x (keras.Model.predict). mdtrain shows no progress bar for predict; `verbose`
        is checked and otherwise has no effect (docs/differences.md)."""
        self._gather_stages()
        self._refresh_from_strategy()
        batch_size = check_batch_size(batch_size, "predict")
        steps = None if steps is None else check_count(steps, "steps", "predict")
        verbose = self._check_verbose(verbose, "predict")
        if is_dataset(x):
            x, _, _, dataset_batch = materialize(x, "predict", need_y=False, steps=steps, ragged=True)
            if isinstance(x, list):  # batches of different lengths (a variable-length input)
                return self._predict_batches(x)
            batch_size = dataset_batch or batch_size
        x = self._prepare_x(x, "predict")
        if steps is not None:
            x = x[:steps * batch_size]
        nsteps = math.ceil(len(x) / batch_size)
        cbs = _callbacks.CallbackList(callbacks, model=self, verbose=verbose, epochs=1, steps=nsteps)
        cbs.on_predict_begin()
        if len(x) == 0:
            out = np.zeros((0, *self._core.output_shape), dtype=np.float32)
        elif cbs.needs_batch_hooks("predict"):
            # Callbacks see every batch: the batches go to the C++ loop one at a time.
            outs = []
            for i in range(nsteps):
                cbs.on_predict_batch_begin(i)
                outs.append(self._core.predict(x[i * batch_size:(i + 1) * batch_size], batch_size))
                cbs.on_predict_batch_end(i, {"outputs": outs[-1]})
            out = np.concatenate(outs)
        else:
            out = self._core.predict(x, batch_size)
        cbs.on_predict_end()
        if self._graph is not None and not self._graph.single_output:
            return self._graph.unpack_outputs(out)
        return out

    def _predict_batches(self, xs):
        """predict over batches of different lengths: each batch's outputs, joined as Keras joins
        them (which needs the outputs to agree beyond the batch axis)."""
        outs = [self._core.predict(self._prepare_x(x, f"predict (batch {k})"), max(1, len(x)))
                for k, x in enumerate(xs)]
        if len({o.shape[1:] for o in outs}) > 1:
            raise ValueError("predict: the batches' outputs differ beyond the batch axis "
                             f"({sorted({o.shape[1:] for o in outs})}) and cannot be joined; predict each batch "
                             "on its own")
        out = np.concatenate(outs)
        if self._graph is not None and not self._graph.single_output:
            return self._graph.unpack_outputs(out)
        return out

    def __call__(self, inputs, training=None, mask=None, **kwargs):
        """The model on a batch, as a tensor; GradientTape records the call (docs/eager.md)."""
        from mdtrain._eager import keras_layers

        if mask is not None:
            raise NotImplementedError(f"Model '{self.name}' was called with mask=...: passing a mask to a model call "
                                      "is not supported yet (a Masking or Embedding(mask_zero=True) layer makes one)")
        if kwargs:
            raise TypeError(f"Model '{self.name}' was called with unexpected keyword arguments {sorted(kwargs)}")
        if _keras_tensor.is_symbolic(inputs):
            return self._call_symbolic(inputs, training)
        return keras_layers.call_model(self, inputs, training)

    @_exclusive
    @_releases_workers_on_error
    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None, return_dict=False):
        self._check_compiled("train_on_batch")
        self._check_strategy("train_on_batch")
        x, y = self._prepare_xy(x, y, "train_on_batch")
        w = per_sample_weights(sample_weight, class_weight, y, "train_on_batch", self._outputs is not None)
        logs = dict(self._core.train_on_batch(x, y, w))
        self._gather_stages()  # whole after the call, as after any step of one device
        return logs if return_dict else (list(logs.values())[0] if len(logs) == 1 else list(logs.values()))

    def train_step(self, data):
        """One optimizer step on data = (x, y) (Keras's train_step), returning the logs.

        Inside strategy.run each replica passes its slice; the step then runs once for all
        replicas and each replica gets its loss (its losses' sum / global batch)."""
        if not isinstance(data, (tuple, list)) or len(data) < 2:
            raise ValueError("train_step expects data = (x, y)")
        replica, deferred = _distribute._scopes.replica, _distribute._scopes.deferred
        if replica is not None and deferred is not None:
            if self._outputs is not None:
                raise NotImplementedError(f"train_step: model '{self.name}' has several outputs; inside "
                                          "strategy.run it is not supported yet (use fit or train_on_batch)")
            return deferred.add(self, replica[1], np.asarray(data[0]), np.asarray(data[1]))
        return self.train_on_batch(data[0], data[1], return_dict=True)

    @_exclusive
    @_releases_workers_on_error
    def test_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
        self._check_compiled("test_on_batch")
        x, y = self._prepare_xy(x, y, "test_on_batch")
        w = per_sample_weights(sample_weight, None, y, "test_on_batch", self._outputs is not None)
        logs = dict(self._core.test_on_batch(x, y, w))
        return logs if return_dict else (list(logs.values())[0] if len(logs) == 1 else list(logs.values()))

    # ---- profiling (an mdtrain extension) ---------------------------------------------------
    def step_time_breakdown(self, reset=False):
        """Where the training steps since the last reset spent their time, in seconds per step.

        Returns {"steps", "step", "compute", "communication", "update", "idle"}: "step" is the
        wall time of a whole step; "compute" the slowest replica's gather + forward + loss +
        backward; "communication" the gradient exchange (moving data and waiting for the other
        replicas), under ModelParallel also the model axis's collectives inside forward and backward
        (not counted as compute); "update" the optimizer; "idle" what is left (thread hand-offs, the Python loop).
        reset=True starts a new measurement after reading this one."""
        if self.loss is None or not self.built:
            raise RuntimeError("step_time_breakdown: compile and train the model first")
        profile = self._core.profile()
        stage_devices = (self._strategy.stage_report(self)["devices"]
                         if hasattr(self._strategy, "stage_report") and profile[0]["steps"] else None)
        if reset:
            self._core.reset_profile()
        first = profile[0]
        steps = first["steps"]
        if steps == 0:
            return {"steps": 0, "step": 0.0, "compute": 0.0, "communication": 0.0, "update": 0.0, "idle": 0.0}
        out = {"steps": steps, "step": first["wall"] / steps,
               "compute": max(p["compute"] for p in profile) / steps,
               "communication": first["allreduce"] / steps, "update": first["update"] / steps}
        out["idle"] = max(0.0, out["step"] - out["compute"] - out["communication"] - out["update"])
        # Pipeline parallelism: each device's busy (forward + backward, and the two apart) and idle
        # (bubble) time within the pipeline's span (the update after it is "update", not bubble).
        if stage_devices is not None:
            out["stages"] = [{"device": d["device"], "busy": d["busy"] / steps, "forward": d["forward"] / steps,
                              "backward": (d["busy"] - d["forward"]) / steps, "idle": d["idle"] / steps}
                             for d in stage_devices]
        return out

    # ---- saving ----------------------------------------------------------------------------
    @_exclusive
    def save(self, filepath, overwrite=True, zipped=None, **kwargs):
        """Architecture, weights, compile settings and optimizer state in one file, written atomically.

        A path ending in .keras gets a Keras 3 archive (Keras and TensorFlow load it); any other
        path mdtrain's own format (docs/file_format.md)."""
        if kwargs:
            raise TypeError(f"save() got unexpected keyword arguments {sorted(kwargs)} (Keras 3 takes filepath, "
                            "overwrite and zipped)")
        if zipped is False:
            raise NotImplementedError("save: zipped=False (an unzipped .keras directory) is not supported yet")
        filepath = self._check_save_path("save", filepath, overwrite)
        self._refresh_from_strategy()
        if _keras_archive.is_keras_archive(filepath):
            _keras_archive.save(self, filepath)
        else:
            self._core.save(filepath, json.dumps({"mdtrain_version": _version()}))

    @_exclusive
    def export(self, filepath, format="tf_saved_model", verbose=True, input_signature=None, **kwargs):
        """Keras 3's Model.export: format="onnx" writes an ONNX model of the inference graph (opset
        17 by default, kwargs opset_version; a dynamic batch axis; needs the onnx package), which
        onnxruntime runs with predict's results; "tf_saved_model" needs TensorFlow and is refused
        for now, naming what to do instead (docs/export.md)."""
        _export.export(self, filepath, format=format, verbose=verbose, input_signature=input_signature, **kwargs)

    def _check_save_path(self, where, filepath, overwrite):
        filepath = os.fspath(filepath)
        if not overwrite and os.path.exists(filepath):
            raise FileExistsError(f"{where}: {filepath} exists and overwrite=False")
        if os.path.isdir(filepath):
            raise IsADirectoryError(f"{where}: {filepath} is a directory, not a file path")
        if not self.built:
            raise ValueError(f"{where}: model '{self.name}' is not built yet; fit it or call build() first")
        return filepath

    @_exclusive
    def save_weights(self, filepath, overwrite=True):
        """Weights (and optimizer state). A path ending in .weights.h5 gets Keras 3's HDF5 layout;
        any other path mdtrain's own format."""
        filepath = self._check_save_path("save_weights", filepath, overwrite)
        self._refresh_from_strategy()
        if _keras_archive.is_keras_weights(filepath):
            _keras_archive.save_weights(self, filepath)
        else:
            self._core.save(filepath, json.dumps({"mdtrain_version": _version()}))

    @_exclusive
    def load_weights(self, filepath, skip_mismatch=False):
        if skip_mismatch:
            raise NotImplementedError("load_weights: skip_mismatch=True is not supported yet: every layer's weights "
                                      "must fit")
        filepath = os.fspath(filepath)
        if not os.path.exists(filepath):
            raise FileNotFoundError(f"load_weights: no file at {filepath}")
        from mdtrain._ps import checkpoint as _ps_checkpoint

        if _ps_checkpoint.is_ps_checkpoint(filepath):  # written by parameter servers (any number of them)
            _ps_checkpoint.load_into_model(self, filepath)
            return
        if _is_hdf5(filepath) or (_keras_archive.is_keras_weights(filepath) and os.path.isfile(filepath)
                                  and not _is_native(filepath)):
            if not self.built:
                raise ValueError(f"load_weights: build model '{self.name}' before loading {filepath} into it")
            _keras_weights.read(self, filepath, "load_weights")
            return
        other = load_model(filepath, compile=False)
        mine = [(l.name, [w.shape for w in l.get_weights()]) for l in self._layers]
        theirs = [(l.name, [w.shape for w in l.get_weights()]) for l in other._layers]
        if [s for _, s in mine] != [s for _, s in theirs]:
            raise ValueError(f"load_weights: the weights in {filepath} ({theirs}) do not fit model '{self.name}' "
                             f"({mine})")
        self.set_weights(other.get_weights())


class Sequential(Model):
    """A stack of layers trained as one model (keras.Sequential)."""

    def __init__(self, layers=None, name=None, trainable=True):
        trainable = _trainable_flag(trainable, name or "keras.Sequential")
        name = name or _naming.unique_name("sequential")
        self._init_state(_core.Model(name, _random.draw_seed()))
        self._trainable = trainable
        for layer in layers or []:
            self.add(layer)

    # ---- structure ------------------------------------------------------------------------
    @_exclusive
    def add(self, layer):
        if isinstance(layer, (InputLayer, KerasTensor)):
            if self._layers:
                raise ValueError("An Input must be the first thing added to a Sequential model")
            if isinstance(layer, KerasTensor) and layer._node is not None:
                raise ValueError(f"Sequential.add takes layers or a keras.Input, not the output of layer "
                                 f"'{layer._node.layer.name}'; use keras.Model(inputs, outputs) for graphs")
            self._input_shape = layer.shape[1:] if isinstance(layer, KerasTensor) else layer.shape
            return
        if isinstance(layer, PreprocessingLayer):
            raise not_in_a_model(layer, f"was added to Sequential model '{self.name}'")
        if not isinstance(layer, Layer):
            raise TypeError(f"The added layer must be an instance of class Layer. Received: layer={layer!r} "
                            f"of type {type(layer)}.")
        if layer._reads_indices and self._layers:
            # Its inputs are row numbers, which have no gradient: the layers before it could not train.
            raise ValueError(f'{type(layer).__name__} layer "{layer.name}" must be the first layer of Sequential model '
                             f"'{self.name}' (it follows \"{self._layers[-1].name}\"): its inputs are integer "
                             "indices, which are not differentiable, so no layer before it could be trained")
        if getattr(layer, "return_state", False) is True:  # recurrent layers: [y, *states] is not one tensor
            raise NotImplementedError(f'{type(layer).__name__} layer "{layer.name}": return_state=True in a Sequential '
                                      "model is not supported (its output is a list); call the layer eagerly")
        # Keras's masks (nn/sequence_mask.h): which layer's mask the output carries after this layer.
        incoming = getattr(self, "_mask_source", None)
        mask_source = mask_after(layer, incoming)
        if any(existing.name == layer.name for existing in self._layers):
            raise ValueError(f'All layers added to a Sequential model should have unique names. Name "{layer.name}" '
                             "is already the name of a layer in this model.")
        if not self._layers and self._input_shape is None and layer._declared_input_shape is not None:
            self._input_shape = layer._declared_input_shape
        self._core.add(layer._core)
        layer._model = weakref.ref(self)
        self._layers.append(layer)
        self._symbolic = None
        self._mask_source = mask_source
        if incoming is not None and getattr(layer, "_would_read_mask", False):
            self._mask_readers = getattr(self, "_mask_readers", []) + [layer.name]
        if self._input_shape is not None:
            self._maybe_build()

    @_exclusive
    def pop(self, rebuild=True):
        """Removes the last layer and returns it, as Keras's Sequential.pop. The remaining layers
        keep their weights and a compiled model stays compiled (fit goes on with the optimizer's
        state of the remaining weights). rebuild is accepted for Keras's signature: the C++ model
        is always consistent with its layers."""
        if not self._layers:
            raise TypeError("There are no layers in the model.")
        self._core.pop()
        layer = self._layers.pop()
        layer._model = None
        self._symbolic = None
        # The masks the remaining layers make and read, replayed as add() records them.
        self._mask_source, self._mask_readers = None, []
        for kept in self._layers:
            incoming = self._mask_source
            self._mask_source = mask_after(kept, incoming)
            if incoming is not None and getattr(kept, "_would_read_mask", False):
                self._mask_readers.append(kept.name)
        return layer

    def _maybe_build(self):
        if self._layers and not self._core.built and self._input_shape is not None:
            kept = _built_weights(self._layers)
            self._core.build(list(self._input_shape))
            _restore_weights(kept)

    @_exclusive
    def build(self, input_shape=None):
        """input_shape includes the batch axis, as in Keras: build((None, 784))."""
        if input_shape is not None:
            shape = tuple(input_shape)[1:]
            if self._core.built and tuple(self._core.input_shape) != shape:
                raise ValueError(f"Sequential model '{self.name}' is already built for input shape "
                                 f"{(None, *self._core.input_shape)}, not {tuple(input_shape)}")
            self._input_shape = shape
        self._maybe_build()


def _evaluate_result(logs, return_dict):
    """evaluate's return value, as Keras's: the logs dict, or the loss alone, or [loss, *metrics]."""
    if return_dict:
        return logs
    values = list(logs.values())
    return values[0] if len(values) == 1 else values


def _fits_declared(actual, declared):
    """Whether an array's shape (batch axis excluded) fits a declared one (None: any size)."""
    return len(actual) == len(declared) and all(d is None or a == d for a, d in zip(actual, declared))


def _built_weights(layers):
    """The weights of the layers already built (layer.build(), or called eagerly) before a model
    builds them: a model keeps them, as Keras keeps a built layer's variables."""
    return [(layer, list(layer._core.get_weights())) for layer in layers if layer._core.built]


def _restore_weights(kept):
    for layer, weights in kept:
        if weights and [w.shape for w in layer._core.get_weights()] == [w.shape for w in weights]:
            layer._core.set_weights(weights)




# Layers that compute differently in training and in inference.
_TRAINING_MODE_LAYERS = {"BatchNormalization", "Dropout", "SpatialDropout1D", "SpatialDropout2D", "GaussianNoise",
                         "GaussianDropout", "AlphaDropout"}


def _unique_layers(layers):
    """The layers in the order of their first call (a layer called several times is one layer)."""
    seen, out = set(), []
    for layer in layers:
        if id(layer) not in seen:
            seen.add(id(layer))
            out.append(layer)
    return out


def _several_arrays(x):
    return isinstance(x, (list, tuple)) and len(x) > 1 and all(isinstance(a, np.ndarray) for a in x)


class _FunctionalGraph:
    """What Python keeps of a functional model's graph (C++ runs it; see nn/layer_graph.h): the
    nodes as (layer, value numbers) for model(x) on eager tensors, and the input and output shapes
    for packing several inputs (outputs) into one array at the C++ boundary."""

    def __init__(self, structure, layers, single_output):
        self.input_shapes = [tuple(s) for s in structure["input_shapes"]]
        self.input_names = list(structure["input_names"])
        by_name = {layer.name: layer for layer in layers}  # a shared layer has a node per call
        self.nodes = [(by_name[core.name], list(ids)) for core, ids in structure["nodes"]]
        self.outputs = list(structure["outputs"])
        self.output_shapes = [tuple(s) for s in structure["output_shapes"]]
        self.single_output = single_output and len(self.outputs) == 1

    def pack_inputs(self, x, argname):
        """The inputs (a list or tuple, one array per input) as one float32 array (batch, total):
        each input flattened, side by side, in input order."""
        count = len(self.input_shapes)
        if isinstance(x, dict):
            missing = [n for n in self.input_names if n not in x]
            if missing:
                raise ValueError(f"{argname}: no array for inputs {missing} (inputs: {self.input_names})")
            x = [x[n] for n in self.input_names]
        if not isinstance(x, (list, tuple)) or len(x) != count:
            raise ValueError(f"{argname}: the model has {count} inputs {self.input_names}; pass a list of {count} "
                             f"arrays, got {type(x).__name__}" + (f" of {len(x)}" if isinstance(x, (list, tuple))
                                                                  else ""))
        arrays = [as_features(a, f"{argname}[{k}]") for k, a in enumerate(x)]
        for k, (a, shape) in enumerate(zip(arrays, self.input_shapes)):
            if tuple(a.shape[1:]) != shape:
                raise ValueError(f"{argname}: input {k} ('{self.input_names[k]}') expects shape {(None, *shape)}, "
                                 f"got {a.shape}")
            if len(a) != len(arrays[0]):
                raise ValueError(f"{argname}: every input must have the same number of samples, got "
                                 f"{[len(b) for b in arrays]}")
        return np.ascontiguousarray(np.concatenate([a.reshape(len(a), -1) for a in arrays], axis=1))

    def unpack_outputs(self, out):
        parts, begin = [], 0
        for shape in self.output_shapes:
            size = int(np.prod(shape))
            parts.append(out[:, begin:begin + size].reshape((len(out), *shape)))
            begin += size
        return parts


def _starts_with(path, magic):
    if not os.path.isfile(path):  # a pipe or device: never opened here (it could block); the reader refuses it
        return False
    with open(path, "rb") as f:
        return f.read(len(magic)) == magic


def _is_hdf5(path):
    return _starts_with(path, b"\x89HDF\r\n\x1a\n")


def _is_zip(path):
    return _starts_with(path, b"PK\x03\x04")


def _is_native(path):
    """mdtrain's own model file (docs/file_format.md), whatever its extension."""
    return _starts_with(path, b"MDTRAIN\0")


def _version():
    from mdtrain._version import __version__

    return __version__


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):
    """Loads a model saved by Model.save, a .keras file of Keras 3 or mdtrain's own format (under
    the current scope's strategy if compiled). custom_objects (and the current
    custom_object_scope, and classes registered with keras.saving.register_keras_serializable)
    name the subclasses of mdtrain layers a .keras file may use; no other class is loaded (the
    file's "module" fields are never imported, so safe_mode has nothing more to guard and is
    only checked)."""
    if custom_objects is not None and not isinstance(custom_objects, dict):
        raise TypeError(f"load_model: custom_objects must be a dict of name -> class, got "
                        f"{type(custom_objects).__name__}")
    if not isinstance(safe_mode, bool):
        raise ValueError(f"load_model: safe_mode must be True or False, got {safe_mode!r}")
    with _custom_objects.custom_object_scope({**_custom_objects._scope_objects(), **(custom_objects or {})}):
        return _load_model(filepath, compile)


def _load_model(filepath, compile):
    filepath = os.fspath(filepath)
    if not os.path.exists(filepath):
        raise FileNotFoundError(f"load_model: no file at {filepath}")
    if _is_zip(filepath) or (_keras_archive.is_keras_archive(filepath) and os.path.isfile(filepath)
                             and not _is_native(filepath)):
        return _keras_archive.load(filepath, compile=compile)
    strategy = _distribute.get_strategy()
    core, metadata = _core.load_model(filepath, strategy._core)
    if core.is_functional:
        model = Model.__new__(Model)
        model._init_state(None, core.name)
        model._adopt_core(core, single_output=len(core.graph_structure()["outputs"]) == 1)
    else:
        model = Sequential.__new__(Sequential)
        model._init_state(core)
        model._layers = [_wrap_core_layer(l) for l in core.layers]
        for layer in model._layers:
            layer._model = weakref.ref(model)
        model._input_shape = tuple(core.input_shape) if core.built else None
    if core.compiled:
        config = json.loads(core.optimizer().config_json())
        cls = getattr(_optimizers, config["class_name"])
        optimizer = cls.from_config(config["config"])
        optimizer._attach(core)
        model.optimizer = optimizer
        model.loss = _losses._from_config_json(core.loss_config_json())
        model._metric_identifiers = list(core.metric_names)
        layout = model._output_layout() if core.is_functional else None
        if layout is not None and model.loss._core.class_name == "MultiOutputLoss":
            outputs = model.loss._config["outputs"]
            losses = [_losses._from_config_json(json.dumps(o["loss"])) for o in outputs]
            layout.loss = _multi_output.MultiOutputLoss(layout.names, losses, [o["weight"] for o in outputs],
                                                        model.loss._core)
            model.loss, model._outputs, model._metric_outputs = layout.loss, layout, list(core.metric_outputs)
        model._strategy = strategy
    if not compile:
        model.optimizer = model.loss = None
    return model


def model_from_json(json_string, custom_objects=None):
    """The model of Model.to_json's text (Keras 3's too), with new weights; compiled when the
    JSON holds a compile_config, as Keras does."""
    try:
        config = json.loads(json_string)
    except (TypeError, ValueError) as e:
        raise ValueError(f"model_from_json: not JSON text: {e}") from None
    with _custom_objects.custom_object_scope({**_custom_objects._scope_objects(), **(custom_objects or {})}):
        return _keras_config.model_from_config_entry(config)


def _default_clone(layer):
    return layer.__class__.from_config(layer.get_config())


def clone_model(model, input_tensors=None, clone_function=None, call_function=None, recursive=False, **kwargs):
    """keras.models.clone_model: the same architecture with new layers and new weights (Keras
    initializes them afresh too). clone_function(layer) makes each new layer (default: the
    layer's class from its config). A Sequential model gives a Sequential one, a functional
    model a functional one; input_tensors (keras.Input tensors, one per model input) are the new
    model's inputs. call_function is refused (not supported yet)."""
    if kwargs:
        raise TypeError(f"clone_model: unexpected arguments {sorted(kwargs)}")
    if not isinstance(model, Model):
        raise ValueError(f"clone_model: expected a keras.Model, got {type(model).__name__}")
    if call_function is not None:
        raise NotImplementedError("clone_model: call_function is not supported yet (only None)")
    if input_tensors is not None:
        input_tensors = list(input_tensors) if isinstance(input_tensors, (list, tuple)) else [input_tensors]
        for t in input_tensors:
            if not isinstance(t, KerasTensor) or t._node is not None:
                raise ValueError(f"clone_model: input_tensors must be keras.Input tensors, got {t!r}")
    if not isinstance(recursive, bool):
        raise ValueError(f"clone_model: recursive must be True or False, got {recursive!r}")
    clone = clone_function or _default_clone

    def make(layer):
        new = clone(layer)
        if not isinstance(new, Layer):
            raise ValueError(f"clone_model: clone_function must return a layer, got {type(new).__name__} for layer "
                             f"'{layer.name}'")
        return new

    if isinstance(model, Sequential):
        if input_tensors is not None:
            if len(input_tensors) != 1:
                raise ValueError(f"clone_model: a Sequential model has one input; got {len(input_tensors)} "
                                 "input_tensors")
            out = Sequential(name=model.name)
            out.add(input_tensors[0])
            for layer in model.layers:
                out.add(make(layer))
            return out
        out = Sequential([make(layer) for layer in model.layers], name=model.name)
        if model.built:
            out.build(model.input_shape)
        return out
    if type(model) is not Model:
        raise NotImplementedError(f"clone_model: model '{model.name}' is a subclassed model "
                                  f"({type(model).__name__}); cloning one is not supported yet (Sequential and "
                                  "functional models are)")
    model._maybe_build()
    if model._graph is None:
        raise ValueError(f"clone_model: model '{model.name}' is not built")
    by_name = {layer.name: layer for layer in model._layers}
    config = _keras_config.functional_to_keras(model)
    given = None
    if input_tensors is not None:
        names = list(model._graph.input_names)
        if len(input_tensors) != len(names):
            raise ValueError(f"clone_model: model '{model.name}' has {len(names)} inputs {names}; got "
                             f"{len(input_tensors)} input_tensors")
        for name, shape, t in zip(names, model._graph.input_shapes, input_tensors):
            if tuple(t.shape[1:]) != tuple(shape):
                raise ValueError(f"clone_model: input_tensors for input '{name}' has shape {tuple(t.shape)}, the "
                                 f"model's is {(None, *shape)}")
        given = dict(zip(names, input_tensors))
    return _keras_config.functional_from_keras(config, make_layer=lambda entry: make(by_name[entry["name"]]),
                                               input_tensors=given)
