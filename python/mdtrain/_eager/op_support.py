"""What every op module shares: TensorFlow's error messages, operand conversion, recording.

See ops.py for the conventions (dtypes, errors, recording on tapes)."""
from mdtrain._eager import tape as _tape
from mdtrain._eager.errors import InvalidArgumentError
from mdtrain._eager.tensor import convert_to_tensor, is_tensor_like


def _dims(shape):
    return "[" + ",".join(str(d) for d in shape) + "]"


def _invalid(message, op):
    return InvalidArgumentError(f"{message} [Op:{op}]")


def _record(name, inputs, outputs, backward):
    """Records the op on the tapes watching one of `inputs`; backward(grads) -> input grads."""
    tapes = _tape.recording_tapes(inputs)
    if tapes:
        _tape.record(tapes, name, inputs, outputs, backward)


def _tensor(x):
    return convert_to_tensor(x)


def _pair(x, y, op):
    """Two operands with one dtype: a tensor's dtype wins over a Python or NumPy value's."""
    if is_tensor_like(x) or not is_tensor_like(y):
        x = convert_to_tensor(x)
        y = convert_to_tensor(y) if is_tensor_like(y) else convert_to_tensor(y, dtype=x.dtype)
    else:
        y = convert_to_tensor(y)
        x = convert_to_tensor(x, dtype=y.dtype)
    if x.dtype != y.dtype:
        raise _invalid(f"cannot compute {op} as input #1(zero-based) was expected to be a {x.dtype.name} tensor but "
                       f"is a {y.dtype.name} tensor", op)
    return x, y


def _require_float(x, op):
    if not (x.dtype.is_floating or x.dtype.is_complex):
        raise _invalid(f"Value for attr 'T' of {x.dtype.name} is not in the list of allowed values: half, bfloat16, "
                       "float, double, complex64, complex128", op)
