"""tf.Variable, and the variable views of a Keras model's weights.

A Variable keeps one id for its whole life: every read is a tensor carrying that id, so a tape
differentiates with respect to the variable, whenever it was read. A plain Variable owns a
read-only array that assignments replace (reads taken earlier keep their values). A model
weight (ModelWeight) is a view: reading copies the C++ layer's weight, assigning writes into it.
"""
import numpy as np

from mdtrain._eager import dtypes
from mdtrain._eager import tensor as _tensor_module
from mdtrain._eager import tape as _tape
from mdtrain._eager.tensor import EagerTensor, TensorShape, _Reference, convert_to_tensor

class Variable:
    """tf.Variable(initial_value, trainable=True, name=None, dtype=None, shape=None)."""

    __array_priority__ = 100

    def __init__(self, initial_value=None, trainable=None, validate_shape=True, caching_device=None, name=None,
                 variable_def=None, dtype=None, import_scope=None, constraint=None, synchronization=None,
                 aggregation=None, shape=None, experimental_enable_variable_lifting=True):
        if initial_value is None:
            raise ValueError("The `initial_value` arg (None) must be specified.")
        if callable(initial_value):
            initial_value = initial_value()
        if isinstance(initial_value, (EagerTensor, Variable)):
            value = convert_to_tensor(initial_value)
            if dtype is not None and value.dtype != dtypes.as_dtype(dtype):
                value = EagerTensor(value._value.astype(dtypes.as_dtype(dtype).as_numpy_dtype))
        else:
            value = convert_to_tensor(initial_value, dtype=dtype, _strict=False)
        if shape is not None and TensorShape(shape).is_fully_defined() and TensorShape(shape) != value.shape:
            raise ValueError(f"The initial value's shape ({value.shape}) is not compatible with the explicitly "
                             f"supplied `shape` argument ({TensorShape(shape)}).")
        if constraint is not None and not callable(constraint):
            raise ValueError(f"The `constraint` argument must be a callable. Received: {constraint!r}")
        self._array = value._value
        self._id = _tape.new_id()
        self._trainable = True if trainable is None else bool(trainable)
        self._name = "Variable" if name is None else str(name)
        self._constraint = constraint

    # ---- storage (ModelWeight overrides) ---------------------------------------------------
    def _read_array(self):
        return self._array

    def _write_array(self, array):
        array = np.array(array, dtype=self._array.dtype, copy=True)
        array.flags.writeable = False
        self._array = array

    def _update_storage(self):
        """A writable array holding the value, for an in-place optimizer update, and a function that
        commits it afterwards."""
        array = self._read_array().copy()

        def commit():
            self._write_array(array)

        return array, commit

    # ---- reading ---------------------------------------------------------------------------
    def _snapshot(self):
        """The value as a tensor carrying this variable's id (a read a tape connects to it)."""
        _tape.variable_accessed(self)
        return EagerTensor(self._read_array(), _id=self._id)

    def value(self):
        return self._snapshot()

    def read_value(self):
        return self._snapshot()

    def numpy(self):
        value = np.array(self._read_array(), copy=True)
        return value[()] if value.ndim == 0 else value

    def __array__(self, dtype=None, copy=None):
        value = self._read_array()
        return value.astype(dtype) if dtype is not None and np.dtype(dtype) != value.dtype else value.copy()

    def _peek(self):
        """The value's array without a copy, for its shape and dtype only."""
        return self._array

    @property
    def dtype(self):
        return dtypes.as_dtype(self._peek().dtype)

    @property
    def shape(self):
        return TensorShape(self._peek().shape)

    def get_shape(self):
        return self.shape

    @property
    def ndim(self):
        return self._peek().ndim

    @property
    def name(self):
        return f"{self._name}:0"

    @property
    def path(self):
        return self._name

    @property
    def trainable(self):
        return self._trainable

    @property
    def constraint(self):
        return self._constraint

    @property
    def device(self):
        return "/job:localhost/replica:0/task:0/device:CPU:0"

    @property
    def synchronization(self):
        return "auto"

    @property
    def aggregation(self):
        return "none"

    def ref(self):
        return _Reference(self)

    experimental_ref = ref

    # ---- writing ---------------------------------------------------------------------------
    def _converted(self, value, what):
        tensor = convert_to_tensor(value._snapshot() if isinstance(value, Variable) else value, dtype=self.dtype)
        if tensor.shape != self.shape:
            raise ValueError(f"Cannot {what} value to variable '{self.name}': Shape mismatch.The variable shape "
                             f"{self.shape}, and the assigned value shape {tensor.shape} are incompatible.")
        return tensor._value

    def assign(self, value, use_locking=None, name=None, read_value=True):
        self._write_array(self._converted(value, "assign"))
        return self if read_value else None

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        delta = self._converted(delta, "add")
        self._write_array(self._read_array() + delta)
        return self if read_value else None

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        delta = self._converted(delta, "subtract")
        self._write_array(self._read_array() - delta)
        return self if read_value else None

    # ---- Python protocols ----------------------------------------------------------------
    def __len__(self):
        return len(self._snapshot())

    def __iter__(self):
        return iter(self._snapshot())

    def __getitem__(self, key):
        return self._snapshot()[key]

    def __bool__(self):
        return bool(self._read_array())

    def __float__(self):
        return float(self._read_array())

    def __int__(self):
        return int(self._read_array())

    def __index__(self):
        return self._snapshot().__index__()

    def __format__(self, spec):
        return self._snapshot().__format__(spec)

    def __hash__(self):
        raise TypeError("Variable is unhashable. Instead, use variable.ref() as the key.")

    def __repr__(self):
        text = repr(EagerTensor(self._read_array()))
        numpy_text = text[text.index("numpy=") + len("numpy="):-1]
        return f"<tf.Variable '{self._repr_name()}' shape={self.shape} dtype={self.dtype.name}, numpy={numpy_text}>"

    def _repr_name(self):
        return self.name

    def __str__(self):
        return repr(self)

    def __deepcopy__(self, memo):
        return Variable(self.numpy(), trainable=self.trainable, name=self._name)


class ModelWeight(Variable):
    """A weight of a Keras layer as a variable: its value lives in the C++ layer (the model's
    weights), read by copy and written in place."""

    def __init__(self, layer, index, name, trainable):
        # No Variable.__init__: the value lives in the layer.
        self._layer = layer
        self._index = index
        self._id = _tape.new_id()
        self._name = name
        self._weight_trainable = trainable
        self._constraint = None
        # A built layer's weights keep their shape and dtype: read once, not at every use.
        view = self._peek()
        self._dtype = dtypes.as_dtype(view.dtype)
        self._shape = TensorShape(view.shape)

    @property
    def dtype(self):
        return self._dtype

    @property
    def shape(self):
        return self._shape

    @property
    def ndim(self):
        return len(self._shape)

    def _view(self):
        from mdtrain import _core

        model = self._layer._owner()
        if model is not None:
            model._core.refresh_weights()
        return _core.tape_weight_view(self._layer._core, self._index)

    def _peek(self):
        from mdtrain import _core

        return _core.tape_weight_view(self._layer._core, self._index)

    def _read_array(self):
        value = np.array(self._view(), copy=True)
        value.flags.writeable = False
        return value

    def _write_array(self, array):
        self._view()[...] = array
        self._weights_changed()

    def _update_storage(self):
        return self._view(), self._weights_changed

    def _weights_changed(self):
        """Replicas other than the host copy (several devices) take the new values."""
        model = self._layer._owner()
        strategy = getattr(model, "_strategy", None) if model is not None else None
        if strategy is not None and (strategy.num_replicas_in_sync > 1 or
                                     any("GPU" in d.upper() for d in strategy._core.devices)):
            model._core.set_weights(model._core.get_weights())

    @property
    def trainable(self):
        return self._weight_trainable and self._layer.trainable

    @property
    def name(self):
        return self._name.rsplit("/", 1)[-1]

    @property
    def path(self):
        return self._name

    def _repr_name(self):
        return self._name

    def __deepcopy__(self, memo):
        return Variable(self.numpy(), trainable=self.trainable, name=self.name)


_tensor_module._TENSOR_TYPES = (EagerTensor, Variable)
