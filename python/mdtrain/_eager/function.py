"""tf.function: the decorator (and call form) TF code wraps its steps in.

mdtrain runs eagerly, so a Function calls the Python function on every call: there is no graph,
no tracing and no AutoGraph conversion (Python control flow over eager tensors already does what
AutoGraph's would). What a Function does keep from TF:

- the signature: ``tf.function(fn, input_signature=None, autograph=True, jit_compile=None,
  reduce_retracing=False, ...)``, as a decorator with or without arguments and as a call;
- ``input_signature``: arguments are bound and checked against it as TF does, each tensor's
  dtype and shape compatible with its TensorSpec (a TypeError saying which argument and why);
  NumPy and Python values are converted to tensors of the spec's dtype, as TF converts them;
  parameters the signature does not cover must keep their defaults;
- methods: decorating a method gives one Function per instance (``self`` is bound, not part of
  the signature);
- ``python_function``, ``input_signature``, ``function_spec``, ``get_concrete_function``, and
  ``experimental_get_tracing_count()``, which counts the traces TF would have made (one per new
  input signature: tensors by dtype and shape, relaxed to unknown dimensions under
  ``reduce_retracing``; other Python values by value).

Outputs are what the function returns, with Python and NumPy numbers converted to tensors
(TF returns tensors from a tf.function). Why a wrapped training step is not handed to the C++
loop: see docs/eager.md, "tf.function".
"""
import functools
import inspect
import numbers
import weakref

import numpy as np

from mdtrain._eager.tensor import EagerTensor, constant


def _spec_type():
    from mdtrain._tensor_spec import TensorSpec

    return TensorSpec


def _is_structure(value):
    return isinstance(value, (tuple, list, dict))


def _flatten_specs(signature):
    TensorSpec = _spec_type()
    if isinstance(signature, TensorSpec):
        return [signature]
    if isinstance(signature, dict):
        return [s for k in sorted(signature) for s in _flatten_specs(signature[k])]
    if isinstance(signature, (tuple, list)):
        return [s for item in signature for s in _flatten_specs(item)]
    raise TypeError(f"input_signature must be a possibly nested sequence of TensorSpec objects, got {signature!r}")


def _shape_fits(spec_shape, shape):
    if spec_shape is None:
        return True
    return len(spec_shape) == len(shape) and all(a is None or a == b for a, b in zip(spec_shape, shape))


def _describe(value):
    if isinstance(value, EagerTensor):
        return f"a tensor of dtype {value.dtype.name} and shape {tuple(value.shape)}"
    return repr(value)


class _BindingError(TypeError):
    pass


def _convert_leaf(value, spec, where):
    """The value a TensorSpec admits: a tensor of its dtype and a compatible shape."""
    from mdtrain.distribute import PerReplica
    from mdtrain._eager.variables import Variable

    if isinstance(value, PerReplica):
        # A distributed dataset's element_spec describes one replica's value.
        return PerReplica([_convert_leaf(v, spec, f"{where} (replica {r})") for r, v in enumerate(value.values)])
    want = np.dtype(spec.dtype)
    if isinstance(value, Variable):
        value = value.value()
    if isinstance(value, EagerTensor):
        if np.dtype(value.dtype.as_numpy_dtype) != want:
            raise _BindingError(f"{where}: {_describe(value)} does not match {spec!r} (dtype {want.name})")
        tensor = value
    else:
        if _is_structure(value) and not isinstance(value, list):
            raise _BindingError(f"{where}: {value!r} is a structure where {spec!r} wants one tensor")
        try:
            array = np.asarray(value)
        except Exception:  # noqa: BLE001 - anything NumPy cannot read is not a tensor
            raise _BindingError(f"{where}: {value!r} cannot be converted to {spec!r}") from None
        if array.dtype.kind not in "biuf" or (array.dtype.kind == "f" and want.kind in "biu"):
            raise _BindingError(f"{where}: {value!r} cannot be converted to {spec!r} (dtype {want.name})")
        tensor = constant(array.astype(want))
    if not _shape_fits(spec.shape, tuple(tensor.shape)):
        raise _BindingError(f"{where}: {_describe(tensor)} does not match {spec!r} (shape)")
    return tensor


def _convert(value, spec, where):
    TensorSpec = _spec_type()
    if isinstance(spec, TensorSpec):
        return _convert_leaf(value, spec, where)
    if isinstance(spec, dict):
        if not isinstance(value, dict) or set(value) != set(spec):
            raise _BindingError(f"{where}: {value!r} does not have the structure of {spec!r}")
        return {k: _convert(value[k], spec[k], f"{where}[{k!r}]") for k in spec}
    if not isinstance(value, (tuple, list)) or len(value) != len(spec):
        raise _BindingError(f"{where}: {_describe(value)} does not have the structure of {spec!r}")
    items = [_convert(v, s, f"{where}[{i}]") for i, (v, s) in enumerate(zip(value, spec))]
    if hasattr(value, "_fields"):
        return type(value)(*items)
    return type(value)(items)


def _output(value):
    """Python and NumPy numbers returned by the function become tensors, as TF returns them."""
    if isinstance(value, (bool, numbers.Number, np.ndarray, np.generic)) and not isinstance(value, str):
        return constant(value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_output(v) for v in value)
    if isinstance(value, list):
        return [_output(v) for v in value]
    if isinstance(value, dict):
        return {k: _output(v) for k, v in value.items()}
    return value


def _trace_key(value, relaxed):
    """What TF's tracing tells calls apart by: tensors by dtype and shape, the rest by value."""
    from mdtrain.distribute import PerReplica
    from mdtrain._eager.variables import Variable

    if isinstance(value, (EagerTensor, Variable)):
        shape = tuple(value.shape)
        return ("tensor", value.dtype.name, len(shape) if relaxed else shape)
    if isinstance(value, PerReplica):
        return ("per_replica",) + tuple(_trace_key(v, relaxed) for v in value.values)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(_trace_key(v, relaxed) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple((k, _trace_key(value[k], relaxed)) for k in sorted(value, key=repr))
    if isinstance(value, np.ndarray):  # TF converts arrays to tensors
        return ("tensor", value.dtype.name, value.ndim if relaxed else value.shape)
    if value is None or isinstance(value, (bool, numbers.Number, str, bytes)):
        return ("value", type(value).__name__, value)
    # Other objects (a model, an iterator) by identity, without keeping them alive.
    return ("object", type(value).__name__, id(value))


class Function:
    """What tf.function returns: calls `python_function` eagerly, checking `input_signature`."""

    def __init__(self, python_function, input_signature=None, autograph=True, jit_compile=None,
                 reduce_retracing=False, name=None, instance=None):
        if not callable(python_function):
            raise TypeError(f"tf.function: {python_function!r} is not callable")
        self._python_function = python_function
        self._instance = instance
        self._autograph = bool(autograph)
        self._jit_compile = jit_compile
        self._reduce_retracing = bool(reduce_retracing)
        self._name = name or getattr(python_function, "__name__", "function")
        self._bound = weakref.WeakKeyDictionary()  # instance -> its Function (methods)
        self._traces = set()
        self._signature = self._python_signature()
        self._input_signature = None
        self._unbound_method = False
        if input_signature is not None:
            if not isinstance(input_signature, (tuple, list)):
                raise TypeError(f"input_signature must be a list or tuple of TensorSpec, got {input_signature!r}")
            _flatten_specs(input_signature)  # every leaf a TensorSpec
            self._input_signature = tuple(input_signature)
            self._check_signature_covers_parameters()
        functools.update_wrapper(self, python_function, updated=())

    def _python_signature(self):
        try:
            signature = inspect.signature(self._python_function)
        except (TypeError, ValueError):
            return None
        if self._instance is not None:
            params = list(signature.parameters.values())[1:]  # self
            signature = signature.replace(parameters=params)
        return signature

    def _check_signature_covers_parameters(self):
        if self._signature is None:
            return
        positional = [p for p in self._signature.parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        has_varargs = any(p.kind == p.VAR_POSITIONAL for p in self._signature.parameters.values())
        if self._instance is None and positional and positional[0].name in ("self", "cls") and \
                len(positional) > len(self._input_signature):
            positional = positional[1:]  # a method, decorated in its class: bound by __get__
            self._unbound_method = True
        if len(self._input_signature) > len(positional) and not has_varargs:
            raise TypeError(f"tf.function {self._name}: input_signature has {len(self._input_signature)} "
                            f"entries but the function takes {len(positional)} positional parameter(s)")
        for p in positional[len(self._input_signature):]:
            if p.default is p.empty:
                raise TypeError(f"input_signature missing type constraint for {p.name}")

    # -- TF's attributes -------------------------------------------------------------------------

    @property
    def python_function(self):
        """The function as written (for a method: the function, not bound to the instance)."""
        return self._python_function

    @property
    def input_signature(self):
        return self._input_signature

    @property
    def function_spec(self):
        return self._signature

    def experimental_get_tracing_count(self):
        """How many traces TensorFlow would have made so far (mdtrain never traces)."""
        return len(self._traces)

    def get_concrete_function(self, *args, **kwargs):
        """A callable for the given arguments' signature (or the input_signature's)."""
        if self._input_signature is None and not args and not kwargs:
            raise ValueError(f"tf.function {self._name}: get_concrete_function needs arguments or an input_signature")
        if self._input_signature is not None and (args or kwargs):
            self._bind(args, kwargs)  # checked now, as TF does
        return self

    # -- calls -----------------------------------------------------------------------------------

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        try:
            return self._bound[instance]
        except (KeyError, TypeError):
            pass
        bound = Function(self._python_function, self._input_signature, self._autograph, self._jit_compile,
                         self._reduce_retracing, self._name, instance=instance)
        try:
            self._bound[instance] = bound
        except TypeError:  # not weak-referenceable: a new Function each access
            pass
        return bound

    def _bind(self, args, kwargs):
        """(args, kwargs) converted to the input_signature, or TypeError as TF raises it."""
        if self._signature is None:
            return args, kwargs
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"Binding inputs to tf.function {self._name} failed due to `{e}`. "
                            f"Received args: {args!r} and kwargs: {kwargs!r} for signature: "
                            f"{self._input_signature!r}.") from None
        params = list(self._signature.parameters.values())
        if self._unbound_method:  # Class.method(instance, ...): the instance is not in the signature
            params = params[1:]
        specs = list(self._input_signature)
        try:
            for p in params:
                if p.kind == p.VAR_POSITIONAL:
                    values = bound.arguments.get(p.name, ())
                    if len(values) > len(specs):
                        raise _BindingError("too many positional arguments for the input_signature")
                    bound.arguments[p.name] = tuple(_convert(v, s, f"argument {p.name}[{i}]")
                                                    for i, (v, s) in enumerate(zip(values, specs)))
                    specs = specs[len(values):]
                elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                    if specs:
                        spec = specs.pop(0)
                        bound.arguments[p.name] = _convert(bound.arguments[p.name], spec, f"argument {p.name!r}")
                    elif p.name in bound.arguments and bound.arguments[p.name] is not p.default:
                        value = bound.arguments[p.name]
                        if not (type(value) is type(p.default) and value == p.default):
                            raise _BindingError(f"argument {p.name!r} is not in the input_signature and must "
                                                f"keep its default {p.default!r}, got {value!r}")
        except _BindingError as e:
            raise TypeError(f"Binding inputs to tf.function {self._name} failed: {e}. Signature: "
                            f"{self._input_signature!r}.") from None
        return bound.args, bound.kwargs

    def __call__(self, *args, **kwargs):
        if self._input_signature is not None:
            args, kwargs = self._bind(args, kwargs)
            self._traces.add("input_signature")
        else:
            self._record_trace(args, kwargs)
        if self._instance is not None:
            result = self._python_function(self._instance, *args, **kwargs)
        else:
            result = self._python_function(*args, **kwargs)
        return _output(result)

    def _record_trace(self, args, kwargs):
        exact = _trace_key((args, kwargs), relaxed=False)
        if exact in self._traces:
            return
        if self._reduce_retracing:
            # TF's first trace is exact; a later call differing in shapes only generalizes them.
            relaxed = ("relaxed", _trace_key((args, kwargs), relaxed=True))
            if relaxed in self._traces:
                return
            if any(isinstance(k, tuple) and k and k[0] != "relaxed" and
                   _trace_key_relaxed_equal(k, relaxed[1]) for k in self._traces):
                self._traces.add(relaxed)
                return
        self._traces.add(exact)

    def __repr__(self):
        return f"<mdtrain tf.function {self._name}>"


def _trace_key_relaxed_equal(exact_key, relaxed_key):
    """Whether an exact trace key becomes `relaxed_key` once shapes are reduced to ranks."""

    def relax(key):
        if isinstance(key, tuple) and len(key) == 3 and key[0] == "tensor" and isinstance(key[2], tuple):
            return ("tensor", key[1], len(key[2]))
        if isinstance(key, tuple):
            return tuple(relax(k) for k in key)
        return key

    return relax(exact_key) == relaxed_key


def function(func=None, input_signature=None, autograph=True, jit_compile=None, reduce_retracing=False,
             experimental_implements=None, experimental_autograph_options=None, experimental_attributes=None,
             experimental_relax_shapes=None, experimental_compile=None, experimental_follow_type_hints=None):
    """tf.function(func=None, input_signature=None, autograph=True, jit_compile=None,
    reduce_retracing=False, ...): a Function calling `func` eagerly (see this module's docstring).

    Used as ``@tf.function``, ``@tf.function(input_signature=[...])`` or ``tf.function(fn)``.
    ``jit_compile`` and ``autograph`` are accepted and change nothing (there is no XLA and no
    graph); the deprecated ``experimental_relax_shapes`` / ``experimental_compile`` are the
    aliases of ``reduce_retracing`` / ``jit_compile``, as in TF."""
    if experimental_relax_shapes is not None:
        reduce_retracing = reduce_retracing or bool(experimental_relax_shapes)
    if experimental_compile is not None and jit_compile is None:
        jit_compile = experimental_compile

    def decorate(fn):
        return Function(fn, input_signature=input_signature, autograph=autograph, jit_compile=jit_compile,
                        reduce_retracing=reduce_retracing)

    return decorate if func is None else decorate(func)
