"""tf.GradientTape: records the ops run on watched values and differentiates them backwards.

Every tensor and variable has an id. A tape tracks the ids of what it watches and of every
floating output of an op that had a tracked input; such an op is recorded as a node (input ids,
outputs, backward function). A variable's reads carry the variable's own id, so gradients with
respect to a variable collect every read of it. Backward functions are written with the same
ops, so while another tape records they are recorded too: that is how nested tapes give
higher-order gradients. Backward functions that run C++ (layers, Keras losses) are recorded on
the outer tapes as nodes whose own gradient raises, naming the op.

Tapes are per thread, as TensorFlow's are.
"""
import enum
import itertools
import threading
import warnings

import numpy as np

_ids = itertools.count(1)


def new_id():
    return next(_ids)


class _State(threading.local):
    def __init__(self):
        self.tapes = []  # entered, not yet exited; innermost last


_state = _State()


class UnconnectedGradients(enum.Enum):
    """tf.UnconnectedGradients: what gradient() gives for a source the target does not depend on."""

    NONE = "none"
    ZERO = "zero"


class _Node:
    __slots__ = ("name", "input_ids", "outputs", "backward")

    def __init__(self, name, input_ids, outputs, backward):
        self.name = name
        self.input_ids = input_ids  # None where the input cannot carry a gradient
        self.outputs = outputs  # the output tensors (shape and dtype for zero gradients)
        self.backward = backward  # (grads of outputs, None where absent) -> grads of inputs


def _floating(dtype):
    return dtype.is_floating or dtype.is_complex


def recording_tapes(inputs):
    """The tapes that must record an op on these inputs (tensors or variable reads; others None)."""
    tapes = _state.tapes
    if not tapes:
        return ()
    found = []
    for tape in tapes:
        if tape._recording and tape._nodes is not None:
            tracked = tape._tracked
            for t in inputs:
                if t is not None and t._id in tracked:
                    found.append(tape)
                    break
    return found


def any_recording():
    return any(t._recording for t in _state.tapes)


def record(tapes, name, inputs, outputs, backward):
    """Adds an op to `tapes` (from recording_tapes): inputs and outputs are tensors (None allowed
    in inputs); backward(list of output grads) returns one gradient (or None) per input."""
    input_ids = [t._id if t is not None and _floating(t.dtype) else None for t in inputs]
    node = _Node(name, input_ids, list(outputs), backward)
    for tape in tapes:
        tape._nodes.append(node)
        for out in outputs:
            if _floating(out.dtype):
                tape._tracked.add(out._id)


def record_opaque(name, inputs, outputs):
    """Records, on the tapes now recording, that `outputs` (gradients a C++ backward produced) depend
    on `inputs`, with a backward that raises: their second derivative is not available."""
    tapes = recording_tapes(inputs)
    if not tapes:
        return

    def backward(grads):
        raise LookupError(f"No second-order gradient is defined through {name}: its gradient runs in C++ and is "
                          "not itself recorded. Nest tapes around mdtrain ops (tf.matmul, tf.nn.relu, ...) "
                          "instead of Keras layer or loss calls to differentiate twice.")

    record(tapes, name + "Grad", inputs, outputs, backward)


def variable_accessed(variable):
    """A trainable variable read inside a tape is watched (watch_accessed_variables=True)."""
    for tape in _state.tapes:
        if tape._recording and tape._watch_accessed and tape._nodes is not None and variable.trainable:
            tape._watch_one(variable)


_VALUE_TYPES = None


def _value_types():
    """(EagerTensor, Variable): imported on first use (both modules import this one)."""
    global _VALUE_TYPES
    if _VALUE_TYPES is None:
        from mdtrain._eager.tensor import EagerTensor
        from mdtrain._eager.variables import Variable

        _VALUE_TYPES = (EagerTensor, Variable)
    return _VALUE_TYPES


def _flatten(structure):
    if isinstance(structure, dict):
        return [leaf for key in sorted(structure) for leaf in _flatten(structure[key])]
    if isinstance(structure, (list, tuple)):
        return [leaf for item in structure for leaf in _flatten(item)]
    return [structure]


def _pack_like(structure, flat):
    """`flat` (in _flatten's order) in the shape of `structure`."""
    return _build(structure, iter(flat))


def _build(structure, items):
    # Module-level, not a closure: a recursive closure is a reference cycle, which would keep the
    # returned gradients alive until the garbage collector runs.
    if isinstance(structure, dict):
        built = {key: _build(structure[key], items) for key in sorted(structure)}
        return {key: built[key] for key in structure}
    if isinstance(structure, (list, tuple)):
        values = [_build(x, items) for x in structure]
        if isinstance(structure, tuple) and hasattr(structure, "_fields"):  # namedtuple
            return type(structure)(*values)
        return type(structure)(values)
    return next(items)


class GradientTape:
    """tf.GradientTape(persistent=False, watch_accessed_variables=True)."""

    def __init__(self, persistent=False, watch_accessed_variables=True):
        self._persistent = bool(persistent)
        self._watch_accessed = bool(watch_accessed_variables)
        self._recording = False
        self._nodes = []
        self._tracked = set()
        self._watched_variables = []

    # ---- recording -----------------------------------------------------------------------
    def __enter__(self):
        if self._recording:
            raise ValueError("Tape is still recording, This can happen if you try to re-enter an already-active tape.")
        if self._nodes is None:
            raise RuntimeError("A non-persistent GradientTape can only be used to compute one set of gradients "
                               "(or jacobians)")
        self._recording = True
        _state.tapes.append(self)
        return self

    def __exit__(self, *exc):
        self._recording = False
        tapes = _state.tapes
        for i in range(len(tapes) - 1, -1, -1):
            if tapes[i] is self:
                del tapes[i]
                break
        return False

    def _watch_one(self, value):
        if not isinstance(value, _value_types()):
            raise ValueError(f"Passed in object {value!r} of type {type(value).__name__!r}, not tf.Tensor or "
                             "tf.Variable or ExtensionType.")
        if not _floating(value.dtype):
            warnings.warn(f"The dtype of the watched tensor must be floating (e.g. tf.float32), got {value.dtype!r}",
                          stacklevel=3)
            return
        if value._id not in self._tracked:
            self._tracked.add(value._id)
            if isinstance(value, _value_types()[1]):
                self._watched_variables.append(value)

    def watch(self, tensor):
        """Watches a tensor, a variable or a nested structure of them."""
        if self._nodes is None:
            return
        for value in _flatten(tensor):
            self._watch_one(value)

    def watched_variables(self):
        return tuple(self._watched_variables)

    def stop_recording(self):
        """A context in which this tape records nothing (tf.GradientTape.stop_recording)."""
        tape = self

        class _Paused:
            def __enter__(self_inner):
                if not tape._recording:
                    raise ValueError("Tape must be recording.")
                tape._recording = False

            def __exit__(self_inner, *exc):
                tape._recording = True
                return False

        return _Paused()

    def reset(self):
        """Forgets everything recorded, as a new tape entered in this one's place."""
        self._nodes = []
        self._tracked = set()
        self._watched_variables = []

    # ---- differentiation -----------------------------------------------------------------
    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=UnconnectedGradients.NONE):
        """d(sum of target)/d(source) for every source, in the structure of `sources`."""
        if self._nodes is None:
            raise RuntimeError("A non-persistent GradientTape can only be used to compute one set of gradients "
                               "(or jacobians)")
        unconnected = _unconnected(unconnected_gradients)
        targets = _flatten(target)
        flat_sources = _flatten(sources)
        grads_out = None if output_gradients is None else _flatten(output_gradients)
        if grads_out is not None and len(grads_out) != len(targets):
            raise ValueError(f"gradient: {len(targets)} targets but {len(grads_out)} output_gradients")
        result = self._gradient(targets, flat_sources, grads_out, unconnected)
        if not self._persistent:
            self._nodes = None
            self._tracked = set()
        return _pack_like(sources, result)

    def jacobian(self, target, sources, unconnected_gradients=UnconnectedGradients.NONE,
                 parallel_iterations=None, experimental_use_pfor=True):
        """d(target[i...])/d(source) stacked along target's shape, one backward pass per element."""
        from mdtrain._eager import ops

        if self._nodes is None:
            raise RuntimeError("A non-persistent GradientTape can only be used to compute one set of gradients "
                               "(or jacobians)")
        unconnected = _unconnected(unconnected_gradients)
        target = ops.convert_to_tensor(target)
        flat_sources = _flatten(sources)
        n = target.shape.num_elements()
        rows = [[] for _ in flat_sources]
        for i in range(n):
            onehot = np.zeros(n, dtype=target.dtype.as_numpy_dtype)
            onehot[i] = 1
            grads = self._gradient([target], flat_sources, [ops.constant(onehot.reshape(target.shape.as_list()))],
                                   UnconnectedGradients.NONE)
            for k, g in enumerate(grads):
                rows[k].append(g)
        out = []
        for k, src in enumerate(flat_sources):
            shape = target.shape.as_list() + src.shape.as_list()
            if all(g is None for g in rows[k]):
                out.append(ops.zeros(shape, dtype=src.dtype) if unconnected is UnconnectedGradients.ZERO else None)
                continue
            filled = [ops.zeros(src.shape.as_list(), dtype=src.dtype) if g is None else g for g in rows[k]]
            out.append(ops.reshape(ops.stack(filled), shape))
        if not self._persistent:
            self._nodes = None
            self._tracked = set()
        return _pack_like(sources, out)

    def _gradient(self, targets, sources, output_gradients, unconnected):
        ops = _ops()
        EagerTensor, Variable = _value_types()
        for s in sources:
            if not isinstance(s, _value_types()):
                raise ValueError(f"gradient: sources must be tensors or variables, got {s!r} of type "
                                 f"{type(s).__name__}")
        target_tensors = []
        for t in targets:
            if isinstance(t, Variable):
                t = t._snapshot()
            elif not isinstance(t, EagerTensor):
                raise ValueError(f"gradient: the target must be a tensor or a variable, got {t!r} of type "
                                 f"{type(t).__name__}")
            target_tensors.append(t)

        nodes = self._nodes
        was_recording = self._recording
        self._recording = False  # this tape does not record its own backward pass
        try:
            # Nodes between the sources and the targets: reachable backwards from a target and
            # forwards from a source (or from anything watched, when a source is an intermediate).
            producer = {}
            for index, node in enumerate(nodes):
                for out in node.outputs:
                    producer[out._id] = index
            needed = set()
            stack = [t._id for t in target_tensors]
            seen = set(stack)
            while stack:
                index = producer.get(stack.pop())
                if index is None or index in needed:
                    continue
                needed.add(index)
                for i in nodes[index].input_ids:
                    if i is not None and i not in seen:
                        seen.add(i)
                        stack.append(i)
            # A source the tape never watched (nor computed from watched values) gets no gradient.
            source_ids = {s._id for s in sources if s._id in self._tracked}
            reached = set(source_ids)
            relevant = []
            for index, node in enumerate(nodes):
                if index in needed and any(i in reached for i in node.input_ids if i is not None):
                    relevant.append(index)
                    reached.update(out._id for out in node.outputs)

            grads = {}
            for k, t in enumerate(target_tensors):
                if output_gradients is not None and output_gradients[k] is not None:
                    g = ops.convert_to_tensor(output_gradients[k], dtype=t.dtype)
                else:
                    g = ops.ones_like(t)
                _accumulate(grads, t._id, g)
            for index in reversed(relevant):
                node = nodes[index]
                out_grads = [grads.get(out._id) for out in node.outputs]
                if all(g is None for g in out_grads):
                    continue
                in_grads = node.backward(out_grads)
                for i, g in zip(node.input_ids, in_grads):
                    if i is not None and g is not None and i in reached:
                        _accumulate(grads, i, g)
            result = []
            for s in sources:
                g = grads.get(s._id) if s._id in source_ids else None
                if g is not None and g.dtype != s.dtype and s.dtype.is_floating and g.dtype.is_floating:
                    g = ops.cast(g, s.dtype)
                if g is None and unconnected is UnconnectedGradients.ZERO:
                    g = ops.zeros(s.shape.as_list(), dtype=s.dtype)
                result.append(g)
            return result
        finally:
            self._recording = was_recording


def _accumulate(grads, key, g):
    old = grads.get(key)
    grads[key] = g if old is None else _ops().add(old, g)


_OPS = None


def _ops():
    """The ops module (imported on first use: it imports this one)."""
    global _OPS
    if _OPS is None:
        from mdtrain._eager import ops

        _OPS = ops
    return _OPS


def _unconnected(value):
    if isinstance(value, UnconnectedGradients):
        return value
    if isinstance(value, str) and value.lower() in ("none", "zero"):
        return UnconnectedGradients(value.lower())
    raise ValueError(f"Unknown value for unconnected_gradients: {value!r}")
