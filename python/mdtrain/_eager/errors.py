"""tf.errors: the exception classes eager ops raise.

InvalidArgumentError also derives from ValueError (TensorFlow's does not), so code catching either
works: an op given incompatible shapes or dtypes raises it with TensorFlow's message, ending in
"[Op:<name>]"."""


class OpError(Exception):
    """tf.errors.OpError: an op failed."""

    def __init__(self, node_def=None, op=None, message=None, *args):
        if message is None and node_def is not None and op is None:
            message, node_def = node_def, None
        super().__init__(message)
        self.message = message
        self.op = op
        self.node_def = node_def


class InvalidArgumentError(OpError, ValueError):
    """An op received an argument it cannot use (shapes, dtypes, indices)."""


class NotFoundError(OpError):
    pass


class UnimplementedError(OpError, NotImplementedError):
    pass


class OutOfRangeError(OpError):
    pass


class UnavailableError(OpError):
    """The runtime cannot reach what it needs (ParameterServerStrategy: no worker rejoined in time)."""


def invalid_argument(message, op):
    return InvalidArgumentError(f"{message} [Op:{op}]")
